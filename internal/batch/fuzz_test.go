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

// fuzzSeeds returns real fetch partitions: our batches in every codec,
// control and transactional batches, an empty batch, kmsg/kgo-encoded
// batches (xerial snappy, kgo's lz4 and zstd frames) and a trailing partial
// batch.
func fuzzSeeds(t testing.TB) [][]byte {
	rng := rand.New(rand.NewPCG(70, 71))
	var seeds [][]byte
	for _, codec := range compress.Codecs {
		recs := genRecords(rng, 10, 4, 12)
		seeds = append(seeds, buildBatch(t, specAt(10, codec), recs))
		seeds = append(seeds, kmsgBatch(t, 10, recs, codec, 0, -1, false))
	}
	seeds = append(seeds, kmsgBatch(t, 3, genRecords(rng, 3, 6, 40), compress.Snappy, 0, -1, true))
	s := specAt(0, compress.None)
	s.Transactional, s.LogAppendTime = true, true
	txn := buildBatch(t, s, genRecords(rng, 0, 2, 5))
	ctl, err := AppendControlBatch(nil, specAt(2, compress.None), ControlAbort, 3, 77)
	if err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, cat(txn, ctl), kmsgControl(t, 4, 1, ControlCommit))
	empty, err := AppendBatch(nil, &Header{BaseOffset: 5, LastOffsetDelta: 2, Attributes: Attributes(compress.Zstd)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	seeds = append(seeds, empty)
	two := cat(buildBatch(t, specAt(0, compress.LZ4), genRecords(rng, 0, 3, 8)), buildBatch(t, specAt(3, compress.Gzip), genRecords(rng, 3, 3, 8)))
	seeds = append(seeds, two, two[:len(two)-5])
	return seeds
}

// FuzzDecode feeds arbitrary bytes to the Iterator and checks its
// invariants: no panic; consumed bytes never exceed the input and are
// exactly the yielded batches, back to back; an error is a *DecodeError of
// a known identity; every yielded batch has a valid CRC, and flipping any
// byte its CRC covers makes it fail with no records; re-encoding a yielded
// batch and decoding it again gives the same header and records; the
// decoding modes (Parallel, OwnPayload, supplied Buffers) yield the same.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	small, err := compress.NewDecompressor(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	lowParallelMin(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data, small)
		// Decompressing ahead on several goroutines, or into memory of
		// each batch's own, changes nothing that is yielded or reported.
		for _, o := range []Options{{Decompressor: small}, {Decompressor: small, Retain: true, KeepControl: true, StartOffset: 3}} {
			want := iterate(data, o)
			o.Parallel = 3
			sameSeen(t, "parallel", iterate(data, o), want)
			o.Parallel, o.OwnPayload = 0, true
			sameSeen(t, "own payload", iterate(data, o), want)
			// Into supplied memory that is not zeroed.
			o.Buffer = poisoned
			sameSeen(t, "supplied buffers", iterate(data, o), want)
			// As pointer-free Refs.
			o.Refs = true
			sameSeen(t, "refs", iterate(data, o), want)
			o.Buffer, o.OwnPayload = nil, false
			sameSeen(t, "refs in reused memory", iterate(data, o), want)
		}
		// Most mutations break the CRC; decoding a copy with the CRCs
		// repaired lets the fuzzer reach the record parser.
		if fixed := fixCRCs(data); !bytes.Equal(fixed, data) {
			checkDecode(t, fixed, small)
		}
	})
}

// poisoned is an Options.Buffer whose memory is not zeroed: a decoder
// that read what it did not write would see 0xa5 bytes.
func poisoned(n int) []byte {
	b := make([]byte, n+n/3)
	for i := range b {
		b[i] = 0xa5
	}
	return b[:n/2]
}

// fixCRCs returns a copy of data with the CRC of every complete v2 batch
// recomputed.
func fixCRCs(data []byte) []byte {
	data = bytes.Clone(data)
	for rest := data; len(rest) >= HeaderSize; {
		length := int32(binary.BigEndian.Uint32(rest[offLength:]))
		if length < minLength || int64(len(rest)) < LogOverhead+int64(length) {
			break
		}
		b := rest[:LogOverhead+int(length)]
		binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
		rest = rest[len(b):]
	}
	return data
}

func checkDecode(t *testing.T, data []byte, small *compress.Decompressor) {
	var it Iterator
	it.Reset(data, Options{Topic: "fuzz", Partition: 9, KeepControl: true, Retain: true, Decompressor: small})
	var batches []Batch
	pos := 0
	for it.Next() {
		b := *it.Batch()
		if b.Position != pos || !bytes.Equal(b.Raw, data[pos:pos+len(b.Raw)]) || b.Header.Size() != len(b.Raw) {
			t.Fatalf("batch at %d (%d bytes) does not follow the previous one at %d", b.Position, len(b.Raw), pos)
		}
		pos += len(b.Raw)
		if crc32.Checksum(b.Raw[offAttributes:], castagnoli) != b.Header.CRC {
			t.Fatalf("batch at %d yielded with a bad CRC", b.Position)
		}
		if int(b.Header.NumRecords) != len(b.Records) {
			t.Fatalf("batch at %d: %d records yielded, header says %d", b.Position, len(b.Records), b.Header.NumRecords)
		}
		batches = append(batches, b)
	}
	if it.Consumed() != pos || pos > len(data) {
		t.Fatalf("consumed %d, batches span %d, input %d", it.Consumed(), pos, len(data))
	}
	if err := it.Err(); err != nil {
		var de *DecodeError
		if !errors.As(err, &de) || de.Topic != "fuzz" || de.Partition != 9 || de.Position != pos {
			t.Fatalf("error %v (%T) does not name the partition and position", err, err)
		}
		if !errors.Is(err, errors.ErrCorruptBatch) && !errors.Is(err, errors.ErrCompression) && !errors.Is(err, errors.ErrUnsupportedMagic) {
			t.Fatalf("error %v has no known identity", err)
		}
		if it.Partial() {
			t.Fatal("both an error and a partial batch")
		}
	} else if it.Partial() == (pos == len(data)) {
		t.Fatalf("partial %v with %d of %d bytes consumed", it.Partial(), pos, len(data))
	}
	for _, b := range batches {
		checkCRCFlip(t, b.Raw)
		checkReencode(t, &b, small)
	}
}

// checkCRCFlip flips one byte covered by the CRC and requires the batch to
// be rejected with no batch yielded.
func checkCRCFlip(t *testing.T, raw []byte) {
	bad := bytes.Clone(raw)
	at := offAttributes + int(crc32.ChecksumIEEE(raw)%uint32(len(raw)-offAttributes))
	bad[at] ^= 0x5a
	var it Iterator
	it.Reset(bad, Options{})
	if it.Next() {
		t.Fatalf("batch with byte %d flipped was yielded", at)
	}
	if !errors.Is(it.Err(), errors.ErrCorruptBatch) {
		t.Fatalf("batch with byte %d flipped: %v", at, it.Err())
	}
}

// checkReencode encodes b again and decodes it: same header fields (other
// than length and CRC) and same records.
func checkReencode(t *testing.T, b *Batch, d *compress.Decompressor) {
	again, err := AppendBatch(nil, &b.Header, b.Records, nil)
	if err != nil {
		t.Fatalf("re-encoding batch at %d: %v", b.Position, err)
	}
	var it Iterator
	it.Reset(again, Options{KeepControl: true, Decompressor: d})
	if !it.Next() {
		t.Fatalf("re-encoded batch at %d does not decode: %v", b.Position, it.Err())
	}
	got := it.Batch()
	wantH, gotH := b.Header, got.Header
	wantH.Length, wantH.CRC, gotH.Length, gotH.CRC = 0, 0, 0, 0
	if gotH != wantH || got.Marker != b.Marker {
		t.Fatalf("re-encoded header\n got %+v %+v\nwant %+v %+v", gotH, got.Marker, wantH, b.Marker)
	}
	if len(got.Records) != len(b.Records) {
		t.Fatalf("re-encoded: %d records, want %d", len(got.Records), len(b.Records))
	}
	for i := range got.Records {
		g, w := &got.Records[i], &b.Records[i]
		if d := diffRecord(g, w); d != "" || g.Attributes != w.Attributes || g.LeaderEpoch != w.LeaderEpoch {
			t.Fatalf("re-encoded record %d: %s", i, d)
		}
	}
	if it.Next() || it.Err() != nil || it.Consumed() != len(again) {
		t.Fatalf("re-encoded batch: trailing data or error %v", it.Err())
	}
}

// FuzzBuild encodes records derived from the input with a Builder, in every
// codec, and requires the decoder to return them exactly.
func FuzzBuild(f *testing.F) {
	f.Add([]byte("key\x00value\x00h\x00v"), uint8(0), int64(1_700_000_000_000))
	f.Add([]byte{}, uint8(4), int64(-1))
	f.Add(bytes.Repeat([]byte("abc\x00"), 50), uint8(3), int64(1<<60))
	f.Fuzz(func(t *testing.T, data []byte, codec uint8, ts int64) {
		c := compress.Codecs[int(codec)%len(compress.Codecs)]
		// Fields are separated by 0 bytes; every 3rd field is a key, then
		// a value, then a header value; a field "-" is null.
		fields := bytes.Split(data, []byte{0})
		field := func(i int) []byte {
			if i >= len(fields) || string(fields[i]) == "-" {
				return nil
			}
			return fields[i]
		}
		var want []Record
		for i := 0; i < len(fields); i += 3 {
			r := Record{Offset: int64(len(want) * 2), Timestamp: ts + int64(i*7919) - int64(len(fields)*1000), Key: field(i), Value: field(i + 1)}
			if i%2 == 0 {
				r.Headers = []RecordHeader{{Key: fields[i], Value: field(i + 2)}}
			}
			want = append(want, r)
		}
		b := NewBuilder(nil)
		s := specAt(0, c)
		b.Reset(s)
		for _, r := range want {
			if err := b.AppendAt(int32(r.Offset), r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
				t.Fatal(err)
			}
		}
		raw, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		// The same batch built into a buffer of the caller's, with as
		// much spare capacity as the timestamp allows, byte for byte.
		into := NewBuilder(nil)
		into.ResetInto(s, make([]byte, 0, int(uint64(ts)%uint64(2*len(raw)+1))))
		for _, r := range want {
			if err := into.AppendAt(int32(r.Offset), r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
				t.Fatal(err)
			}
		}
		if raw2, err := into.Finish(); err != nil || !bytes.Equal(raw2, raw) {
			t.Fatalf("ResetInto's batch differs from Reset's (err %v)", err)
		}
		var it Iterator
		it.Reset(raw, Options{})
		if !it.Next() {
			t.Fatal(it.Err())
		}
		for i := range want {
			want[i].LeaderEpoch = s.PartitionLeaderEpoch
		}
		got := it.Batch().Records
		if len(got) != len(want) {
			t.Fatalf("%d records, want %d", len(got), len(want))
		}
		for i := range got {
			if d := diffRecord(&got[i], &want[i]); d != "" {
				t.Fatalf("record %d: %s", i, d)
			}
		}
	})
}

// FuzzDecodeReadCommitted feeds arbitrary bytes and an arbitrary
// AbortedTransactions list (both from the network: a Fetch answer's
// partition) to a read_committed Iterator. No panic; every batch it yields
// is the batch read_uncommitted yields at the same position, with the same
// records or, flagged Aborted, none, and only a transactional data batch
// of a producer the list names is; the decoding modes (Parallel, Refs in
// supplied memory) yield the same.
func FuzzDecodeReadCommitted(f *testing.F) {
	fetch, aborted := mixedFetch(f)
	f.Add(fetch, encodeAborted(aborted))
	for _, s := range fuzzSeeds(f) {
		f.Add(s, encodeAborted([]AbortedTransaction{{ProducerID: 1, FirstOffset: 0}, {ProducerID: -1, FirstOffset: -5}}))
	}
	small, err := compress.NewDecompressor(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	lowParallelMin(f)
	f.Fuzz(func(t *testing.T, data, abortedBytes []byte) {
		txns := decodeAborted(abortedBytes)
		o := Options{Decompressor: small, ReadCommitted: true, Aborted: txns, KeepControl: true}
		got := iterate(data, o)
		o.ReadCommitted, o.Aborted = false, nil
		all := iterate(data, o)
		if all.err == nil && (got.err != nil || len(got.batches) != len(all.batches)) {
			t.Fatalf("read_committed: %d batches, error %v; read_uncommitted: %d batches, no error", len(got.batches), got.err, len(all.batches))
		}
		producers := map[int64]bool{}
		for _, tx := range txns {
			producers[tx.ProducerID] = true
		}
		var it Iterator
		it.Reset(data, Options{Decompressor: small, ReadCommitted: true, Aborted: txns, KeepControl: true})
		for i := 0; it.Next(); i++ {
			b := it.Batch()
			if i >= len(all.batches) {
				// Past a batch read_uncommitted could not decode: an
				// aborted batch's records are not decoded.
				break
			}
			h := &b.Header
			if b.Aborted && (h.Attributes.Control() || !h.Attributes.Transactional() || !producers[h.ProducerID] || len(b.Records) > 0) {
				t.Fatalf("batch %d (producer %d, attributes %#x, %d records) flagged aborted", i, h.ProducerID, h.Attributes, len(b.Records))
			}
		}
		for i := range min(len(got.batches), len(all.batches)) {
			if got.batches[i] != all.batches[i] && !strings.Contains(got.batches[i], "aborted true") {
				t.Fatalf("batch %d: read_committed %s, read_uncommitted %s", i, got.batches[i], all.batches[i])
			}
		}
		// The same in every decoding mode.
		o.ReadCommitted, o.Aborted = true, txns
		o.Parallel = 3
		sameSeen(t, "parallel", iterate(data, o), got)
		o.Parallel, o.Refs, o.OwnPayload, o.Buffer = 0, true, true, poisoned
		sameSeen(t, "refs in supplied memory", iterate(data, o), got)
	})
}

// encodeAborted and decodeAborted map an AbortedTransactions list to fuzz
// bytes and back: 16 bytes an entry (producer ID, first offset), at most
// 16 entries, a trailing partial entry dropped.
func encodeAborted(txns []AbortedTransaction) []byte {
	var b []byte
	for _, tx := range txns {
		b = binary.BigEndian.AppendUint64(b, uint64(tx.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(tx.FirstOffset))
	}
	return b
}

func decodeAborted(b []byte) []AbortedTransaction {
	var txns []AbortedTransaction
	for len(b) >= 16 && len(txns) < 16 {
		txns = append(txns, AbortedTransaction{ProducerID: int64(binary.BigEndian.Uint64(b)), FirstOffset: int64(binary.BigEndian.Uint64(b[8:]))})
		b = b[16:]
	}
	return txns
}
