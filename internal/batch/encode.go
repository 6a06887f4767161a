package batch

import (
	"fmt"
	"math"
	"sync"

	"encoding/binary"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
)

// ErrEncode is wrapped by every error of the encoding functions that is not
// a compression error: a value that does not fit the wire format, or a
// Builder used out of order.
var ErrEncode = errors.New("kepoch: cannot encode record batch")

var defaultCompressor = sync.OnceValue(func() *compress.Compressor {
	c, err := compress.NewCompressor()
	if err != nil {
		panic(err) // default levels are valid
	}
	return c
})

// recordBodySize returns the size of a record after its length varint.
func recordBodySize(tsDelta int64, offDelta int32, key, value []byte, headers []RecordHeader) int {
	n := 1 + varintSize(tsDelta) + varintSize(int64(offDelta)) +
		bytesFieldSize(key) + bytesFieldSize(value) + varintSize(int64(len(headers)))
	for i := range headers {
		n += varintSize(int64(len(headers[i].Key))) + len(headers[i].Key) + bytesFieldSize(headers[i].Value)
	}
	return n
}

// RecordSize returns the encoded size of a record with these fields, at
// most the bytes it adds to an uncompressed batch, assuming timestamp and
// offset deltas that fit in 5 bytes each. Producers use it to fill batches
// up to a byte limit.
func RecordSize(key, value []byte, headers []RecordHeader) int {
	body := recordBodySize(math.MaxInt32, math.MaxInt32, key, value, headers)
	return varintSize(int64(body)) + body
}

// appendRecord appends one encoded record.
func appendRecord(dst []byte, attrs int8, tsDelta int64, offDelta int32, key, value []byte, headers []RecordHeader) ([]byte, error) {
	body := recordBodySize(tsDelta, offDelta, key, value, headers)
	if body > math.MaxInt32 || len(headers) > math.MaxInt32 {
		return dst, fmt.Errorf("%w: record of %d bytes", ErrEncode, body)
	}
	for i := range headers {
		if len(headers[i].Key) > math.MaxInt32 || len(headers[i].Value) > math.MaxInt32 {
			return dst, fmt.Errorf("%w: header of %d+%d bytes", ErrEncode, len(headers[i].Key), len(headers[i].Value))
		}
	}
	if len(key) > math.MaxInt32 || len(value) > math.MaxInt32 {
		return dst, fmt.Errorf("%w: key or value of %d+%d bytes", ErrEncode, len(key), len(value))
	}
	dst = binary.AppendVarint(dst, int64(body))
	dst = append(dst, byte(attrs))
	dst = binary.AppendVarint(dst, tsDelta)
	dst = binary.AppendVarint(dst, int64(offDelta))
	dst = appendBytesField(dst, key)
	dst = appendBytesField(dst, value)
	dst = binary.AppendVarint(dst, int64(len(headers)))
	for i := range headers {
		dst = binary.AppendVarint(dst, int64(len(headers[i].Key)))
		dst = append(dst, headers[i].Key...)
		dst = appendBytesField(dst, headers[i].Value)
	}
	return dst, nil
}

// compressAndFinish appends the (compressed) records to the header already
// at dst[start:start+HeaderSize] and writes the length and CRC.
func compressAndFinish(dst []byte, start int, records []byte, codec compress.Codec, c *compress.Compressor) ([]byte, error) {
	if c == nil {
		c = defaultCompressor()
	}
	out, err := c.Compress(dst, records, codec)
	if err != nil {
		return dst[:start], err
	}
	return seal(out, start)
}

// seal writes the length and CRC of the batch at out[start:], whose header
// and records are in place.
func seal(out []byte, start int) ([]byte, error) {
	if len(out)-start-LogOverhead > math.MaxInt32 {
		return out[:start], fmt.Errorf("%w: batch of %d bytes", ErrEncode, len(out)-start)
	}
	finish(out[start:])
	return out, nil
}

// AppendBatch appends one complete batch to dst: the header fields of h as
// given (BaseOffset, PartitionLeaderEpoch, Attributes, LastOffsetDelta,
// BaseTimestamp, MaxTimestamp, producer fields), NumRecords = len(records),
// Magic 2, and the Length and CRC it computes. Each record is written with
// offset delta r.Offset-h.BaseOffset and timestamp delta
// r.Timestamp-h.BaseTimestamp, unchecked: this is the exact encoder for
// tests and for re-encoding decoded batches; producers use Builder.
// Records are compressed with the codec of h.Attributes by c (nil: a
// default Compressor).
func AppendBatch(dst []byte, h *Header, records []Record, c *compress.Compressor) ([]byte, error) {
	if len(records) > math.MaxInt32 {
		return dst, fmt.Errorf("%w: %d records", ErrEncode, len(records))
	}
	hh := *h
	hh.Magic, hh.NumRecords, hh.Length, hh.CRC = Magic, int32(len(records)), 0, 0
	start := len(dst)
	dst = appendHeader(dst, &hh)
	var raw []byte
	if hh.Attributes.Codec() == compress.None {
		raw = dst // records go straight after the header
	}
	for i := range records {
		r := &records[i]
		delta := r.Offset - h.BaseOffset
		if delta < math.MinInt32 || delta > math.MaxInt32 {
			return dst[:start], fmt.Errorf("%w: offset %d is out of range of base offset %d", ErrEncode, r.Offset, h.BaseOffset)
		}
		var err error
		raw, err = appendRecord(raw, r.Attributes, r.Timestamp-h.BaseTimestamp, int32(delta), r.Key, r.Value, r.Headers)
		if err != nil {
			return dst[:start], err
		}
	}
	if hh.Attributes.Codec() == compress.None {
		if len(raw)-start-LogOverhead > math.MaxInt32 {
			return dst[:start], fmt.Errorf("%w: batch of %d bytes", ErrEncode, len(raw)-start)
		}
		finish(raw[start:])
		return raw, nil
	}
	return compressAndFinish(dst, start, raw, hh.Attributes.Codec(), c)
}

// Spec describes the batch a Builder writes: the header fields the records
// do not determine. DefaultSpec returns the values of a plain,
// non-idempotent produce.
type Spec struct {
	// BaseOffset is 0 for a produce request.
	BaseOffset int64
	// PartitionLeaderEpoch is NoLeaderEpoch (-1) for a produce request.
	PartitionLeaderEpoch int32
	// ProducerID, ProducerEpoch and BaseSequence are the idempotent
	// producer's identity and the sequence of the first record, or
	// NoProducerID, NoProducerEpoch and NoSequence.
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Codec compresses the records.
	Codec compress.Codec
	// Transactional marks a batch written inside a transaction.
	Transactional bool
	// LogAppendTime sets the LogAppendTime timestamp type (brokers and
	// tests; producers write CreateTime).
	LogAppendTime bool
}

// DefaultSpec returns a Spec for a non-idempotent, uncompressed produce:
// base offset 0 and -1 for the leader epoch and the producer fields.
func DefaultSpec() Spec {
	return Spec{
		PartitionLeaderEpoch: NoLeaderEpoch,
		ProducerID:           NoProducerID,
		ProducerEpoch:        NoProducerEpoch,
		BaseSequence:         NoSequence,
		Codec:                compress.None,
	}
}

func (s *Spec) attributes() Attributes {
	a := Attributes(s.Codec) & AttrCodecMask
	if s.Transactional {
		a |= AttrTransactional
	}
	if s.LogAppendTime {
		a |= AttrLogAppendTime
	}
	return a
}

// Builder accumulates the records of one batch and writes it compressed.
// Its buffers are reused across Reset calls, so a producer keeps one
// Builder per in-progress batch slot. A Builder is not safe for concurrent
// use.
type Builder struct {
	comp    *compress.Compressor
	spec    Spec
	records []byte // uncompressed records: own, or in place in dst
	own     []byte // the Builder's records buffer
	dst     []byte // ResetInto's buffer; nil after Reset
	into    bool   // ResetInto: Finish appends to dst
	out     []byte // the last finished batch
	n       int32
	last    int32 // last offset delta
	baseTS  int64
	maxTS   int64
	started bool
}

// NewBuilder returns a Builder compressing with c (nil: a default
// Compressor). Call Reset before the first Append.
func NewBuilder(c *compress.Compressor) *Builder {
	if c == nil {
		c = defaultCompressor()
	}
	return &Builder{comp: c}
}

// Reset starts a new batch described by s, discarding any records appended
// and invalidating the slice the last Finish returned.
func (b *Builder) Reset(s Spec) {
	b.reset(s)
	b.records = b.own[:0]
}

func (b *Builder) reset(s Spec) {
	if cap(b.records) > cap(b.own) && !b.inDst() {
		b.own = b.records[:0] // grown by Append
	}
	b.spec = s
	b.dst, b.into = nil, false
	b.n, b.last, b.baseTS, b.maxTS = 0, -1, 0, 0
	b.started = true
}

// ResetInto is Reset for a batch that Finish appends to dst. Uncompressed
// records are written in place, after room for the header in dst's spare
// capacity, so that Finish only writes the header: give dst the capacity
// the batch needs (HeaderSize plus the records' RecordSize) to spare a
// copy. Finish then returns dst with the batch appended, and the Builder
// keeps no reference to it.
func (b *Builder) ResetInto(s Spec, dst []byte) {
	b.reset(s)
	b.dst, b.into = dst, true
	b.records = b.own[:0]
	if s.Codec == compress.None && cap(dst)-len(dst) >= HeaderSize {
		at := len(dst) + HeaderSize
		b.records = dst[at:at]
	}
}

// Len returns the number of records appended since Reset.
func (b *Builder) Len() int { return int(b.n) }

// Size returns the size the batch would have uncompressed: the header plus
// the records appended so far.
func (b *Builder) Size() int { return HeaderSize + len(b.records) }

// Append adds a record at the next offset slot. The first record's
// timestamp becomes the base timestamp; later timestamps may be smaller
// (negative deltas). key and value keep their nil-ness (null vs empty).
func (b *Builder) Append(timestamp int64, key, value []byte, headers []RecordHeader) error {
	if b.last == math.MaxInt32 {
		return fmt.Errorf("%w: more than %d offset slots", ErrEncode, math.MaxInt32)
	}
	return b.AppendAt(b.last+1, timestamp, key, value, headers)
}

// AppendAt adds a record at the given offset delta, which must be larger
// than the previous record's (gaps are allowed, as in a compacted batch).
func (b *Builder) AppendAt(offsetDelta int32, timestamp int64, key, value []byte, headers []RecordHeader) error {
	if !b.started {
		return fmt.Errorf("%w: Append before Reset", ErrEncode)
	}
	if offsetDelta <= b.last {
		return fmt.Errorf("%w: offset delta %d after %d", ErrEncode, offsetDelta, b.last)
	}
	if b.n == 0 {
		b.baseTS, b.maxTS = timestamp, timestamp
	}
	tsDelta := timestamp - b.baseTS
	if (timestamp < b.baseTS) != (tsDelta < 0) {
		return fmt.Errorf("%w: timestamp %d is out of range of base timestamp %d", ErrEncode, timestamp, b.baseTS)
	}
	rec, err := appendRecord(b.records, 0, tsDelta, offsetDelta, key, value, headers)
	if err != nil {
		return err
	}
	b.records = rec
	b.n++
	b.last = offsetDelta
	b.maxTS = max(b.maxTS, timestamp)
	return nil
}

// Finish compresses the records and returns the complete batch. The slice
// is owned by the Builder and valid until the next Reset or Finish; use
// AppendFinished to write into a buffer of your own. A batch needs at least
// one record.
func (b *Builder) Finish() ([]byte, error) {
	if b.into {
		return b.finishInto()
	}
	out, err := b.AppendFinished(b.out[:0])
	if err != nil {
		return nil, err
	}
	b.out = out
	return out, nil
}

// inDst reports whether the records are in place in ResetInto's buffer.
func (b *Builder) inDst() bool {
	dst := b.dst
	return b.into && cap(b.records) > 0 && cap(dst)-len(dst) >= HeaderSize+cap(b.records) &&
		&dst[:len(dst)+HeaderSize+1][len(dst)+HeaderSize] == &b.records[:1][0]
}

// finishInto is Finish after ResetInto.
func (b *Builder) finishInto() ([]byte, error) {
	dst := b.dst
	var out []byte
	var err error
	switch {
	case !b.inDst():
		// Compressed, or the records outgrew dst's capacity.
		out, err = b.AppendFinished(dst)
	case b.n == 0:
		err = fmt.Errorf("%w: a batch needs at least one record", ErrEncode)
	default:
		h := b.header()
		out, err = seal(appendHeader(dst, &h)[:len(dst)+HeaderSize+len(b.records)], len(dst))
	}
	if err != nil {
		return dst, err
	}
	b.reset(b.spec)
	b.records, b.started = b.own[:0], false
	return out, nil
}

func (b *Builder) header() Header {
	return Header{
		BaseOffset:           b.spec.BaseOffset,
		PartitionLeaderEpoch: b.spec.PartitionLeaderEpoch,
		Magic:                Magic,
		Attributes:           b.spec.attributes(),
		LastOffsetDelta:      b.last,
		BaseTimestamp:        b.baseTS,
		MaxTimestamp:         b.maxTS,
		ProducerID:           b.spec.ProducerID,
		ProducerEpoch:        b.spec.ProducerEpoch,
		BaseSequence:         b.spec.BaseSequence,
		NumRecords:           b.n,
	}
}

// AppendFinished appends the complete batch to dst, as Finish does.
func (b *Builder) AppendFinished(dst []byte) ([]byte, error) {
	if !b.started || b.n == 0 {
		return dst, fmt.Errorf("%w: a batch needs at least one record", ErrEncode)
	}
	h := b.header()
	start := len(dst)
	dst = appendHeader(dst, &h)
	return compressAndFinish(dst, start, b.records, b.spec.Codec, b.comp)
}

// SetProducer rewrites the producer id, epoch and base sequence of the
// complete v2 batch b in place and recomputes its CRC: what a producer does
// to an unsent batch after bumping its epoch (KIP-360).
func SetProducer(b []byte, producerID int64, producerEpoch int16, baseSequence int32) error {
	if len(b) < HeaderSize || b[offMagic] != Magic ||
		int64(int32(binary.BigEndian.Uint32(b[offLength:])))+LogOverhead != int64(len(b)) {
		return fmt.Errorf("%w: SetProducer needs one whole v2 batch", ErrEncode)
	}
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(baseSequence))
	finish(b)
	return nil
}
