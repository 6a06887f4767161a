package batch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
)

// txnLog builds a partition log with transactions:
//
//	[0,3)   pid 1 txn (aborted)        [3,5) pid 1 same txn
//	[5,8)   pid 2 txn (committed)
//	8       pid 1 ABORT marker         9 pid 2 COMMIT marker
//	[10,12) non-transactional
//	[12,14) pid 1 txn (committed)      14 pid 1 COMMIT marker
//	[15,17) pid 3 txn (aborted)        17 pid 3 ABORT marker
//	[18,20) pid 3 txn (committed, compressed) 20 pid 3 COMMIT
//
// and returns it with its aborted transactions and the offsets a
// read_committed consumer sees.
func txnLog(t testing.TB, codec compress.Codec) (log []byte, aborted []AbortedTransaction, committed []int64, all []int64) {
	rng := rand.New(rand.NewPCG(20, 21))
	data := func(base int64, n int, pid int64, txn bool) {
		s := specAt(base, codec)
		s.ProducerID, s.Transactional = pid, txn
		recs := genRecords(rng, base, n, 20)
		log = append(log, buildBatch(t, s, recs)...)
		for _, r := range recs {
			all = append(all, r.Offset)
		}
	}
	marker := func(base, pid int64, typ ControlType) {
		s := specAt(base, codec)
		s.ProducerID = pid
		var err error
		if log, err = AppendControlBatch(log, s, typ, 5, 1_700_000_000_000); err != nil {
			t.Fatal(err)
		}
	}
	data(0, 3, 1, true)
	data(3, 2, 1, true)
	data(5, 3, 2, true)
	marker(8, 1, ControlAbort)
	marker(9, 2, ControlCommit)
	data(10, 2, -1, false)
	data(12, 2, 1, true)
	marker(14, 1, ControlCommit)
	data(15, 2, 3, true)
	marker(17, 3, ControlAbort)
	data(18, 2, 3, true)
	marker(20, 3, ControlCommit)
	aborted = []AbortedTransaction{{ProducerID: 3, FirstOffset: 15}, {ProducerID: 1, FirstOffset: 0}}
	committed = []int64{5, 6, 7, 10, 11, 12, 13, 18, 19}
	return log, aborted, committed, all
}

func offsets(recs []Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

func TestReadCommitted(t *testing.T) {
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		log, aborted, committed, all := txnLog(t, codec)
		bs, _, err := decodeAll(t, log, Options{ReadCommitted: true, Aborted: aborted})
		if err != nil {
			t.Fatal(err)
		}
		if got := offsets(allRecords(bs)); !equalInt64(got, committed) {
			t.Fatalf("read_committed offsets %v, want %v", got, committed)
		}
		// Every batch is yielded, aborted and control ones flagged, so that
		// positions and epochs advance through them.
		if len(bs) != 12 {
			t.Fatalf("%d batches yielded, want 12", len(bs))
		}
		wantAborted := map[int64]bool{0: true, 3: true, 15: true}
		next := int64(0)
		for _, b := range bs {
			if b.Header.BaseOffset != next {
				t.Fatalf("batch at %d, want %d", b.Header.BaseOffset, next)
			}
			next = b.Header.NextOffset()
			if b.Aborted != wantAborted[b.Header.BaseOffset] {
				t.Fatalf("batch %d aborted=%v", b.Header.BaseOffset, b.Aborted)
			}
			if b.Header.PartitionLeaderEpoch != 7 {
				t.Fatalf("batch %d epoch %d", b.Header.BaseOffset, b.Header.PartitionLeaderEpoch)
			}
			if b.Header.Attributes.Control() {
				if b.Marker.CoordinatorEpoch != 5 || (b.Marker.Type != ControlAbort && b.Marker.Type != ControlCommit) || len(b.Records) != 0 {
					t.Fatalf("control batch %d: %+v, %d records", b.Header.BaseOffset, b.Marker, len(b.Records))
				}
			} else if b.Marker.Type != ControlNone {
				t.Fatalf("data batch with marker %+v", b.Marker)
			}
		}
		if next != 21 {
			t.Fatalf("position after the log %d, want 21", next)
		}
		// read_uncommitted sees every data record; KeepControl adds markers.
		bs, _, err = decodeAll(t, log, Options{Aborted: aborted})
		if err != nil {
			t.Fatal(err)
		}
		if got := offsets(allRecords(bs)); !equalInt64(got, all) {
			t.Fatalf("read_uncommitted offsets %v, want %v", got, all)
		}
		bs, _, err = decodeAll(t, log, Options{KeepControl: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(allRecords(bs)); got != len(all)+5 {
			t.Fatalf("KeepControl: %d records, want %d", got, len(all)+5)
		}
	}
}

func equalInt64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAbortFilter(t *testing.T) {
	type step struct {
		base, last  int64
		pid         int64
		txn, ctrl   bool
		marker      ControlType
		wantAborted bool
	}
	cases := []struct {
		name    string
		aborted []AbortedTransaction
		steps   []step
	}{
		{"no aborted transactions", nil, []step{{0, 4, 1, true, false, ControlNone, false}}},
		{"aborted until its marker", []AbortedTransaction{{1, 0}}, []step{
			{0, 4, 1, true, false, ControlNone, true},
			{5, 5, 2, true, false, ControlNone, false},
			{6, 6, 1, true, true, ControlAbort, false},
			{7, 8, 1, true, false, ControlNone, false},
		}},
		{"transaction starting later in the batch range", []AbortedTransaction{{1, 10}}, []step{
			{0, 4, 1, true, false, ControlNone, false},
			{5, 12, 1, true, false, ControlNone, true},
		}},
		{"non-transactional batch of an aborted producer", []AbortedTransaction{{1, 0}}, []step{
			{0, 4, 1, false, false, ControlNone, false},
		}},
		{"commit marker does not end the abort", []AbortedTransaction{{1, 0}}, []step{
			{0, 1, 1, true, true, ControlCommit, false},
			{2, 3, 1, true, false, ControlNone, true},
		}},
		{"unsorted list, two producers", []AbortedTransaction{{2, 20}, {1, 0}, {1, 10}}, []step{
			{0, 1, 1, true, false, ControlNone, true},
			{2, 2, 1, true, true, ControlAbort, false},
			{3, 5, 1, true, false, ControlNone, false},
			{10, 11, 1, true, false, ControlNone, true},
			{20, 21, 2, true, false, ControlNone, true},
			{22, 22, 1, true, true, ControlAbort, false},
			{23, 23, 1, true, false, ControlNone, false},
			{24, 24, 2, true, false, ControlNone, true},
		}},
		{"no producer id", []AbortedTransaction{{-1, 0}}, []step{{0, 1, -1, true, false, ControlNone, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f AbortFilter
			f.Reset(tc.aborted)
			for i, s := range tc.steps {
				h := Header{BaseOffset: s.base, LastOffsetDelta: int32(s.last - s.base), ProducerID: s.pid}
				if s.txn {
					h.Attributes |= AttrTransactional
				}
				if s.ctrl {
					h.Attributes |= AttrControl
				}
				if got := f.Aborted(&h, ControlMarker{Type: s.marker}); got != s.wantAborted {
					t.Fatalf("step %d (%+v): aborted %v", i, s, got)
				}
			}
		})
	}
}

// TestPartial cuts a fetch at every byte and checks that the complete
// batches are yielded, the rest is left, and nothing errors.
func TestPartial(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 31))
	var fetch []byte
	var ends []int
	for i, codec := range []compress.Codec{compress.None, compress.Snappy, compress.Gzip} {
		fetch = append(fetch, buildBatch(t, specAt(int64(i*4), codec), genRecords(rng, int64(i*4), 4, 30))...)
		ends = append(ends, len(fetch))
	}
	for cut := 0; cut <= len(fetch); cut++ {
		bs, it, err := decodeAll(t, fetch[:cut], Options{})
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		complete, consumed := 0, 0
		for _, e := range ends {
			if e <= cut {
				complete, consumed = complete+1, e
			}
		}
		if len(bs) != complete || it.Consumed() != consumed || it.Partial() != (cut != consumed) {
			t.Fatalf("cut %d: %d batches, consumed %d, partial %v; want %d, %d", cut, len(bs), it.Consumed(), it.Partial(), complete, consumed)
		}
	}
}

// corruptCase builds a one-record uncompressed batch whose records section
// is recs (hand-encoded), with numRecords and a fixed CRC.
func rawBatch(h Header, records []byte) []byte {
	h.Magic = Magic
	b := appendHeader(nil, &h)
	b = append(b, records...)
	finish(b)
	return b
}

func varint(v int64) []byte { return binary.AppendVarint(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// rec hand-encodes a record from its body fields, with the given length.
func recWithLen(length int64, body ...[]byte) []byte {
	return cat(append([][]byte{varint(length)}, body...)...)
}

func rec(body ...[]byte) []byte {
	b := cat(body...)
	return cat(varint(int64(len(b))), b)
}

func TestCorrupt(t *testing.T) {
	good := rec([]byte{0}, varint(0), varint(0), varint(1), []byte("k"), varint(1), []byte("v"), varint(0))
	hdr := func(n int32, lastDelta int32) Header {
		return Header{BaseOffset: 500, PartitionLeaderEpoch: 2, LastOffsetDelta: lastDelta, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: n}
	}
	zstdGarbage := func() []byte {
		h := hdr(1, 0)
		h.Attributes = Attributes(compress.Zstd)
		return rawBatch(h, []byte("definitely not zstd"))
	}
	bomb := func() []byte {
		h := hdr(1, 0)
		h.Attributes = Attributes(compress.Zstd)
		c, _ := compress.NewCompressor()
		payload, _ := c.Compress(nil, make([]byte, 1<<20), compress.Zstd)
		return rawBatch(h, payload)
	}
	flip := func(b []byte, at int) []byte { b = bytes.Clone(b); b[at] ^= 0x40; return b }
	setLen := func(b []byte, l int32) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[offLength:], uint32(l))
		return b
	}
	small, _ := compress.NewDecompressor(64 << 10)
	cases := []struct {
		name   string
		batch  []byte
		opts   Options
		want   error
		reason string
	}{
		{"crc", flip(rawBatch(hdr(1, 0), good), HeaderSize+3), Options{}, errors.ErrCorruptBatch, "CRC mismatch"},
		{"crc in header", flip(rawBatch(hdr(1, 0), good), offNumRecords), Options{}, errors.ErrCorruptBatch, "CRC mismatch"},
		{"bad zstd payload", zstdGarbage(), Options{}, errors.ErrCompression, "decompress"},
		{"decompression bomb", bomb(), Options{Decompressor: small}, compress.ErrTooLarge, "decompress"},
		{"unknown codec", rawBatch(Header{NumRecords: 1, Attributes: 5}, good), Options{}, errors.ErrCompression, "unknown compression codec"},
		{"magic 0", setMagic(rawBatch(hdr(1, 0), good), 0), Options{}, errors.ErrUnsupportedMagic, "magic 0"},
		{"magic 1", setMagic(rawBatch(hdr(1, 0), good), 1), Options{}, errors.ErrUnsupportedMagic, "magic 1"},
		{"magic 3", setMagic(rawBatch(hdr(1, 0), good), 3), Options{}, errors.ErrCorruptBatch, "unknown magic"},
		{"negative batch length", setLen(rawBatch(hdr(1, 0), good), -5), Options{}, errors.ErrCorruptBatch, "below the minimum"},
		{"batch length below v2 header", setLen(rawBatch(hdr(1, 0), good), 20), Options{}, errors.ErrCorruptBatch, "below the v2 minimum"},
		{"negative record count", rawBatch(hdr(-1, 0), good), Options{}, errors.ErrCorruptBatch, "negative record count"},
		{"negative last offset delta", rawBatch(hdr(1, -1), good), Options{}, errors.ErrCorruptBatch, "negative last offset delta"},
		{"negative base offset", rawBatch(Header{BaseOffset: -3, NumRecords: 1}, good), Options{}, errors.ErrCorruptBatch, "negative base offset"},
		{"count above offset range", rawBatch(hdr(3, 1), cat(good, good, good)), Options{}, errors.ErrCorruptBatch, "distinct offsets"},
		{"count past the bytes", rawBatch(hdr(2, 5), good), Options{}, errors.ErrCorruptBatch, "cannot fit"},
		{"huge record count", rawBatch(hdr(1<<30, 1<<30), good), Options{}, errors.ErrCorruptBatch, "cannot fit"},
		{"fewer records than counted", rawBatch(hdr(2, 5), cat(good, bytes.Repeat([]byte{0}, 7))), Options{}, errors.ErrCorruptBatch, "record 1 of 2"},
		{"more records than counted", rawBatch(hdr(1, 5), cat(good, good)), Options{}, errors.ErrCorruptBatch, "after the last of 1 records"},
		{"zero records with bytes", rawBatch(hdr(0, 0), good), Options{}, errors.ErrCorruptBatch, "after the last of 0 records"},
		{"record length past the end", rawBatch(hdr(1, 0), recWithLen(50, good[1:])), Options{}, errors.ErrCorruptBatch, "past the end of the batch"},
		{"negative record length", rawBatch(hdr(1, 0), recWithLen(-1, good[1:], good[1:])), Options{}, errors.ErrCorruptBatch, "negative record length"},
		{"record length too long for fields", rawBatch(hdr(1, 0), recWithLen(int64(len(good)), good[1:], []byte{0})), Options{}, errors.ErrCorruptBatch, "record length mismatch"},
		{"record length too short for fields", rawBatch(hdr(1, 0), cat(recWithLen(int64(len(good)-3), good[1:len(good)-1]), []byte{0})), Options{}, errors.ErrCorruptBatch, "record 0 of 1"},
		{"empty record", rawBatch(hdr(1, 0), cat(varint(0), bytes.Repeat([]byte{0}, 6))), Options{}, errors.ErrCorruptBatch, "empty record"},
		{"negative key length", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-2), varint(0), varint(0))), Options{}, errors.ErrCorruptBatch, "negative key length -2"},
		{"negative value length", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-7), varint(0))), Options{}, errors.ErrCorruptBatch, "negative value length -7"},
		{"key past the record", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(40), varint(0), varint(0))), Options{}, errors.ErrCorruptBatch, "key of 40 bytes"},
		{"varint overflow (6 bytes)", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, varint(-1), varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "offset delta varint overflows"},
		{"varint overflow (33 bits)", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "key length varint overflows"},
		{"varlong overflow", rawBatch(hdr(1, 0), rec([]byte{0}, bytes.Repeat([]byte{0xff}, 10), []byte{0x01}, varint(0), varint(-1), varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "timestamp delta varint overflows"},
		{"truncated varint", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-1), []byte{0x80})), Options{}, errors.ErrCorruptBatch, "header count varint runs past"},
		{"absurd header count", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-1), varint(1_000_000), varint(0), varint(0))), Options{}, errors.ErrCorruptBatch, "header count 1000000"},
		{"negative header count", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-1), varint(-1))), Options{}, errors.ErrCorruptBatch, "negative header count"},
		{"negative header key length", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-1), varint(1), varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "negative header key length"},
		{"header value past the record", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(0), varint(-1), varint(-1), varint(1), varint(0), varint(9))), Options{}, errors.ErrCorruptBatch, "header value of 9 bytes"},
		{"offset delta past last", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(3), varint(-1), varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "offset delta 3"},
		{"offset deltas not increasing", rawBatch(hdr(2, 5), cat(good, good)), Options{}, errors.ErrCorruptBatch, "offset delta 0"},
		{"negative offset delta", rawBatch(hdr(1, 0), rec([]byte{0}, varint(0), varint(-1), varint(-1), varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "offset delta -1"},
		{"control key too short", rawBatch(Header{BaseOffset: 500, Attributes: AttrControl | AttrTransactional, NumRecords: 1, ProducerID: 1}, rec([]byte{0}, varint(0), varint(0), varint(2), []byte{0, 0}, varint(-1), varint(0))), Options{}, errors.ErrCorruptBatch, "control record key"},
		{"abort marker value too short", rawBatch(Header{BaseOffset: 500, Attributes: AttrControl | AttrTransactional, NumRecords: 1, ProducerID: 1}, rec([]byte{0}, varint(0), varint(0), varint(4), []byte{0, 0, 0, 0}, varint(2), []byte{0, 0}, varint(0))), Options{}, errors.ErrCorruptBatch, "control record key"},
	}
	rng := rand.New(rand.NewPCG(40, 41))
	prefix := buildBatch(t, specAt(400, compress.LZ4), genRecords(rng, 400, 5, 10))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Topic, tc.opts.Partition = "orders", 3
			fetch := cat(prefix, tc.batch, prefix)
			bs, it, err := decodeAll(t, fetch, tc.opts)
			if err == nil {
				t.Fatalf("no error; %d batches", len(bs))
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v is not %v", err, tc.want)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			msg := err.Error()
			if de.Topic != "orders" || de.Partition != 3 || de.Position != len(prefix) ||
				!strings.Contains(msg, "orders[3]") || !strings.Contains(msg, "offset") || !strings.Contains(de.Reason, tc.reason) {
				t.Fatalf("error %q (%+v), want reason %q at byte %d", msg, de, tc.reason, len(prefix))
			}
			// The good batch before is yielded, the bad one and the rest not.
			if len(bs) != 1 || it.Consumed() != len(prefix) || it.Partial() || it.Next() {
				t.Fatalf("%d batches, consumed %d (prefix %d)", len(bs), it.Consumed(), len(prefix))
			}
		})
	}
}

func setMagic(b []byte, m byte) []byte {
	b = bytes.Clone(b)
	b[offMagic] = m
	return b
}

// TestLegacyMessageSet feeds a real magic-1 message (as Kafka 0.10 wrote
// it) and checks that it is rejected with its offset named.
func TestLegacyMessageSet(t *testing.T) {
	// offset, size, crc, magic 1, attributes, timestamp, key -1, value "hi"
	body := cat([]byte{1, 0}, binary.BigEndian.AppendUint64(nil, 1234), []byte{0xff, 0xff, 0xff, 0xff}, []byte{0, 0, 0, 2}, []byte("hi"))
	msg := cat(binary.BigEndian.AppendUint64(nil, 77), binary.BigEndian.AppendUint32(nil, uint32(4+len(body))),
		binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(body)), body)
	_, it, err := decodeAll(t, msg, Options{Topic: "old", Partition: 0})
	var de *DecodeError
	if !errors.Is(err, errors.ErrUnsupportedMagic) || !errors.As(err, &de) || de.Offset != 77 || !strings.Contains(err.Error(), "offset 77") {
		t.Fatalf("error %v", err)
	}
	if it.Consumed() != 0 {
		t.Fatalf("consumed %d", it.Consumed())
	}
}

func TestEmptyBatch(t *testing.T) {
	// A batch whose records were all compacted away keeps its header
	// (KAFKA-5443): zero records, the consumer still moves past it.
	for _, codec := range compress.Codecs {
		h := Header{BaseOffset: 10, LastOffsetDelta: 4, PartitionLeaderEpoch: 3, ProducerID: 9, Attributes: Attributes(codec)}
		raw, err := AppendBatch(nil, &h, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		bs, _, err := decodeAll(t, raw, Options{})
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		if len(bs) != 1 || len(bs[0].Records) != 0 || bs[0].Header.NextOffset() != 15 || bs[0].Header.PartitionLeaderEpoch != 3 {
			t.Fatalf("%s: %+v", codec, bs)
		}
	}
}

func TestControlMarkers(t *testing.T) {
	for _, typ := range []ControlType{ControlAbort, ControlCommit, 4} {
		s := specAt(30, compress.None)
		raw, err := AppendControlBatch(nil, s, typ, 12, 99)
		if err != nil {
			t.Fatal(err)
		}
		bs, _, err := decodeAll(t, raw, Options{})
		if err != nil {
			t.Fatal(err)
		}
		h, m := bs[0].Header, bs[0].Marker
		wantEpoch := int32(12)
		if typ != ControlAbort && typ != ControlCommit {
			wantEpoch = -1
		}
		if !h.Attributes.Control() || !h.Attributes.Transactional() || h.BaseSequence != NoSequence ||
			h.ProducerID != 42 || m.Type != typ || m.CoordinatorEpoch != wantEpoch || len(bs[0].Records) != 0 {
			t.Fatalf("%s: header %+v marker %+v", typ, h, m)
		}
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	err := error(&DecodeError{Topic: "t", Partition: 4, Offset: 99, Position: 12, Reason: "CRC mismatch", Err: errors.ErrCorruptBatch})
	want := "kepoch: decode t[4] at offset 99 (byte 12): CRC mismatch: kepoch: corrupt record batch"
	if err.Error() != want {
		t.Fatalf("%q", err.Error())
	}
	if !errors.Is(err, errors.ErrCorruptBatch) || errors.Is(err, errors.ErrCompression) {
		t.Fatal("wrong identity")
	}
}
