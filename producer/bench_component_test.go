package producer_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/producer"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProduceBlackhole measures the client side of producing (kepoch
// and kgo side by side) against a kfake cluster that discards records:
// CPU per record and allocations, with the broker's work kept small. It is
// not a throughput figure for a real cluster (integration's
// BenchmarkProduce is).
func BenchmarkProduceBlackhole(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 20000
	for _, size := range []int{100, 1024} {
		value := make([]byte, size)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		keys := make([][]byte, 64)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "key-%d", i)
		}
		ctx := context.Background()
		b.Run(fmt.Sprintf("%dB/kepoch", size), func(b *testing.B) {
			p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			run := func() {
				var wg sync.WaitGroup
				wg.Add(n)
				for i := range n {
					if err := p.Produce(ctx, &producer.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, func(r producer.Result) {
						if r.Err != nil {
							b.Error(r.Err)
						}
						wg.Done()
					}); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
			}
			measure(b, n, run)
		})
		b.Run(fmt.Sprintf("%dB/kgo", size), func(b *testing.B) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			run := func() {
				var wg sync.WaitGroup
				wg.Add(n)
				for i := range n {
					cl.Produce(ctx, &kgo.Record{Key: keys[i%len(keys)], Value: value}, func(_ *kgo.Record, err error) {
						if err != nil {
							b.Error(err)
						}
						wg.Done()
					})
				}
				wg.Wait()
			}
			measure(b, n, run)
		})
	}
}

func measure(b *testing.B, n int, run func()) {
	run()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, t0 := cpuNow(), time.Now()
	for range b.N {
		run()
	}
	el, cpu := time.Since(t0), cpuNow()-cpu0
	b.StopTimer()
	recs := float64(n * b.N)
	b.ReportMetric(recs/el.Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/recs, "cpu-ns/record")
}
