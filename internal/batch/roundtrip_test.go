package batch

import (
	"bytes"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kepoch/kepoch/internal/compress"
)

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name      string
		n, size   int
		spec      func(Spec) Spec
		mutate    func([]Record)
		wantTSMax bool // every record carries MaxTimestamp (LogAppendTime)
	}{
		{name: "one record", n: 1, size: 10},
		{name: "small", n: 10, size: 100},
		{name: "many records", n: 5000, size: 50},
		{name: "large values", n: 3, size: 300 << 10},
		{name: "nil and empty key and value", n: 4, size: 5, mutate: func(r []Record) {
			r[0].Key, r[0].Value = nil, nil
			r[1].Key, r[1].Value = []byte{}, []byte{}
			r[2].Key, r[2].Value = nil, []byte{}
			r[3].Key, r[3].Value = []byte{}, nil
		}},
		{name: "headers", n: 3, size: 5, mutate: func(r []Record) {
			r[0].Headers = []RecordHeader{{Key: []byte("a"), Value: nil}, {Key: []byte("b"), Value: []byte{}}, {Key: []byte{}, Value: []byte("v")}}
			r[1].Headers = nil
			r[2].Headers = []RecordHeader{{Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000)}}
		}},
		{name: "negative and large timestamp deltas", n: 4, size: 5, mutate: func(r []Record) {
			r[0].Timestamp = 1_000_000
			r[1].Timestamp = 0
			r[2].Timestamp = -1 // NoTimestamp
			r[3].Timestamp = 1 << 50
		}},
		{name: "offset gaps", n: 4, size: 5, mutate: func(r []Record) {
			r[1].Offset += 10
			r[2].Offset += 100
			r[3].Offset += 100000
		}},
		{name: "transactional", n: 5, size: 10, spec: func(s Spec) Spec { s.Transactional = true; return s }},
		{name: "log append time", n: 5, size: 10, wantTSMax: true, spec: func(s Spec) Spec { s.LogAppendTime = true; return s }},
		{name: "no producer", n: 5, size: 10, spec: func(s Spec) Spec {
			s.ProducerID, s.ProducerEpoch, s.BaseSequence = NoProducerID, NoProducerEpoch, NoSequence
			return s
		}},
		{name: "high base offset", n: 5, size: 10, spec: func(s Spec) Spec { s.BaseOffset = math.MaxInt64 - 100; return s }},
	}
	for _, codec := range compress.Codecs {
		for _, tc := range cases {
			t.Run(codec.String()+"/"+tc.name, func(t *testing.T) {
				s := specAt(1000, codec)
				if tc.spec != nil {
					s = tc.spec(s)
				}
				recs := genRecords(rng, s.BaseOffset, tc.n, tc.size)
				if tc.mutate != nil {
					tc.mutate(recs)
				}
				raw := buildBatch(t, s, recs)
				bs, it, err := decodeAll(t, raw, Options{Topic: "t", Partition: 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(bs) != 1 || it.Consumed() != len(raw) || it.Partial() {
					t.Fatalf("%d batches, consumed %d of %d, partial %v", len(bs), it.Consumed(), len(raw), it.Partial())
				}
				h := bs[0].Header
				maxTS := recs[0].Timestamp
				for _, r := range recs {
					maxTS = max(maxTS, r.Timestamp)
				}
				want := Header{
					BaseOffset: s.BaseOffset, Length: int32(len(raw) - LogOverhead), PartitionLeaderEpoch: s.PartitionLeaderEpoch,
					Magic: 2, CRC: h.CRC, Attributes: s.attributes(), LastOffsetDelta: int32(recs[len(recs)-1].Offset - s.BaseOffset),
					BaseTimestamp: recs[0].Timestamp, MaxTimestamp: maxTS, ProducerID: s.ProducerID, ProducerEpoch: s.ProducerEpoch,
					BaseSequence: s.BaseSequence, NumRecords: int32(len(recs)),
				}
				if h != want {
					t.Fatalf("header\n got %+v\nwant %+v", h, want)
				}
				if tc.wantTSMax {
					for i := range recs {
						recs[i].Timestamp = maxTS
					}
				}
				for i := range bs[0].Records {
					if r := bs[0].Records[i]; r.LeaderEpoch != s.PartitionLeaderEpoch {
						t.Fatalf("record %d leader epoch %d", i, r.LeaderEpoch)
					}
				}
				checkRecords(t, bs[0].Records, recs)
				// The reusing (default) mode decodes the same records.
				var reuse Iterator
				reuse.Reset(raw, Options{})
				if !reuse.Next() {
					t.Fatal(reuse.Err())
				}
				checkRecords(t, reuse.Batch().Records, recs)
			})
		}
	}
}

// TestAppendBatchExact re-encodes decoded batches with AppendBatch and
// checks that uncompressed ones come out byte for byte identical.
func TestAppendBatchExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, codec := range compress.Codecs {
		recs := genRecords(rng, 50, 20, 30)
		raw := buildBatch(t, specAt(50, codec), recs)
		bs, _, err := decodeAll(t, raw, Options{KeepControl: true})
		if err != nil {
			t.Fatal(err)
		}
		again, err := AppendBatch(nil, &bs[0].Header, bs[0].Records, nil)
		if err != nil {
			t.Fatal(err)
		}
		if codec == compress.None && !bytes.Equal(again, raw) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, raw)
		}
		bs2, _, err := decodeAll(t, again, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, bs2[0].Records, recs)
	}
}

func TestBuilderReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := NewBuilder(nil)
	var fetch []byte
	var want []Record
	base := int64(0)
	for i, codec := range []compress.Codec{compress.Zstd, compress.None, compress.LZ4, compress.Gzip, compress.Snappy, compress.Zstd} {
		recs := genRecords(rng, base, 10+i*7, 40)
		b.Reset(specAt(base, codec))
		for j := range recs {
			if err := b.Append(recs[j].Timestamp, recs[j].Key, recs[j].Value, recs[j].Headers); err != nil {
				t.Fatal(err)
			}
		}
		if b.Len() != len(recs) || b.Size() <= HeaderSize {
			t.Fatalf("Len %d Size %d", b.Len(), b.Size())
		}
		var err error
		if fetch, err = b.AppendFinished(fetch); err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
		base += int64(len(recs))
	}
	bs, it, err := decodeAll(t, fetch, Options{})
	if err != nil || len(bs) != 6 || it.Consumed() != len(fetch) {
		t.Fatalf("err %v, %d batches, consumed %d/%d", err, len(bs), it.Consumed(), len(fetch))
	}
	checkRecords(t, allRecords(bs), want)
}

// TestBuilderResetInto: a batch built after ResetInto is byte for byte the
// batch Reset and AppendFinished give, appended after what dst held; an
// uncompressed batch with room in dst is written in place (dst's array,
// never copied); one that outgrows dst, and compressed ones, still come out
// whole; the Builder keeps no hold on a returned batch (the next batch,
// in its own buffer or not, leaves it intact); Finish cannot be repeated.
func TestBuilderResetInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ref, b := NewBuilder(nil), NewBuilder(nil)
	var kept [][]byte // every batch returned, with a copy of its bytes
	var copies [][]byte
	prefix := []byte("prefix")
	for i, tc := range []struct {
		codec compress.Codec
		room  int // spare capacity beyond RecordSize's bound; -1<<20: none, -1<<21: room for 10 bytes of records
	}{
		{compress.None, 0}, {compress.None, 100}, {compress.None, -1}, {compress.None, -1 << 20}, {compress.None, -1 << 21},
		{compress.Zstd, 0}, {compress.None, 7}, {compress.LZ4, 0}, {compress.None, 0},
	} {
		recs := genRecords(rng, 0, 1+i*13, 60)
		s := specAt(int64(i), tc.codec)
		ref.Reset(s)
		exact := len(prefix) + HeaderSize
		for j := range recs {
			exact += RecordSize(recs[j].Key, recs[j].Value, recs[j].Headers)
		}
		capacity := exact + tc.room
		switch tc.room {
		case -1 << 20:
			capacity = len(prefix)
		case -1 << 21:
			capacity = len(prefix) + HeaderSize + 10
		}
		dst := append(make([]byte, 0, capacity), prefix...)
		b.ResetInto(s, dst)
		for j := range recs {
			r := &recs[j]
			if err := ref.Append(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
				t.Fatal(err)
			}
			if err := b.Append(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
				t.Fatal(err)
			}
		}
		if b.Size() != ref.Size() || b.Len() != ref.Len() {
			t.Fatalf("case %d: Size %d Len %d, want %d %d", i, b.Size(), b.Len(), ref.Size(), ref.Len())
		}
		if at := len(prefix) + HeaderSize; tc.codec == compress.None && cap(dst) >= at+len(ref.records) {
			// Written in place while appended: no copy at Finish.
			if !bytes.Equal(dst[:cap(dst)][at:at+len(ref.records)], ref.records) {
				t.Fatalf("case %d: the records are not in dst before Finish", i)
			}
		}
		want, err := ref.AppendFinished(append([]byte(nil), prefix...))
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d (%v, room %d): ResetInto's batch differs from AppendFinished's", i, tc.codec, tc.room)
		}
		if inPlace := &got[0] == &dst[:1][0]; inPlace != (cap(dst) >= len(got)) {
			t.Fatalf("case %d: in dst's array %v, dst's capacity %d for %d bytes", i, inPlace, cap(dst), len(got))
		}
		if _, err := b.Finish(); err == nil {
			t.Fatalf("case %d: a second Finish succeeded", i)
		}
		kept = append(kept, got)
		copies = append(copies, bytes.Clone(got))
		// An ordinary batch in between reuses the Builder's own buffer.
		b.Reset(specAt(0, compress.None))
		if err := b.Append(1, []byte("k"), bytes.Repeat([]byte("x"), 3000), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range kept {
		if !bytes.Equal(kept[i], copies[i]) {
			t.Fatalf("batch %d changed after it was returned", i)
		}
		bs, _, err := decodeAll(t, kept[i][len(prefix):], Options{})
		if err != nil || len(bs) != 1 {
			t.Fatalf("batch %d: %v, %d batches", i, err, len(bs))
		}
	}
}

func TestBuilderErrors(t *testing.T) {
	b := NewBuilder(nil)
	if err := b.Append(0, nil, nil, nil); err == nil {
		t.Fatal("Append before Reset succeeded")
	}
	b.Reset(DefaultSpec())
	if _, err := b.Finish(); err == nil {
		t.Fatal("empty batch finished")
	}
	if err := b.AppendAt(5, 0, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range []int32{5, 4, -1} {
		if err := b.AppendAt(d, 0, nil, nil, nil); err == nil {
			t.Fatalf("offset delta %d after 5 accepted", d)
		}
	}
	b.Reset(DefaultSpec())
	if err := b.Append(math.MaxInt64, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(-2, nil, nil, nil); err == nil {
		t.Fatal("timestamp delta overflow accepted")
	}
	if _, err := AppendBatch(nil, &Header{BaseOffset: 0}, []Record{{Offset: 1 << 40}}, nil); err == nil {
		t.Fatal("offset delta overflow accepted")
	}
}

func TestRecordSizeBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	recs := genRecords(rng, 0, 200, 60)
	b := NewBuilder(nil)
	b.Reset(DefaultSpec())
	for i := range recs {
		before := b.Size()
		if err := b.Append(recs[i].Timestamp, recs[i].Key, recs[i].Value, recs[i].Headers); err != nil {
			t.Fatal(err)
		}
		if added, bound := b.Size()-before, RecordSize(recs[i].Key, recs[i].Value, recs[i].Headers); added > bound || added < bound-10 {
			t.Fatalf("record %d added %d bytes, RecordSize says %d", i, added, bound)
		}
	}
}

func TestSetProducer(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	recs := genRecords(rng, 0, 5, 10)
	raw := buildBatch(t, specAt(0, compress.Zstd), recs)
	if err := SetProducer(raw, 99, 4, 1234); err != nil {
		t.Fatal(err)
	}
	bs, _, err := decodeAll(t, raw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h := bs[0].Header; h.ProducerID != 99 || h.ProducerEpoch != 4 || h.BaseSequence != 1234 || h.LastSequence() != 1238 {
		t.Fatalf("header %+v", h)
	}
	checkRecords(t, bs[0].Records, recs)
	if err := SetProducer(raw[:len(raw)-1], 1, 1, 1); err == nil {
		t.Fatal("SetProducer on a cut batch succeeded")
	}
}

func TestLastSequence(t *testing.T) {
	for _, tc := range []struct {
		base, delta, want int32
	}{
		{0, 0, 0},
		{10, 4, 14},
		{math.MaxInt32, 0, math.MaxInt32},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 2, 5, 2},
		{NoSequence, 5, NoSequence},
	} {
		h := Header{BaseSequence: tc.base, LastOffsetDelta: tc.delta}
		if got := h.LastSequence(); got != tc.want {
			t.Errorf("LastSequence(%d+%d) = %d, want %d", tc.base, tc.delta, got, tc.want)
		}
	}
}

func TestStartOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var fetch []byte
	var all []Record
	for base := int64(100); base < 130; base += 10 {
		recs := genRecords(rng, base, 10, 20)
		fetch = append(fetch, buildBatch(t, specAt(base, compress.LZ4), recs)...)
		all = append(all, recs...)
	}
	for _, start := range []int64{0, 100, 105, 109, 110, 125, 129, 130, 500} {
		bs, _, err := decodeAll(t, fetch, Options{StartOffset: start})
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 3 {
			t.Fatalf("start %d: %d batches, want all 3 yielded", start, len(bs))
		}
		var want []Record
		for _, r := range all {
			if r.Offset >= start {
				want = append(want, r)
			}
		}
		checkRecords(t, allRecords(bs), want)
	}
}

// TestReuseInvalidates documents the default buffer reuse: a compressed
// batch's keys are overwritten by the next batch, but not with Retain.
func TestReuseInvalidates(t *testing.T) {
	mk := func(base int64, v string) []byte {
		return buildBatch(t, specAt(base, compress.Zstd), []Record{{Offset: base, Value: []byte(v)}})
	}
	fetch := append(mk(0, "first"), mk(1, "other")...)
	for _, retain := range []bool{false, true} {
		var it Iterator
		it.Reset(fetch, Options{Retain: retain})
		if !it.Next() {
			t.Fatal(it.Err())
		}
		v := it.Batch().Records[0].Value
		if !it.Next() {
			t.Fatal(it.Err())
		}
		if got := string(v); (got == "first") != retain {
			t.Fatalf("retain %v: first value reads %q after the next batch", retain, got)
		}
	}
}

// StoredCRC reads the CRC a batch was encoded with; it refuses what is not
// a whole v2 header.
func TestStoredCRC(t *testing.T) {
	b := NewBuilder(nil)
	b.Reset(DefaultSpec())
	if err := b.Append(1, []byte("k"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	enc, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := StoredCRC(enc)
	if want := crc32.Checksum(enc[offAttributes:], castagnoli); !ok || got != want {
		t.Fatalf("StoredCRC %#x %v; want %#x", got, ok, want)
	}
	if _, ok := StoredCRC(enc[:HeaderSize-1]); ok {
		t.Fatal("short header accepted")
	}
	bad := append([]byte(nil), enc...)
	bad[offMagic] = 1
	if _, ok := StoredCRC(bad); ok {
		t.Fatal("magic 1 accepted")
	}
}
