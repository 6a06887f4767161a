package batch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kepoch/kepoch/internal/compress"
)

// genRecords returns n records with offsets base..base+n-1, mixing null and
// empty keys and values, headers with null and empty values, and timestamps
// that go backwards as well as forwards.
func genRecords(rng *rand.Rand, base int64, n, valueSize int) []Record {
	recs := make([]Record, n)
	ts := int64(1_700_000_000_000)
	for i := range recs {
		r := &recs[i]
		r.Offset = base + int64(i)
		ts += rng.Int64N(2001) - 1000 // negative deltas too
		r.Timestamp = ts
		switch i % 5 {
		case 0:
			r.Key = nil
		case 1:
			r.Key = []byte{}
		default:
			r.Key = fmt.Appendf(nil, "key-%d", rng.IntN(1000))
		}
		switch i % 7 {
		case 0:
			r.Value = nil
		case 1:
			r.Value = []byte{}
		default:
			r.Value = randText(rng, valueSize)
		}
		if i%3 == 0 {
			nh := 1 + i%4
			for j := range nh {
				h := RecordHeader{Key: fmt.Appendf(nil, "h%d", j)}
				switch j % 3 {
				case 0:
					h.Value = nil
				case 1:
					h.Value = []byte{}
				default:
					h.Value = randText(rng, 1+rng.IntN(20))
				}
				r.Headers = append(r.Headers, h)
			}
		}
	}
	return recs
}

// randText returns n bytes of compressible, log-like text.
func randText(rng *rand.Rand, n int) []byte {
	words := []string{"user", "id", "event", "click", "view", "purchase", "session",
		"\"ts\":", "{", "}", ",", "amount", "region", "eu-west-1", "us-east-2", "ok", "error"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		if rng.IntN(4) == 0 {
			b = fmt.Appendf(b, "%d", rng.IntN(1_000_000))
		} else {
			b = append(b, words[rng.IntN(len(words))]...)
		}
		b = append(b, ' ')
	}
	return b[:n]
}

// sameBytes is bytes.Equal that also tells nil from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// diffRecord describes how got differs from want, or returns "".
func diffRecord(got, want *Record) string {
	switch {
	case got.Offset != want.Offset:
		return fmt.Sprintf("offset %d, want %d", got.Offset, want.Offset)
	case got.Timestamp != want.Timestamp:
		return fmt.Sprintf("offset %d: timestamp %d, want %d", want.Offset, got.Timestamp, want.Timestamp)
	case !sameBytes(got.Key, want.Key):
		return fmt.Sprintf("offset %d: key %q (nil %v), want %q (nil %v)", want.Offset, got.Key, got.Key == nil, want.Key, want.Key == nil)
	case !sameBytes(got.Value, want.Value):
		return fmt.Sprintf("offset %d: value %q (nil %v), want %q (nil %v)", want.Offset, got.Value, got.Value == nil, want.Value, want.Value == nil)
	case len(got.Headers) != len(want.Headers):
		return fmt.Sprintf("offset %d: %d headers, want %d", want.Offset, len(got.Headers), len(want.Headers))
	}
	for i := range got.Headers {
		g, w := got.Headers[i], want.Headers[i]
		if !bytes.Equal(g.Key, w.Key) || !sameBytes(g.Value, w.Value) {
			return fmt.Sprintf("offset %d: header %d = %q:%q, want %q:%q", want.Offset, i, g.Key, g.Value, w.Key, w.Value)
		}
	}
	return ""
}

func checkRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if d := diffRecord(&got[i], &want[i]); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
	}
}

// decodeAll iterates over data and returns copies of every batch.
func decodeAll(t testing.TB, data []byte, o Options) ([]Batch, *Iterator, error) {
	t.Helper()
	var it Iterator
	o.Retain = true
	it.Reset(data, o)
	var out []Batch
	for it.Next() {
		out = append(out, *it.Batch())
	}
	if it.Consumed() > len(data) {
		t.Fatalf("consumed %d of %d bytes", it.Consumed(), len(data))
	}
	return out, &it, it.Err()
}

// allRecords flattens the records of batches.
func allRecords(bs []Batch) []Record {
	var out []Record
	for _, b := range bs {
		out = append(out, b.Records...)
	}
	return out
}

// buildBatch encodes recs (offsets base..) with a Builder.
func buildBatch(t testing.TB, s Spec, recs []Record) []byte {
	t.Helper()
	c, err := compress.NewCompressor()
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(c)
	b.Reset(s)
	for i := range recs {
		r := &recs[i]
		if err := b.AppendAt(int32(r.Offset-s.BaseOffset), r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
			t.Fatal(err)
		}
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(out)
}

// specAt returns an idempotent-producer Spec at base offset base.
func specAt(base int64, codec compress.Codec) Spec {
	s := DefaultSpec()
	s.BaseOffset = base
	s.PartitionLeaderEpoch = 7
	s.ProducerID, s.ProducerEpoch, s.BaseSequence = 42, 3, int32(base)
	s.Codec = codec
	return s
}
