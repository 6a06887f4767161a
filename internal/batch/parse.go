package batch

import (
	"fmt"
	"slices"
)

// What went wrong in a record, for parser.reason.
const (
	failTruncated = iota + 1
	failOverflow
	failNegative
	failPastEnd
	failHeaderCount
	failLengthMismatch
	failOffsetDelta
	failEmpty
)

// parser reads the records of one batch from its uncompressed bytes.
type parser struct {
	h    *Header
	data []byte
	p    int   // start of the next record
	n    int   // records read
	prev int32 // offset delta of the previous record

	// Set on failure.
	code  int
	field string
	val   int64
}

func (p *parser) failVarint(field string, q int) bool {
	p.field = field
	if q == errOverflow {
		p.code = failOverflow
	} else {
		p.code = failTruncated
	}
	return false
}

func (p *parser) failWith(code int, field string, v int64) bool {
	p.code, p.field, p.val = code, field, v
	return false
}

// reason describes the failure of the last record call.
func (p *parser) reason() string {
	switch p.code {
	case failTruncated:
		return p.field + " varint runs past the end of the record"
	case failOverflow:
		return p.field + " varint overflows"
	case failNegative:
		return fmt.Sprintf("negative %s %d", p.field, p.val)
	case failPastEnd:
		if p.field == "record length" {
			return fmt.Sprintf("record length %d runs past the end of the batch's records", p.val)
		}
		return fmt.Sprintf("%s of %d bytes runs past the end of the record", p.field, p.val)
	case failEmpty:
		return "empty record (no attributes byte)"
	case failHeaderCount:
		return fmt.Sprintf("header count %d cannot fit in the record", p.val)
	case failLengthMismatch:
		return fmt.Sprintf("record length mismatch: the fields end %d bytes from the declared end", p.val)
	case failOffsetDelta:
		return fmt.Sprintf("offset delta %d is not above the previous record's and within the last offset delta %d", p.val, p.h.LastOffsetDelta)
	}
	return "unknown failure"
}

// slot reads a nullable byte field of rec at q: Len -1 for length -1.
// rec is a prefix of p.data, so the slot is also a position in p.data.
func (p *parser) slot(rec []byte, q int, field string) (Slot, int, bool) {
	l, q := readVarint(rec, q)
	if q < 0 {
		return Slot{}, q, p.failVarint(field+" length", q)
	}
	if l < 0 {
		if l == -1 {
			return Slot{At: int32(q), Len: -1}, q, true
		}
		return Slot{}, q, p.failWith(failNegative, field+" length", int64(l))
	}
	if int(l) > len(rec)-q {
		return Slot{}, q, p.failWith(failPastEnd, field, int64(l))
	}
	return Slot{At: int32(q), Len: l}, q + int(l), true
}

// record parses the next record into r, appending its headers to *hdrs.
// Every field of r is written.
func (p *parser) record(r *Record, hdrs *[]RecordHeader) bool {
	var x Ref
	if !p.ref(&x, hdrs) {
		return false
	}
	*r = x.Record(p.data, *hdrs, p.h.PartitionLeaderEpoch)
	return true
}

// ref parses the next record into r, appending its headers to *hdrs (r
// points at them by index). Every field of r is written.
func (p *parser) ref(r *Ref, hdrs *[]RecordHeader) bool {
	length, q := readVarint(p.data, p.p)
	if q < 0 {
		return p.failVarint("record length", q)
	}
	if length < 0 {
		return p.failWith(failNegative, "record length", int64(length))
	}
	if int(length) > len(p.data)-q {
		return p.failWith(failPastEnd, "record length", int64(length))
	}
	end := q + int(length)
	rec := p.data[:end]
	if q >= end {
		return p.failWith(failEmpty, "", 0)
	}
	attrs := int8(rec[q])
	tsDelta, q := readVarlong(rec, q+1)
	if q < 0 {
		return p.failVarint("timestamp delta", q)
	}
	offDelta, q := readVarint(rec, q)
	if q < 0 {
		return p.failVarint("offset delta", q)
	}
	key, q, ok := p.slot(rec, q, "key")
	if !ok {
		return false
	}
	value, q, ok := p.slot(rec, q, "value")
	if !ok {
		return false
	}
	nh, q := readVarint(rec, q)
	if q < 0 {
		return p.failVarint("header count", q)
	}
	hat := len(*hdrs)
	if nh != 0 {
		if nh < 0 {
			return p.failWith(failNegative, "header count", int64(nh))
		}
		// A header takes at least two bytes (key and value lengths).
		if int(nh) > (end-q)/2 {
			return p.failWith(failHeaderCount, "", int64(nh))
		}
		*hdrs = slices.Grow(*hdrs, int(nh))
		for range nh {
			var kl int32
			kl, q = readVarint(rec, q)
			if q < 0 {
				return p.failVarint("header key length", q)
			}
			if kl < 0 {
				return p.failWith(failNegative, "header key length", int64(kl))
			}
			if int(kl) > end-q {
				return p.failWith(failPastEnd, "header key", int64(kl))
			}
			hk := rec[q : q+int(kl) : q+int(kl)]
			var hv Slot
			if hv, q, ok = p.slot(rec, q+int(kl), "header value"); !ok {
				return false
			}
			*hdrs = append(*hdrs, RecordHeader{Key: hk, Value: hv.In(rec)})
		}
	}
	if q != end {
		return p.failWith(failLengthMismatch, "", int64(end-q))
	}
	if (p.n > 0 && offDelta <= p.prev) || offDelta < 0 || offDelta > p.h.LastOffsetDelta {
		return p.failWith(failOffsetDelta, "", int64(offDelta))
	}
	h := p.h
	r.Offset = h.BaseOffset + int64(offDelta)
	if h.Attributes&AttrLogAppendTime != 0 {
		r.Timestamp = h.MaxTimestamp
	} else {
		r.Timestamp = h.BaseTimestamp + tsDelta
	}
	r.Key, r.Value = key, value
	r.HeadersAt, r.HeadersLen = int32(hat), nh
	r.Attributes = attrs
	p.prev = offDelta
	p.n++
	p.p = end
	return true
}
