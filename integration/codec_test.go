package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
)

// TestCodecRoundTripThroughKafka writes batches encoded by kepoch with every
// codec to a real broker with raw Produce requests, then reads them back
// with a raw Fetch and decodes them with both kepoch's decoder and
// franz-go's. The broker validates every batch it accepts (CRC, record
// count, decompression for compressed batches), so this catches encoder
// bugs that a fake broker would accept.
func TestCodecRoundTripThroughKafka(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, codec := range compress.Codecs {
		t.Run(codec.String(), func(t *testing.T) {
			topic := TopicName("codec-" + codec.String())
			id, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			comp, err := compress.NewCompressor()
			if err != nil {
				t.Fatal(err)
			}
			b := batch.NewBuilder(comp)
			type rec struct {
				key, value []byte
				headers    []batch.RecordHeader
				ts         int64
			}
			var want []rec
			now := time.Now().UnixMilli()
			const batches, perBatch = 3, 50
			for bi := 0; bi < batches; bi++ {
				spec := batch.DefaultSpec()
				spec.Codec = codec
				b.Reset(spec)
				for i := 0; i < perBatch; i++ {
					r := rec{
						key:   []byte(fmt.Sprintf("key-%d-%d", bi, i)),
						value: bytes.Repeat([]byte(fmt.Sprintf("value %d/%d ", bi, i)), 1+i%7),
						ts:    now + int64(i%5) - 2, // some negative deltas
					}
					switch i % 10 {
					case 3:
						r.key = nil
					case 4:
						r.value = nil
					case 5:
						r.key = []byte{}
					case 6:
						r.headers = []batch.RecordHeader{{Key: []byte("h1"), Value: []byte("v1")}, {Key: []byte("h2"), Value: nil}}
					}
					if err := b.Append(r.ts, r.key, r.value, r.headers); err != nil {
						t.Fatal(err)
					}
					want = append(want, r)
				}
				raw, err := b.Finish()
				if err != nil {
					t.Fatal(err)
				}
				base, err := c.produceRaw(ctx, 1, topic, id, 0, raw)
				if err != nil {
					t.Fatalf("batch %d (%s): %v", bi, codec, err)
				}
				if base != int64(bi*perBatch) {
					t.Fatalf("batch %d written at base offset %d, want %d", bi, base, bi*perBatch)
				}
			}

			rp, err := c.fetchRaw(ctx, 1, topic, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			// kepoch's decoder.
			var it batch.Iterator
			it.ResetFetch(&rp, batch.Options{Topic: topic})
			var got []batch.Record
			nb := 0
			for it.Next() {
				bt := it.Batch()
				nb++
				if c := compress.Codec(bt.Header.Attributes & batch.AttrCodecMask); c != codec {
					t.Errorf("batch %d read back with codec %s", nb, c)
				}
				for _, r := range bt.Records {
					r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
					got = append(got, r)
				}
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			// franz-go's decoder over the same bytes.
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Partition: 0}, &rp, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				t.Fatal(fp.Err)
			}
			if nb != batches || len(got) != len(want) || len(fp.Records) != len(want) {
				t.Fatalf("read %d batches, %d records (kgo: %d); want %d batches, %d records", nb, len(got), len(fp.Records), batches, len(want))
			}
			for i, w := range want {
				g, k := got[i], fp.Records[i]
				if g.Offset != int64(i) || k.Offset != int64(i) {
					t.Fatalf("record %d at offset %d (kgo %d)", i, g.Offset, k.Offset)
				}
				if !sameBytes(g.Key, w.key) || !sameBytes(g.Value, w.value) || g.Timestamp != w.ts {
					t.Fatalf("record %d: kepoch decoded key %q value %q ts %d; wrote %q %q %d", i, g.Key, g.Value, g.Timestamp, w.key, w.value, w.ts)
				}
				if !sameBytes(k.Key, w.key) || !sameBytes(k.Value, w.value) || k.Timestamp.UnixMilli() != w.ts {
					t.Fatalf("record %d: kgo decoded key %q value %q ts %v; wrote %q %q %d", i, k.Key, k.Value, k.Timestamp, w.key, w.value, w.ts)
				}
				if len(g.Headers) != len(w.headers) || len(k.Headers) != len(w.headers) {
					t.Fatalf("record %d: %d headers (kgo %d), wrote %d", i, len(g.Headers), len(k.Headers), len(w.headers))
				}
				for h := range w.headers {
					if !bytes.Equal(g.Headers[h].Key, w.headers[h].Key) || !sameBytes(g.Headers[h].Value, w.headers[h].Value) ||
						k.Headers[h].Key != string(w.headers[h].Key) || !bytes.Equal(k.Headers[h].Value, w.headers[h].Value) {
						t.Fatalf("record %d header %d: kepoch %+v, kgo %+v, wrote %+v", i, h, g.Headers[h], k.Headers[h], w.headers[h])
					}
				}
				if g.LeaderEpoch != k.LeaderEpoch || g.LeaderEpoch < 0 {
					t.Fatalf("record %d: leader epoch %d (kgo %d)", i, g.LeaderEpoch, k.LeaderEpoch)
				}
			}
		})
	}
}

// sameBytes is bytes.Equal that also tells nil (a null key or value) from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
