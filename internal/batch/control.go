package batch

import (
	"encoding/binary"
	"strconv"

	"github.com/kepoch/kepoch/internal/compress"
)

// ControlType is the type of a control record, from its key.
type ControlType int16

// Control record types. Only Abort and Commit appear in user partitions; the
// others belong to KRaft's metadata log and are reported as they are.
const (
	// ControlNone: the batch is not a control batch, or has no records.
	ControlNone   ControlType = -1
	ControlAbort  ControlType = 0
	ControlCommit ControlType = 1
)

// String returns "abort", "commit", "none" or "control(N)".
func (t ControlType) String() string {
	switch t {
	case ControlNone:
		return "none"
	case ControlAbort:
		return "abort"
	case ControlCommit:
		return "commit"
	}
	return "control(" + strconv.Itoa(int(t)) + ")"
}

// ControlMarker is the content of a control batch's first record, as the
// Java consumer reads it.
type ControlMarker struct {
	// Type is the control record type, ControlNone if there is none.
	Type ControlType
	// Version is the version of the control record key.
	Version int16
	// CoordinatorEpoch is the epoch of the transaction coordinator that
	// wrote an Abort or Commit marker; -1 for other types.
	CoordinatorEpoch int32
}

// Sizes of the control record key and of a transaction marker value:
// int16 version + int16 type, and int16 version + int32 coordinator epoch.
const (
	controlKeySize   = 4
	txnMarkerValSize = 6
)

// parseControl decodes a control record's key and value. It returns false
// when the key is too short, or the value of an abort or commit marker is.
// Newer versions are parsed as version 0, as the Java client does.
func parseControl(key, value []byte) (ControlMarker, bool) {
	m := ControlMarker{Type: ControlNone, CoordinatorEpoch: -1}
	if len(key) < controlKeySize {
		return m, false
	}
	m.Version = int16(binary.BigEndian.Uint16(key))
	m.Type = ControlType(binary.BigEndian.Uint16(key[2:]))
	if m.Type == ControlAbort || m.Type == ControlCommit {
		if len(value) < txnMarkerValSize {
			return m, false
		}
		m.CoordinatorEpoch = int32(binary.BigEndian.Uint32(value[2:]))
	}
	return m, true
}

// AppendControlBatch appends a transaction marker batch: one uncompressed
// control record of type t (ControlAbort or ControlCommit, or any other
// value for tests) with the given coordinator epoch, at s.BaseOffset, with
// s's leader epoch and producer id and epoch. Like Kafka, it writes
// BaseSequence -1 and sets the transactional and control attributes; s's
// codec and sequence are ignored.
func AppendControlBatch(dst []byte, s Spec, t ControlType, coordinatorEpoch int32, timestamp int64) ([]byte, error) {
	key := binary.BigEndian.AppendUint16(make([]byte, 0, controlKeySize), 0)
	key = binary.BigEndian.AppendUint16(key, uint16(t))
	value := binary.BigEndian.AppendUint16(make([]byte, 0, txnMarkerValSize), 0)
	value = binary.BigEndian.AppendUint32(value, uint32(coordinatorEpoch))
	h := Header{
		BaseOffset:           s.BaseOffset,
		PartitionLeaderEpoch: s.PartitionLeaderEpoch,
		Attributes:           AttrTransactional | AttrControl | Attributes(compress.None),
		BaseTimestamp:        timestamp,
		MaxTimestamp:         timestamp,
		ProducerID:           s.ProducerID,
		ProducerEpoch:        s.ProducerEpoch,
		BaseSequence:         NoSequence,
	}
	if s.LogAppendTime {
		h.Attributes |= AttrLogAppendTime
	}
	rec := Record{Offset: s.BaseOffset, Timestamp: timestamp, Key: key, Value: value}
	return AppendBatch(dst, &h, []Record{rec}, nil)
}
