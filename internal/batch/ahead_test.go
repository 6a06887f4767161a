package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
)

// lowParallelMin lets windows of any size take the parallel path for the
// rest of the test. Tests that call it must not run in parallel.
func lowParallelMin(t testing.TB) {
	old := parallelMinBytes
	parallelMinBytes = 0
	t.Cleanup(func() { parallelMinBytes = old })
}

// seen is what one iteration yielded, copied out batch by batch (records
// alias reused buffers without Retain).
type seen struct {
	batches  []string
	records  []Record
	err      error
	partial  bool
	consumed int
}

func iterate(data []byte, o Options) seen {
	var it Iterator
	it.Reset(data, o)
	var s seen
	for it.Next() {
		s.add(it.Batch())
	}
	s.err, s.partial, s.consumed = it.Err(), it.Partial(), it.Consumed()
	return s
}

// add records b, with copies of its records (Refs made Records, so that
// the two modes compare equal).
func (s *seen) add(b *Batch) {
	recs := b.Records
	if b.Refs != nil {
		if recs != nil {
			panic("a batch with both Records and Refs")
		}
		recs = fromRefs(b)
	}
	s.batches = append(s.batches, fmt.Sprintf("@%d base %d aborted %v marker %+v records %d", b.Position, b.Header.BaseOffset, b.Aborted, b.Marker, len(recs)))
	for _, r := range recs {
		r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		var hs []RecordHeader
		for _, h := range r.Headers {
			hs = append(hs, RecordHeader{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)})
		}
		r.Headers = hs
		s.records = append(s.records, r)
	}
}

// fromRefs is the Records of b, a batch decoded with Options.Refs.
func fromRefs(b *Batch) []Record {
	var recs []Record
	for i := range b.Refs {
		recs = append(recs, b.Refs[i].Record(b.Payload, b.Headers, b.Header.PartitionLeaderEpoch))
	}
	return recs
}

func sameSeen(t *testing.T, name string, got, want seen) {
	t.Helper()
	if fmt.Sprint(got.batches) != fmt.Sprint(want.batches) {
		t.Fatalf("%s: batches\n%v\nwant\n%v", name, got.batches, want.batches)
	}
	if len(got.records) != len(want.records) {
		t.Fatalf("%s: %d records, want %d", name, len(got.records), len(want.records))
	}
	for i := range got.records {
		if d := diffRecord(&got.records[i], &want.records[i]); d != "" {
			t.Fatalf("%s: record %d: %s", name, i, d)
		}
	}
	if fmt.Sprint(got.err) != fmt.Sprint(want.err) || got.partial != want.partial || got.consumed != want.consumed {
		t.Fatalf("%s: err %v partial %v consumed %d, want %v %v %d", name, got.err, got.partial, got.consumed, want.err, want.partial, want.consumed)
	}
}

// mixedFetch is a fetch of batches of every codec, uncompressed ones and
// control batches among them, followed by the transactional log of txnLog
// (aborted transactions included) shifted past them.
func mixedFetch(t testing.TB) ([]byte, []AbortedTransaction) {
	rng := rand.New(rand.NewPCG(5, 6))
	var fetch []byte
	base := int64(0)
	for i := 0; i < 3; i++ {
		for _, codec := range compress.Codecs {
			n := 1 + rng.IntN(40)
			fetch = append(fetch, buildBatch(t, specAt(base, codec), genRecords(rng, base, n, 200))...)
			base += int64(n)
		}
	}
	log, aborted, _, _ := txnLog(t, compress.Zstd)
	// Re-base the transactional log: rewrite each batch's base offset and
	// CRC (the CRC does not cover the base offset).
	for rest := log; len(rest) > 0; {
		length := int(binary.BigEndian.Uint32(rest[offLength:]))
		binary.BigEndian.PutUint64(rest, binary.BigEndian.Uint64(rest)+uint64(base))
		rest = rest[LogOverhead+length:]
	}
	for i := range aborted {
		aborted[i].FirstOffset += base
	}
	return append(fetch, log...), aborted
}

func TestParallelMatchesSequential(t *testing.T) {
	lowParallelMin(t)
	fetch, aborted := mixedFetch(t)
	cases := []Options{
		{},
		{KeepControl: true},
		{ReadCommitted: true, Aborted: aborted},
		{StartOffset: 37},
		{StartOffset: 37, ReadCommitted: true, Aborted: aborted, KeepControl: true},
	}
	for _, o := range cases {
		for _, retain := range []bool{false, true} {
			o.Retain = retain
			o.Parallel = 0
			want := iterate(fetch, o)
			if want.err != nil || len(want.records) == 0 {
				t.Fatalf("sequential decode of the fixture: %v, %d records", want.err, len(want.records))
			}
			for _, par := range []int{2, 3, 8, 64} {
				o.Parallel = par
				sameSeen(t, fmt.Sprintf("%+v", o), iterate(fetch, o), want)
			}
			// Own payloads in supplied memory that is not zeroed.
			supplied := 0
			so := o
			so.Parallel, so.OwnPayload = 0, true
			so.Buffer = func(n int) []byte { supplied++; return poisoned(n) }
			sameSeen(t, fmt.Sprintf("supplied %+v", o), iterate(fetch, so), want)
			if supplied == 0 {
				t.Fatal("no batch was decompressed into a supplied buffer")
			}
			// As Refs, sequential and ahead, own payloads or not.
			ro := o
			ro.Refs = true
			for _, par := range []int{0, 3} {
				ro.Parallel = par
				sameSeen(t, fmt.Sprintf("refs %+v", ro), iterate(fetch, ro), want)
				ro.OwnPayload = true
				sameSeen(t, fmt.Sprintf("refs %+v", ro), iterate(fetch, ro), want)
			}
		}
	}
}

// Under Options.Refs a data batch yields its records as Refs only, a
// control batch its Records (KeepControl) as before; a Ref holds no
// pointer, so that slices of them are not scanned by the collector.
func TestRefs(t *testing.T) {
	fetch, _ := mixedFetch(t)
	var it Iterator
	it.Reset(fetch, Options{Refs: true, KeepControl: true})
	data, control := 0, 0
	for it.Next() {
		b := it.Batch()
		if b.Header.Attributes.Control() {
			control++
			if b.Refs != nil || len(b.Records) == 0 {
				t.Fatalf("control batch at %d: %d refs, %d records", b.Header.BaseOffset, len(b.Refs), len(b.Records))
			}
			continue
		}
		data++
		if b.Records != nil || len(b.Refs) != int(b.Header.NumRecords) || b.Payload == nil {
			t.Fatalf("data batch at %d: %d records, %d refs of %d", b.Header.BaseOffset, len(b.Records), len(b.Refs), b.Header.NumRecords)
		}
	}
	if it.Err() != nil || data == 0 || control == 0 {
		t.Fatalf("%d data and %d control batches, err %v", data, control, it.Err())
	}
	var hasPointers func(reflect.Type) bool
	hasPointers = func(rt reflect.Type) bool {
		switch rt.Kind() {
		case reflect.Struct:
			for i := range rt.NumField() {
				if hasPointers(rt.Field(i).Type) {
					return true
				}
			}
			return false
		case reflect.Array:
			return hasPointers(rt.Elem())
		case reflect.Bool, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int,
			reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
			return false
		}
		return true
	}
	if hasPointers(reflect.TypeFor[Ref]()) {
		t.Fatal("Ref holds a pointer")
	}
}

// TestParallelKeepsBatchValidUntilNext: without Retain a yielded batch's
// keys and values stay intact until the next Next, and with Retain for
// good, while later windows reuse buffers.
func TestParallelKeepsBatchValidUntilNext(t *testing.T) {
	lowParallelMin(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var fetch []byte
	var want []Record
	for i := int64(0); i < 20; i++ {
		recs := genRecords(rng, i*10, 10, 300)
		want = append(want, recs...)
		fetch = append(fetch, buildBatch(t, specAt(i*10, compress.LZ4), recs)...)
	}
	for _, retain := range []bool{false, true} {
		var it Iterator
		var kept []Record
		it.Reset(fetch, Options{Parallel: 3, Retain: retain})
		for it.Next() {
			recs := it.Batch().Records
			checkRecords(t, recs, want[len(kept):len(kept)+len(recs)])
			kept = append(kept, recs...)
		}
		if it.Err() != nil || len(kept) != len(want) {
			t.Fatalf("retain %v: %v, %d records", retain, it.Err(), len(kept))
		}
		if retain {
			checkRecords(t, kept, want)
		} else if len(it.spare) == 0 {
			t.Fatal("no window was decompressed ahead")
		}
	}
}

// TestParallelErrorsAtTheirBatch: a payload that does not decompress, or a
// CRC mismatch, in the middle of a window is reported at its own batch,
// after every batch before it was yielded, exactly as without Parallel.
func TestParallelErrorsAtTheirBatch(t *testing.T) {
	lowParallelMin(t)
	rng := rand.New(rand.NewPCG(9, 10))
	var batches [][]byte
	for i := int64(0); i < 8; i++ {
		batches = append(batches, buildBatch(t, specAt(i*10, compress.Zstd), genRecords(rng, i*10, 10, 300)))
	}
	build := func(bad int, fixCRC bool) []byte {
		var fetch []byte
		for i, b := range batches {
			b = bytes.Clone(b)
			if i == bad {
				b[HeaderSize] ^= 0xff // the zstd frame magic
				if fixCRC {
					binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
				}
			}
			fetch = append(fetch, b...)
		}
		return fetch
	}
	for _, bad := range []int{0, 1, 3, 7} {
		for _, fixCRC := range []bool{false, true} {
			fetch := build(bad, fixCRC)
			want := iterate(fetch, Options{})
			if want.err == nil || len(want.batches) != bad {
				t.Fatalf("sequential: %v after %d batches", want.err, len(want.batches))
			}
			wantKind := errors.ErrCorruptBatch
			if fixCRC {
				wantKind = errors.ErrCompression
			}
			if !errors.Is(want.err, wantKind) {
				t.Fatalf("bad %d fixCRC %v: %v, want %v", bad, fixCRC, want.err, wantKind)
			}
			for _, par := range []int{2, 4, 16} {
				sameSeen(t, fmt.Sprintf("bad %d fixCRC %v parallel %d", bad, fixCRC, par), iterate(fetch, Options{Parallel: par}), want)
			}
		}
	}
	// A trailing partial batch ends the window and the iteration.
	full := build(-1, false)
	cut := full[:len(full)-len(batches[7])/2]
	want := iterate(cut, Options{})
	if !want.partial || len(want.batches) != 7 {
		t.Fatalf("sequential on a cut fetch: partial %v, %d batches", want.partial, len(want.batches))
	}
	sameSeen(t, "partial", iterate(cut, Options{Parallel: 4}), want)
}

// TestParallelReuseAcrossResets: one Iterator over many fetches, with and
// without Parallel and Retain in turn, decodes each the same.
func TestParallelReuseAcrossResets(t *testing.T) {
	lowParallelMin(t)
	fetch, _ := mixedFetch(t)
	want := iterate(fetch, Options{})
	var it Iterator
	for round := 0; round < 12; round++ {
		o := Options{Parallel: round % 4, Retain: round%3 == 0}
		it.Reset(fetch, o)
		var s seen
		for it.Next() {
			s.add(it.Batch())
			if round%5 == 4 && len(s.batches) == 9 {
				break // abandon the fetch in the middle of a window
			}
		}
		if round%5 == 4 {
			continue
		}
		s.err, s.partial, s.consumed = it.Err(), it.Partial(), it.Consumed()
		if fmt.Sprint(s.batches) != fmt.Sprint(want.batches) || len(s.records) != len(want.records) || s.err != nil {
			t.Fatalf("round %d (%+v): %d batches %d records %v", round, o, len(s.batches), len(s.records), s.err)
		}
		for i := range s.records {
			if !sameBytes(s.records[i].Key, want.records[i].Key) || !sameBytes(s.records[i].Value, want.records[i].Value) {
				t.Fatalf("round %d: record %d differs", round, i)
			}
		}
	}
}

// TestOwnPayloadKeepsKeysAndValues: with OwnPayload the keys and values of
// every compressed batch stay intact after later batches are decoded, for
// each codec, in line and decompressed ahead, while Records is still the
// reused slab; a payload is kept in a buffer close to its size.
func TestOwnPayloadKeepsKeysAndValues(t *testing.T) {
	lowParallelMin(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, codec := range compress.Codecs {
		if codec == compress.None {
			continue
		}
		var fetch []byte
		var want []Record
		for i := int64(0); i < 12; i++ {
			recs := genRecords(rng, i*10, 10, 300)
			want = append(want, recs...)
			fetch = append(fetch, buildBatch(t, specAt(i*10, codec), recs)...)
		}
		for _, par := range []int{0, 3} {
			var it Iterator
			var kept []Record
			var slab *Record
			it.Reset(fetch, Options{Parallel: par, OwnPayload: true})
			for it.Next() {
				recs := it.Batch().Records
				if slab != nil && &recs[0] != slab {
					t.Fatalf("%s parallel %d: Records is not the reused slab", codec, par)
				}
				slab = &recs[0]
				for _, r := range recs {
					if cap(r.Value) > 0 {
						// The whole payload, however it was
						// grown, is at most an eighth and 4 KiB
						// larger than it needs to be.
						if full := r.Value[:cap(r.Value)]; len(full) > 10*(300+64)+10*(300+64)/8+4096 {
							t.Fatalf("%s parallel %d: %d bytes kept past a value", codec, par, len(full))
						}
					}
				}
				// Copies of the records, aliasing the payload.
				kept = append(kept, recs...)
			}
			if it.Err() != nil || len(kept) != len(want) {
				t.Fatalf("%s parallel %d: %v, %d records", codec, par, it.Err(), len(kept))
			}
			// Header slices are the reused slab's: only the
			// offsets, keys and values are compared.
			for i := range kept {
				k, w := kept[i], want[i]
				if k.Offset != w.Offset || !bytes.Equal(k.Key, w.Key) || !bytes.Equal(k.Value, w.Value) || (k.Value == nil) != (w.Value == nil) {
					t.Fatalf("%s parallel %d: record %d is offset %d key %q value %q, want %d %q %q", codec, par, i, k.Offset, k.Key, k.Value, w.Offset, w.Key, w.Value)
				}
			}
		}
	}
}

// After Reset, an Iterator keeps nothing of its previous input reachable:
// its reused scratch (records and headers alias uncompressed input) is
// cleared, so a long-lived Iterator does not hold old fetch responses.
func TestResetReleasesInput(t *testing.T) {
	for _, o := range []Options{{}, {Refs: true}, {KeepControl: true}} {
		rng := rand.New(rand.NewPCG(1, 2))
		var it Iterator
		// Two inputs, the first with more records (and headers) than
		// the second, so the second does not overwrite all the scratch
		// the first wrote.
		first := buildBatch(t, specAt(0, compress.None), genRecords(rng, 0, 50, 20))
		gone := weak.Make(&first[0])
		it.Reset(first, o)
		for it.Next() {
		}
		first = nil
		second := buildBatch(t, specAt(50, compress.None), genRecords(rng, 50, 3, 20))
		it.Reset(second, o)
		for it.Next() {
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		it.Reset(nil, Options{})
		runtime.GC()
		runtime.GC()
		if gone.Value() != nil {
			t.Fatalf("%+v: the first input is still reachable after Reset", o)
		}
		runtime.KeepAlive(&it)
	}
}

// With Options.Buffer, the records of every compressed batch live in
// supplied memory, whatever the codec: decompressed straight into it when
// the output size is declared, copied into it otherwise (gzip, lz4, xerial
// snappy), sequentially and decompressed ahead.
func TestSuppliedBufferHoldsEveryCodec(t *testing.T) {
	lowParallelMin(t)
	fetch, _ := mixedFetch(t)
	for _, par := range []int{0, 3} {
		var supplied [][]byte
		var it Iterator
		it.Reset(fetch, Options{OwnPayload: true, Refs: true, Parallel: par, Buffer: func(n int) []byte {
			b := poisoned(n)
			supplied = append(supplied, b)
			return b
		}})
		codecs := map[compress.Codec]int{}
		for it.Next() {
			b := it.Batch()
			codec := b.Header.Attributes.Codec()
			if codec == compress.None || len(b.Payload) == 0 {
				continue
			}
			in := false
			for _, s := range supplied {
				in = in || unsafe.SliceData(b.Payload) == unsafe.SliceData(s)
			}
			if !in {
				t.Fatalf("parallel %d: the %s batch at %d is not in supplied memory", par, codec, b.Header.BaseOffset)
			}
			codecs[codec]++
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		for _, c := range compress.Codecs {
			if c != compress.None && codecs[c] == 0 {
				t.Fatalf("parallel %d: no %s batch seen", par, c)
			}
		}
	}
}
