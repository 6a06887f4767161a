package errors

import (
	"strconv"
	"strings"
)

// PartitionError records an error and the partition, position and operation
// that caused it, in the style of io/fs.PathError.
//
// Partition, Offset and LeaderEpoch are -1 when they do not apply (an error
// about a whole topic has Partition -1). Op names what kepoch
// was doing: "fetch", "produce", "list-offsets", "validate" (an
// OffsetForLeaderEpoch round trip), "commit", "lookup" (a metadata lookup)…
type PartitionError struct {
	Op          string
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Err         error
}

func (e *PartitionError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteByte(' ')
	b.WriteString(e.Topic)
	if e.Partition >= 0 {
		b.WriteByte('[')
		b.WriteString(strconv.FormatInt(int64(e.Partition), 10))
		b.WriteByte(']')
	}
	if e.Offset >= 0 {
		b.WriteString(" offset ")
		b.WriteString(strconv.FormatInt(e.Offset, 10))
	}
	if e.LeaderEpoch >= 0 {
		b.WriteString(" epoch ")
		b.WriteString(strconv.FormatInt(int64(e.LeaderEpoch), 10))
	}
	b.WriteString(": ")
	if e.Err == nil {
		b.WriteString("<nil>")
	} else {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *PartitionError) Unwrap() error { return e.Err }
