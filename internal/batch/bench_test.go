package batch

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/compress"
)

// Benchmark shape: a fetched partition of benchBatches batches of
// benchPerBatch records, each with a short key and a text value of the
// given size, a quarter of them with one header.
const (
	benchBatches  = 10
	benchPerBatch = 100
)

var benchSizes = []struct {
	name string
	size int
}{{"100B", 100}, {"1KiB", 1024}}

func benchRecords(rng *rand.Rand, base int64, n, size int) []Record {
	recs := make([]Record, n)
	ts := int64(1_700_000_000_000)
	for i := range recs {
		ts += rng.Int64N(5)
		recs[i] = Record{
			Offset:    base + int64(i),
			Timestamp: ts,
			Key:       fmt.Appendf(nil, "user-%06d", rng.IntN(1_000_000)),
			Value:     randText(rng, size),
		}
		if i%4 == 0 {
			recs[i].Headers = []RecordHeader{{Key: []byte("trace-id"), Value: fmt.Appendf(nil, "%016x", rng.Uint64())}}
		}
	}
	return recs
}

func benchFetch(b testing.TB, codec compress.Codec, size int) []byte {
	rng := rand.New(rand.NewPCG(uint64(codec), uint64(size)))
	var fetch []byte
	for i := range benchBatches {
		base := int64(i * benchPerBatch)
		fetch = append(fetch, buildBatch(b, specAt(base, codec), benchRecords(rng, base, benchPerBatch, size))...)
	}
	return fetch
}

var sink int64

func BenchmarkDecode(b *testing.B) {
	const records = benchBatches * benchPerBatch
	for _, codec := range compress.Codecs {
		for _, sz := range benchSizes {
			fetch := benchFetch(b, codec, sz.size)
			// o.Refs, as the consumer decodes: pointer-free records
			// whose keys and values are slots of the payload.
			kepoch := func(b *testing.B, o Options) {
				var it Iterator
				o.Topic, o.Partition = "t", 3
				b.SetBytes(int64(len(fetch)))
				b.ReportAllocs()
				for b.Loop() {
					it.Reset(fetch, o)
					n := 0
					for it.Next() {
						bt := it.Batch()
						for i := range bt.Records {
							r := &bt.Records[i]
							sink += r.Offset + int64(len(r.Key)+len(r.Value)+len(r.Headers))
						}
						for i := range bt.Refs {
							x := &bt.Refs[i]
							sink += x.Offset + int64(len(x.Key.In(bt.Payload))+len(x.Value.In(bt.Payload))+int(x.HeadersLen))
						}
						n += len(bt.Records) + len(bt.Refs)
					}
					if it.Err() != nil || n != records {
						b.Fatalf("%v, %d records", it.Err(), n)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
			}
			b.Run(codec.String()+"/"+sz.name+"/kepoch", func(b *testing.B) { kepoch(b, Options{}) })
			b.Run(codec.String()+"/"+sz.name+"/kepoch-refs", func(b *testing.B) { kepoch(b, Options{Refs: true}) })
			// Options.Parallel: the same work on up to GOMAXPROCS
			// goroutines (wall time per record; the CPU per record is
			// kepoch's, plus the goroutines' start).
			if codec != compress.None && runtime.GOMAXPROCS(0) > 1 {
				b.Run(codec.String()+"/"+sz.name+"/kepoch-parallel", func(b *testing.B) { kepoch(b, Options{Parallel: runtime.GOMAXPROCS(0)}) })
			}
			b.Run(codec.String()+"/"+sz.name+"/kgo", func(b *testing.B) {
				dec := kgo.DefaultDecompressor()
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.RecordBatches, rp.HighWatermark = 3, fetch, records
				o := kgo.ProcessFetchPartitionOpts{Topic: "t", Partition: 3}
				b.SetBytes(int64(len(fetch)))
				b.ReportAllocs()
				for b.Loop() {
					fp, _ := kgo.ProcessFetchPartition(o, &rp, dec, nil)
					for _, r := range fp.Records {
						sink += r.Offset + int64(len(r.Key)+len(r.Value)+len(r.Headers))
					}
					if fp.Err != nil || len(fp.Records) != records {
						b.Fatalf("%v, %d records", fp.Err, len(fp.Records))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
			})
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, codec := range compress.Codecs {
		for _, sz := range benchSizes {
			rng := rand.New(rand.NewPCG(1, uint64(sz.size)))
			recs := benchRecords(rng, 0, benchPerBatch, sz.size)
			// into: the batch is built into a buffer sized by RecordSize, as
			// the producer does (ResetInto; uncompressed records written in
			// place), rather than into the Builder's own.
			for _, into := range []bool{false, true} {
				name := codec.String() + "/" + sz.name
				if into {
					name += "/into"
				}
				bound := HeaderSize
				for i := range recs {
					bound += RecordSize(recs[i].Key, recs[i].Value, recs[i].Headers)
				}
				buf := make([]byte, 0, bound)
				b.Run(name, func(b *testing.B) {
					bl := NewBuilder(nil)
					s := specAt(0, codec)
					b.ReportAllocs()
					for b.Loop() {
						if into {
							bl.ResetInto(s, buf[:0])
						} else {
							bl.Reset(s)
						}
						for i := range recs {
							r := &recs[i]
							if err := bl.Append(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
								b.Fatal(err)
							}
						}
						b.SetBytes(int64(bl.Size()))
						out, err := bl.Finish()
						if err != nil {
							b.Fatal(err)
						}
						sink += int64(len(out))
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
				})
			}
		}
	}
}
