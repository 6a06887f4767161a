package batch

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sync"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var defaultDecompressor = sync.OnceValue(func() *compress.Decompressor {
	d, err := compress.NewDecompressor(compress.DefaultMaxDecompressedSize)
	if err != nil {
		panic(err) // the default size is positive
	}
	return d
})

// Options configures an Iterator for one partition's fetched bytes.
type Options struct {
	// Topic and Partition name the partition in errors.
	Topic     string
	Partition int32
	// StartOffset is the fetch position: records below it are decoded and
	// validated but left out of Batch.Records, and data batches that end
	// below it are not decompressed. Control batches are always decoded.
	StartOffset int64
	// ReadCommitted filters out the data batches of aborted transactions
	// listed in Aborted (a Fetch response's AbortedTransactions), as a
	// read_committed consumer must: they are yielded with Aborted set and
	// no records.
	ReadCommitted bool
	Aborted       []AbortedTransaction
	// KeepControl puts the control records of control batches in
	// Batch.Records; by default control batches yield only their Marker.
	KeepControl bool
	// Retain gives every batch its own memory: Records, header slices and
	// decompressed bytes are not reused by later batches, at the cost of
	// up to three allocations per batch. Without it, everything a batch
	// references stays valid only until the next call to Next or Reset
	// (uncompressed keys and values alias the input in both modes).
	Retain bool
	// OwnPayload gives every compressed batch decompressed memory of its
	// own, which later batches do not reuse: its keys and values stay
	// valid after Next and Reset, so a caller that keeps them needs no
	// copy, while Records and header slices are still reused (unless
	// Retain, which implies it). One allocation per compressed batch, of
	// its decompressed size.
	OwnPayload bool
	// Buffer, with OwnPayload, supplies the memory a compressed batch's
	// records end up in: a slice of at least n bytes of capacity, whose
	// contents do not matter, which the batch's keys and values then
	// alias as it is. A batch whose output size is declared up front
	// (Decompressor.DecodedCap) is decompressed straight into it; one of
	// undeclared size (gzip, lz4, xerial snappy, zstd without a content
	// size, as the Java client writes them), or decompressed ahead, is
	// decompressed into a reused or grown buffer and copied into it.
	Buffer func(n int) []byte
	// Decompressor decompresses payloads; nil uses a shared one bounded
	// at compress.DefaultMaxDecompressedSize.
	Decompressor *compress.Decompressor
	// Refs decodes the records of data batches into Batch.Refs instead of
	// Batch.Records: pointer-free records that locate their keys and
	// values in Batch.Payload and their headers in Batch.Headers. Control
	// batches still yield their Marker (and, with KeepControl, Records).
	// The Refs and Headers are reused as Records are; Payload is as long
	// lived as the keys and values of Records would be.
	Refs bool
	// Parallel, when above 1, lets Next decompress up to Parallel
	// compressed batches at once when it reaches one that is not
	// decompressed yet: the batch itself and the ones after it, each on
	// a goroutine of its own that Next starts and waits for. Batches are
	// still validated, decoded and yielded one at a time and in order,
	// and an error is still reported at the batch that has it; a batch
	// decompressed ahead that is never yielded (an error before it, an
	// aborted transaction) only cost the work. It trades CPU for latency
	// on a fetch of several large compressed batches; small windows (less
	// than ParallelMinBytes compressed) are decompressed in line.
	Parallel int
}

// ParallelMinBytes is the least compressed size a window of batches needs
// before Next decompresses it on several goroutines: below it, starting
// them costs more than it saves.
const ParallelMinBytes = 128 << 10

// Batch is one decoded record batch.
type Batch struct {
	// Header is the batch header, CRC verified.
	Header Header
	// Records are the data records at or past Options.StartOffset: empty
	// for control batches (unless KeepControl), aborted batches and
	// batches below the start offset. With Options.Refs, data records are
	// in Refs instead.
	Records []Record
	// Refs are the data records at or past Options.StartOffset under
	// Options.Refs, where Records would be; their keys and values are in
	// Payload, their headers in Headers.
	Refs []Ref
	// Payload is the batch's records, decompressed: what the Refs' slots
	// index (Options.Refs only).
	Payload []byte
	// Headers are the headers of the batch's records in record order,
	// aliasing Payload (Options.Refs only).
	Headers []RecordHeader
	// Marker is the control batch's marker; Type is ControlNone for data
	// batches.
	Marker ControlMarker
	// Aborted is set on a data batch of an aborted transaction under
	// ReadCommitted. Its records were not decoded.
	Aborted bool
	// Raw is the batch's bytes in the input, header included.
	Raw []byte
	// Position is the byte position of Raw in the input.
	Position int
}

// Iterator decodes the record batches of one partition of a Fetch
// response, one batch per Next. The zero value is ready for Reset. An
// Iterator is not safe for concurrent use; reuse one (per goroutine) so
// that its buffers stop growing and decoding allocates nothing.
type Iterator struct {
	o       Options
	d       *compress.Decompressor
	data    []byte
	pos     int
	err     error
	partial bool
	done    bool
	b       Batch
	recs    []Record
	refs    []Ref
	hdrs    []RecordHeader
	buf     []byte
	filter  AbortFilter
	// recsUsed and hdrsUsed are how much of recs and hdrs the input
	// since the last Reset wrote: Reset clears them, so that nothing of
	// an earlier input stays reachable through the reused scratch.
	recsUsed, hdrsUsed int
	// ahead holds the batches decompressed ahead (Options.Parallel), in
	// input order; next is the first not taken yet. spare are buffers for
	// the next window.
	ahead []aheadBatch
	jobs  []aheadJob
	next  int
	spare [][]byte
	// inlineTo ends the input a scan found not worth decompressing
	// ahead: batches before it are decompressed in line.
	inlineTo int
}

// aheadBatch is a batch decompressed ahead of Next: its position in the
// input and the outcome of decompressing its payload.
type aheadBatch struct {
	pos int
	out []byte
	err error
}

// Reset starts iterating over data, the RecordBatches bytes of one fetched
// partition, and drops the previous batch. It copies o.Aborted.
func (it *Iterator) Reset(data []byte, o Options) {
	it.dropAhead() // under the old options: Retain decides what is kept
	it.o = o
	it.o.Aborted = nil
	it.d = o.Decompressor
	if it.d == nil {
		it.d = defaultDecompressor()
	}
	it.data, it.pos, it.err, it.partial, it.done = data, 0, nil, false, false
	it.inlineTo = 0
	it.b = Batch{}
	clear(it.recs[:it.recsUsed])
	clear(it.hdrs[:it.hdrsUsed])
	it.recsUsed, it.hdrsUsed = 0, 0
	if o.ReadCommitted {
		it.filter.Reset(o.Aborted)
	} else {
		it.filter.Reset(nil)
	}
}

// ResetFetch is Reset for a kmsg Fetch response partition: it iterates over
// rp.RecordBatches with rp.AbortedTransactions, and takes the partition
// from rp (o.Partition and o.Aborted are ignored).
func (it *Iterator) ResetFetch(rp *kmsg.FetchResponseTopicPartition, o Options) {
	o.Partition, o.Aborted = rp.Partition, nil
	it.Reset(rp.RecordBatches, o)
	if o.ReadCommitted {
		txns := it.filter.txns[:0]
		for i := range rp.AbortedTransactions {
			txns = append(txns, AbortedTransaction{rp.AbortedTransactions[i].ProducerID, rp.AbortedTransactions[i].FirstOffset})
		}
		it.filter.Reset(txns) // copies onto itself
	}
}

// Next decodes the next batch and reports whether there is one. It returns
// false at the end of the input, before a trailing partial batch
// (Partial), or on an error (Err); the batch that failed is not yielded.
func (it *Iterator) Next() bool {
	if it.err != nil || it.done {
		return false
	}
	rem := it.data[it.pos:]
	if len(rem) == 0 {
		it.done = true
		return false
	}
	if len(rem) < LogOverhead {
		it.partial, it.done = true, true
		return false
	}
	base := int64(binary.BigEndian.Uint64(rem))
	length := int32(binary.BigEndian.Uint32(rem[offLength:]))
	if length < minLegacyLength {
		return it.fail(base, errCorrupt, fmt.Sprintf("batch length %d is below the minimum %d", length, minLegacyLength))
	}
	if int64(len(rem)) < LogOverhead+int64(length) {
		it.partial, it.done = true, true
		return false
	}
	raw := rem[:LogOverhead+int(length)]
	switch magic := int8(raw[offMagic]); {
	case magic == 0 || magic == 1:
		return it.fail(base, errors.ErrUnsupportedMagic, fmt.Sprintf("message format v%d (magic %d) is not decoded", magic, magic))
	case magic != Magic:
		return it.fail(base, errCorrupt, fmt.Sprintf("unknown magic %d", magic))
	case length < minLength:
		return it.fail(base, errCorrupt, fmt.Sprintf("batch length %d is below the v2 minimum %d", length, minLength))
	}
	if !it.decode(raw) {
		return false
	}
	it.pos += len(raw)
	return true
}

// Batch returns the batch of the last successful Next. It is owned by the
// Iterator and overwritten by the next Next or Reset.
func (it *Iterator) Batch() *Batch { return &it.b }

// Err returns the error that stopped the iteration, a *DecodeError, or nil.
func (it *Iterator) Err() error { return it.err }

// Consumed returns how many bytes of the input the yielded batches span:
// the position a caller can drop up to. It never exceeds the input length.
func (it *Iterator) Consumed() int { return it.pos }

// Partial reports whether the iteration stopped before a trailing batch that
// is cut off (a fetch response may end in a partial batch).
func (it *Iterator) Partial() bool { return it.partial }

func (it *Iterator) fail(offset int64, err error, reason string) bool {
	it.err = &DecodeError{
		Topic:     it.o.Topic,
		Partition: it.o.Partition,
		Offset:    offset,
		Position:  it.pos,
		Reason:    reason,
		Err:       err,
	}
	it.done = true
	it.dropAhead()
	return false
}

// decode validates and decodes the complete v2 batch raw into it.b.
func (it *Iterator) decode(raw []byte) bool {
	b := &it.b
	h := &b.Header
	readHeader(raw, h)
	b.Records, b.Refs, b.Payload, b.Headers = nil, nil, nil, nil
	b.Aborted, b.Raw, b.Position = false, raw, it.pos
	b.Marker = ControlMarker{Type: ControlNone, CoordinatorEpoch: -1}
	if crc := crc32.Checksum(raw[offAttributes:], castagnoli); crc != h.CRC {
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("CRC mismatch: stored %#08x, computed %#08x", h.CRC, crc))
	}
	switch {
	case h.BaseOffset < 0:
		return it.fail(h.BaseOffset, errCorrupt, "negative base offset")
	case h.NumRecords < 0:
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("negative record count %d", h.NumRecords))
	case h.LastOffsetDelta < 0:
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("negative last offset delta %d", h.LastOffsetDelta))
	case h.LastOffsetDelta < h.NumRecords-1:
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("%d records cannot have distinct offsets in a last offset delta of %d", h.NumRecords, h.LastOffsetDelta))
	case h.BaseOffset > math.MaxInt64-1-int64(h.LastOffsetDelta):
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("last offset delta %d overflows the offset", h.LastOffsetDelta))
	case !h.Attributes.Codec().Valid():
		return it.fail(h.BaseOffset, &compress.Error{Op: "decompress", Codec: h.Attributes.Codec(), Err: compress.ErrUnknownCodec}, "unknown compression codec")
	}
	control := h.Attributes.Control()
	if !control {
		if it.o.ReadCommitted && it.filter.Aborted(h, b.Marker) {
			b.Aborted = true
			return true
		}
		if h.LastOffset() < it.o.StartOffset {
			return true
		}
	}
	data, ok := it.payload(h, raw[HeaderSize:])
	if !ok {
		return false
	}
	if it.o.Refs && !control {
		refs, ok := it.decodeRefs(h, data)
		if !ok {
			return false
		}
		if i := it.below(len(refs), func(i int) int64 { return refs[i].Offset }); i < len(refs) {
			b.Refs = refs[i:]
		}
		b.Payload, b.Headers = data, it.hdrs
		return true
	}
	recs, ok := it.decodeRecords(h, data)
	if !ok {
		return false
	}
	if control {
		if len(recs) > 0 {
			m, ok := parseControl(recs[0].Key, recs[0].Value)
			if !ok {
				return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("control record key (%d bytes) or value (%d bytes) too short", len(recs[0].Key), len(recs[0].Value)))
			}
			b.Marker = m
		}
		if it.o.ReadCommitted {
			it.filter.Aborted(h, b.Marker)
		}
		if !it.o.KeepControl {
			return true
		}
	}
	if i := it.below(len(recs), func(i int) int64 { return recs[i].Offset }); i < len(recs) {
		b.Records = recs[i:]
	}
	return true
}

// below returns how many of a batch's n records, whose offsets offset
// gives, are below the start offset: a prefix, since offsets rise
// strictly within a batch.
func (it *Iterator) below(n int, offset func(int) int64) int {
	i := 0
	for i < n && offset(i) < it.o.StartOffset {
		i++
	}
	return i
}

// ownPayload says whether each compressed batch is decompressed into a
// buffer of its own (OwnPayload or Retain) rather than a reused one.
func (it *Iterator) ownPayload() bool { return it.o.OwnPayload || it.o.Retain }

// payload returns the records of a batch whose records are payload:
// payload itself, or decompressed.
func (it *Iterator) payload(h *Header, payload []byte) ([]byte, bool) {
	n := int(h.NumRecords)
	data := payload
	if codec := h.Attributes.Codec(); codec != compress.None && (n > 0 || len(payload) > 0) {
		out, ok, err := it.takeAhead()
		reused, supplied := false, 0
		if !ok && it.ownPayload() && it.o.Buffer != nil {
			supplied = it.d.DecodedCap(payload, codec)
		}
		switch {
		case ok:
		case supplied > 0:
			out, err = it.d.Decompress(it.o.Buffer(supplied)[:0], payload, codec)
		case it.ownPayload() && compress.GrowsOnce(payload, codec):
			out, err = it.d.Decompress(nil, payload, codec)
		default:
			out, err = it.d.Decompress(it.buf[:0], payload, codec)
			if err == nil {
				it.buf, reused = out, true
			}
		}
		if err != nil {
			return nil, it.fail(h.BaseOffset, err, "records do not decompress")
		}
		switch {
		case !it.ownPayload() || supplied > 0:
		case it.o.Buffer != nil:
			// Every batch's records go to supplied memory: a copy
			// of what was decompressed elsewhere.
			out = append(it.o.Buffer(len(out))[:0], out...)
		case reused || cap(out)-len(out) > len(out)/8+4096:
			// Out of the reused buffer, or out of one grown by
			// doubling (decompressed ahead), which is not to be kept
			// with the batch's keys and values: an exact copy.
			out = append([]byte(nil), out...)
		}
		data = out
	}
	return data, it.countFits(h, data)
}

// countFits checks that the batch's record count can fit in data, its
// records, and that a batch of no records has none.
func (it *Iterator) countFits(h *Header, data []byte) bool {
	n := int(h.NumRecords)
	if n > len(data)/minRecordSize {
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("record count %d cannot fit in %d bytes of records", n, len(data)))
	}
	if n == 0 && len(data) > 0 {
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("%d bytes of records after the last of 0 records", len(data)))
	}
	return true
}

// decodeRefs parses the h.NumRecords records of data into it.refs,
// checking that they fill it exactly.
func (it *Iterator) decodeRefs(h *Header, data []byte) ([]Ref, bool) {
	n := int(h.NumRecords)
	if cap(it.refs) < n {
		it.refs = make([]Ref, n)
	}
	refs := it.refs[:n]
	if !it.parseEach(h, data, refs, nil) {
		return nil, false
	}
	return refs, true
}

// parseEach parses the records of data, one into each of refs (when it is
// not nil) or recs, checking that they fill data exactly; their headers go
// to it.hdrs.
func (it *Iterator) parseEach(h *Header, data []byte, refs []Ref, recs []Record) bool {
	it.hdrs = it.hdrs[:0]
	p := parser{h: h, data: data}
	n := max(len(refs), len(recs))
	for i := range n {
		var ok bool
		if refs != nil {
			ok = p.ref(&refs[i], &it.hdrs)
		} else {
			ok = p.record(&recs[i], &it.hdrs)
		}
		it.hdrsUsed = max(it.hdrsUsed, len(it.hdrs))
		if !ok {
			return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("record %d of %d: %s", i, n, p.reason()))
		}
	}
	if p.p != len(data) {
		return it.fail(h.BaseOffset, errCorrupt, fmt.Sprintf("%d bytes of records after the last of %d records", len(data)-p.p, n))
	}
	return true
}

// decodeRecords parses the h.NumRecords records of data, checking that
// they fill it exactly.
func (it *Iterator) decodeRecords(h *Header, data []byte) ([]Record, bool) {
	n := int(h.NumRecords)
	if n == 0 {
		return nil, true
	}
	var recs []Record
	if it.o.Retain {
		recs = make([]Record, n)
	} else {
		if cap(it.recs) < n {
			it.recs = make([]Record, n)
		}
		recs = it.recs[:n]
		it.recsUsed = max(it.recsUsed, n)
	}
	if !it.parseEach(h, data, nil, recs) {
		return nil, false
	}
	if it.o.Retain && len(it.hdrs) > 0 {
		// Move the headers out of the reused slab, in record order.
		hs := append([]RecordHeader(nil), it.hdrs...)
		for i := range recs {
			if k := len(recs[i].Headers); k > 0 {
				recs[i].Headers, hs = hs[:k:k], hs[k:]
			}
		}
	}
	return recs, true
}
