package consumer

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
)

func BenchmarkDecodeAnswer(b *testing.B) {
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			b.Run(fmt.Sprintf("%s/%d", codec, size), func(b *testing.B) {
				comp, _ := compress.NewCompressor()
				var data []byte
				off := int64(0)
				for len(data) < 1<<20 {
					var recs []batch.Record
					for i := 0; i < 16384/size*4; i++ {
						v := make([]byte, size)
						for j := range v {
							v[j] = byte('a' + (j*7+i)%26)
						}
						recs = append(recs, batch.Record{Offset: off, Timestamp: 1, Key: []byte("k1234"), Value: v})
						off++
					}
					h := batch.Header{BaseOffset: recs[0].Offset, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: batch.Attributes(codec), LastOffsetDelta: int32(len(recs) - 1)}
					var err error
					data, err = batch.AppendBatch(data, &h, recs, comp)
					if err != nil {
						b.Fatal(err)
					}
				}
				c := &Consumer{cfg: defaultCfg()}
				rp := &kmsg.FetchResponseTopicPartition{RecordBatches: data}
				var it batch.Iterator
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				var n int
				for b.Loop() {
					d := c.decode(&it, TopicPartition{Topic: "t"}, rp, 0)
					n += len(d.records)
					if d.err != nil {
						b.Fatal(d.err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
			})
		}
	}
}
