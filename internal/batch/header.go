package batch

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/kepoch/kepoch/internal/compress"
)

// Layout of a v2 record batch header. Offsets are from the start of the
// batch; the CRC covers everything from the attributes to the end.
const (
	// HeaderSize is the size of a v2 batch header, records excluded.
	HeaderSize = 61
	// LogOverhead is the size of the base offset and length fields, which
	// the length does not count.
	LogOverhead = 12

	offLength        = 8
	offLeaderEpoch   = 12
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offLastDelta     = 23
	offBaseTimestamp = 27
	offMaxTimestamp  = 35
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offNumRecords    = 57

	// minLength is the smallest valid length field of a v2 batch.
	minLength = HeaderSize - LogOverhead
	// minLegacyLength is the smallest length field of a v0 message
	// (Kafka's LegacyRecord.RECORD_OVERHEAD_V0); anything shorter is
	// corrupt whatever its magic.
	minLegacyLength = 14
	// minRecordSize is the smallest encoded record: a length varint and
	// six one-byte fields (attributes, timestamp delta, offset delta, key
	// length, value length, header count).
	minRecordSize = 7
)

// Magic is the only message format version this package decodes.
const Magic = 2

// No-value markers of the header fields, as Kafka writes them.
const (
	NoProducerID    int64 = -1
	NoProducerEpoch int16 = -1
	NoSequence      int32 = -1
	NoLeaderEpoch   int32 = -1
	NoTimestamp     int64 = -1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TimestampType says what a batch's timestamps mean.
type TimestampType int8

// The timestamp types.
const (
	// CreateTime: each record carries the producer's timestamp.
	CreateTime TimestampType = 0
	// LogAppendTime: the broker stamped the batch; every record's
	// timestamp is the batch's MaxTimestamp.
	LogAppendTime TimestampType = 1
)

// Attributes is the attributes field of a batch header.
type Attributes int16

// Attribute bits.
const (
	AttrCodecMask     Attributes = 0x07
	AttrLogAppendTime Attributes = 0x08
	AttrTransactional Attributes = 0x10
	AttrControl       Attributes = 0x20
	// AttrDeleteHorizon marks a batch whose base timestamp is the delete
	// horizon set by the log cleaner (KIP-534).
	AttrDeleteHorizon Attributes = 0x40
)

// Codec returns the compression codec (possibly an invalid value 5 to 7).
func (a Attributes) Codec() compress.Codec { return compress.Codec(a & AttrCodecMask) }

// TimestampType returns CreateTime or LogAppendTime.
func (a Attributes) TimestampType() TimestampType {
	if a&AttrLogAppendTime != 0 {
		return LogAppendTime
	}
	return CreateTime
}

// Transactional reports whether the batch was written in a transaction.
func (a Attributes) Transactional() bool { return a&AttrTransactional != 0 }

// Control reports whether the batch holds control records (transaction
// markers) rather than data.
func (a Attributes) Control() bool { return a&AttrControl != 0 }

// HasDeleteHorizon reports whether the base timestamp is a delete horizon.
func (a Attributes) HasDeleteHorizon() bool { return a&AttrDeleteHorizon != 0 }

// Header is the fixed part of a v2 record batch.
type Header struct {
	// BaseOffset is the offset of the batch's first offset slot (0 in a
	// produce request: the broker assigns offsets).
	BaseOffset int64
	// Length counts the bytes after the length field.
	Length int32
	// PartitionLeaderEpoch is the leader epoch the batch was appended in
	// (KIP-101/320); -1 in a produce request.
	PartitionLeaderEpoch int32
	// Magic is the format version, 2.
	Magic int8
	// CRC is the stored CRC-32C of the bytes from the attributes on.
	CRC uint32
	// Attributes holds the codec, timestamp type and flags.
	Attributes Attributes
	// LastOffsetDelta is the last offset slot relative to BaseOffset. It
	// can exceed NumRecords-1 after compaction.
	LastOffsetDelta int32
	// BaseTimestamp is the timestamp record deltas are relative to.
	BaseTimestamp int64
	// MaxTimestamp is the largest record timestamp (the append time for
	// LogAppendTime batches).
	MaxTimestamp int64
	// ProducerID, ProducerEpoch and BaseSequence identify an idempotent
	// or transactional write; -1 otherwise.
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// NumRecords is the number of records in the batch.
	NumRecords int32
}

// LastOffset returns the offset of the batch's last offset slot.
func (h *Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset returns the offset following the batch: where a consumer that
// has processed the batch continues, whatever the batch held.
func (h *Header) NextOffset() int64 { return h.LastOffset() + 1 }

// Size returns the size of the whole batch in bytes.
func (h *Header) Size() int { return LogOverhead + int(h.Length) }

// LastSequence returns the sequence number of the batch's last offset slot,
// wrapping past math.MaxInt32 to 0 as Kafka does, or NoSequence when the
// batch has none.
func (h *Header) LastSequence() int32 {
	if h.BaseSequence == NoSequence {
		return NoSequence
	}
	return addSequence(h.BaseSequence, h.LastOffsetDelta)
}

// addSequence adds n to a producer sequence number, wrapping to 0 after
// math.MaxInt32 (Kafka's DefaultRecordBatch.incrementSequence).
func addSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// readHeader parses the first HeaderSize bytes of b, which must be that long.
func readHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	h.BaseOffset = int64(binary.BigEndian.Uint64(b))
	h.Length = int32(binary.BigEndian.Uint32(b[offLength:]))
	h.PartitionLeaderEpoch = int32(binary.BigEndian.Uint32(b[offLeaderEpoch:]))
	h.Magic = int8(b[offMagic])
	h.CRC = binary.BigEndian.Uint32(b[offCRC:])
	h.Attributes = Attributes(binary.BigEndian.Uint16(b[offAttributes:]))
	h.LastOffsetDelta = int32(binary.BigEndian.Uint32(b[offLastDelta:]))
	h.BaseTimestamp = int64(binary.BigEndian.Uint64(b[offBaseTimestamp:]))
	h.MaxTimestamp = int64(binary.BigEndian.Uint64(b[offMaxTimestamp:]))
	h.ProducerID = int64(binary.BigEndian.Uint64(b[offProducerID:]))
	h.ProducerEpoch = int16(binary.BigEndian.Uint16(b[offProducerEpoch:]))
	h.BaseSequence = int32(binary.BigEndian.Uint32(b[offBaseSequence:]))
	h.NumRecords = int32(binary.BigEndian.Uint32(b[offNumRecords:]))
}

// appendHeader appends the HeaderSize bytes of h as they stand (Length and
// CRC included; finish fixes them up).
func appendHeader(dst []byte, h *Header) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.BaseOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Length))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.PartitionLeaderEpoch))
	dst = append(dst, byte(h.Magic))
	dst = binary.BigEndian.AppendUint32(dst, h.CRC)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Attributes))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.LastOffsetDelta))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.BaseTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.MaxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.ProducerEpoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.BaseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.NumRecords))
	return dst
}

// finish writes the length and the CRC of the batch b, whose header and
// records are otherwise complete.
func finish(b []byte) {
	binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-LogOverhead))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
}

// StoredCRC returns the CRC-32C stored in the header of the v2 batch that b
// begins with (as encoded, not verified), and false if b is too short or
// not v2.
func StoredCRC(b []byte) (uint32, bool) {
	if len(b) < HeaderSize || b[offMagic] != Magic {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[offCRC:]), true
}
