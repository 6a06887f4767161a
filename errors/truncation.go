package errors

import (
	"strconv"
	"strings"
)

// Position is a consumer position: the next offset to read and the leader
// epoch of the record before it (-1 when unknown).
type Position struct {
	Offset      int64
	LeaderEpoch int32
}

func (p Position) String() string {
	return strconv.FormatInt(p.Offset, 10) + "@" + strconv.FormatInt(int64(p.LeaderEpoch), 10)
}

// Divergence is the truncation found on one partition.
//
// Consumed is the position the consumer had reached. Divergent is the first
// offset, with its leader epoch, at which the leader's log no longer matches
// what was consumed: records in [Divergent.Offset, Consumed.Offset) were
// consumed and are no longer in the log (they may have been replaced).
// Unknown is true when the leader could not locate the divergence (it
// answered OffsetForLeaderEpoch with epoch -1 and end offset -1); Divergent
// is then {-1, -1} and means nothing.
type Divergence struct {
	Topic     string
	Partition int32
	Consumed  Position
	Divergent Position
	Unknown   bool
}

func (d Divergence) String() string {
	var b strings.Builder
	b.WriteString(d.Topic)
	b.WriteByte('[')
	b.WriteString(strconv.FormatInt(int64(d.Partition), 10))
	b.WriteString("] consumed to ")
	b.WriteString(d.Consumed.String())
	if d.Unknown {
		b.WriteString(", divergence point unknown")
	} else {
		b.WriteString(", log diverges at ")
		b.WriteString(d.Divergent.String())
	}
	return b.String()
}

// LogTruncationError reports log truncation (KIP-320) on one or more
// partitions.
//
// It matches both ErrLogTruncation and ErrOffsetOutOfRange with errors.Is:
// code that treats any out-of-range condition as "the position is no longer
// valid" keeps working, and code that cares can tell truncation apart.
type LogTruncationError struct {
	Divergences []Divergence
}

func (e *LogTruncationError) Error() string {
	var b strings.Builder
	b.WriteString("kepoch: log truncation detected")
	for i, d := range e.Divergences {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(d.String())
	}
	return b.String()
}

// Is reports whether target is ErrLogTruncation or ErrOffsetOutOfRange.
func (e *LogTruncationError) Is(target error) bool {
	return target == ErrLogTruncation || target == error(ErrOffsetOutOfRange)
}

// For returns the divergence reported for one partition.
func (e *LogTruncationError) For(topic string, partition int32) (Divergence, bool) {
	for _, d := range e.Divergences {
		if d.Topic == topic && d.Partition == partition {
			return d, true
		}
	}
	return Divergence{}, false
}
