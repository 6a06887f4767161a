package batch

import "time"

// RecordHeader is one record header. A decoded Key is never nil (Kafka
// header keys are non-null strings); a nil Value is a null header value, a
// non-nil empty Value an empty one.
type RecordHeader struct {
	Key   []byte
	Value []byte
}

// Record is one record of a batch. Decoded slices alias the fetched bytes
// or the Iterator's buffers; see Iterator for how long they stay valid.
type Record struct {
	// Offset is the record's absolute offset (base offset plus delta).
	Offset int64
	// Timestamp is in milliseconds since the Unix epoch: the base
	// timestamp plus the record's delta, or the batch's MaxTimestamp for
	// LogAppendTime batches.
	Timestamp int64
	// Key and Value are nil for a null key or value, and non-nil (possibly
	// empty) otherwise.
	Key   []byte
	Value []byte
	// Headers are the record headers, nil when there are none.
	Headers []RecordHeader
	// LeaderEpoch is the batch's partition leader epoch.
	LeaderEpoch int32
	// Attributes is the record-level attributes byte (unused by Kafka,
	// kept so that re-encoding is exact).
	Attributes int8
}

// Time returns Timestamp as a time.Time.
func (r *Record) Time() time.Time { return time.UnixMilli(r.Timestamp) }

// Slot locates a key or value in its batch's Payload: Payload[At:At+Len],
// or null when Len is -1.
type Slot struct{ At, Len int32 }

// In returns the slot's bytes in payload: nil for a null slot, a
// capacity-limited sub-slice otherwise.
func (s Slot) In(payload []byte) []byte {
	if s.Len < 0 {
		return nil
	}
	end := int(s.At) + int(s.Len)
	return payload[s.At:end:end]
}

// Ref is a record of a batch decoded with Options.Refs: its offset and
// timestamp (as in Record), and where its key, value and headers are.
// It holds no pointer: a slice of Refs is memory the garbage collector
// does not scan, however many records it describes.
type Ref struct {
	Offset     int64
	Timestamp  int64
	Key, Value Slot
	// The record's headers are Batch.Headers[HeadersAt :
	// HeadersAt+HeadersLen].
	HeadersAt, HeadersLen int32
	// Attributes is the record-level attributes byte.
	Attributes int8
}

// Record returns the record x describes in a batch whose records are
// payload and whose record headers are headers (Batch.Payload and
// Batch.Headers), written in leader epoch epoch.
func (x *Ref) Record(payload []byte, headers []RecordHeader, epoch int32) Record {
	r := Record{Offset: x.Offset, Timestamp: x.Timestamp, Key: x.Key.In(payload), Value: x.Value.In(payload),
		LeaderEpoch: epoch, Attributes: x.Attributes}
	if x.HeadersLen > 0 {
		end := x.HeadersAt + x.HeadersLen
		r.Headers = headers[x.HeadersAt:end:end]
	}
	return r
}
