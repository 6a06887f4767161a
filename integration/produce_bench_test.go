package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/producer"
)

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProduce compares kepoch's producer with franz-go's on the real
// cluster, side by side in one run: idempotent, acks=all, 3 partitions with
// replication factor 3, keyed records. Each iteration produces a fixed
// number of records and waits for every acknowledgement.
//
//	KEPOCH_KAFKA=1 go test -run '^$' -bench BenchmarkProduce -count 6 ./integration/
func BenchmarkProduce(b *testing.B) {
	c := Require(b)
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			n := benchRecords(size)
			topic, _, value := produceBenchTopic(b, c, "produce", codec, size)
			runKepoch := func(b *testing.B) {
				var w produceWrites
				p := newBenchProducer(b, codec, &w)
				benchProduce(b, n, size, &w, func() { produceKepoch(b, p, topic, value, n) })
			}
			runKgo := func(b *testing.B) {
				var w produceWrites
				cl := newBenchKgoProducer(b, codec, topic, &w)
				benchProduce(b, n, size, &w, func() { produceKgo(b, cl, value, n) })
			}
			// A new topic's first writes are slower (segments, indexes and
			// replica fetchers being set up): the topic is written to once
			// before, so that the client that runs first does not pay for
			// them. (-count repeats each sub-benchmark in a row, so the
			// order of the two alternates between processes: kgoFirst.)
			warmTopic(b, topic, n, value)
			if kgoFirst() {
				b.Run(fmt.Sprintf("%s/%dB/kgo", codec, size), runKgo)
			}
			b.Run(fmt.Sprintf("%s/%dB/kepoch", codec, size), runKepoch)
			if !kgoFirst() {
				b.Run(fmt.Sprintf("%s/%dB/kgo", codec, size), runKgo)
			}
		}
	}
}

// benchRecords is how many records of size bytes an iteration of the
// produce benchmarks writes: 200k of 100 B, 50k of 1 KiB (the consume
// benchmarks read more: consumeRecords).
func benchRecords(size int) int {
	if size > 100 {
		return 50_000
	}
	return 200_000
}

// produceBenchTopic creates a topic for a produce benchmark (3 partitions,
// replication factor 3, one led by each broker), deleted when b ends, and
// returns it with its ID and the value of size bytes the benchmark writes.
func produceBenchTopic(b *testing.B, c *Cluster, kind string, codec compress.Codec, size int) (string, [16]byte, []byte) {
	topic := TopicName(fmt.Sprintf("bench-%s-%s-%d", kind, codec, size))
	id, err := c.CreateTopic(context.Background(), topic, [][]int32{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := c.DeleteTopic(context.Background(), topic); err != nil {
			b.Error(err)
		}
	})
	value := make([]byte, size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	return topic, id, value
}

// benchKeys are the keys the produce benchmarks cycle through, record i
// taking benchKeys[i%64].
var benchKeys = func() [][]byte {
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
	}
	return keys
}()

// newBenchProducer returns a kepoch producer with codec (default options
// otherwise; w, if not nil, counts its Produce requests), closed when b
// ends.
func newBenchProducer(b *testing.B, codec compress.Codec, w *produceWrites) *producer.Producer {
	opts := []producer.Opt{producer.SeedBrokers(Seeds...), producer.Compression(codec)}
	if w != nil {
		opts = append(opts, producer.TransportOpts(kgo.WithHooks(w)))
	}
	p, err := producer.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// newBenchKgoProducer is newBenchProducer for franz-go's producer, which
// writes to topic.
func newBenchKgoProducer(b *testing.B, codec compress.Codec, topic string, w *produceWrites) *kgo.Client {
	opts := []kgo.Opt{kgo.SeedBrokers(Seeds...), kgo.ProducerBatchCompression(kgoCodec(codec)), kgo.DefaultProduceTopic(topic)}
	if w != nil {
		opts = append(opts, kgo.WithHooks(w))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// produceKepoch writes n records of value (keys from benchKeys) to topic
// with p and waits for every acknowledgement.
func produceKepoch(b *testing.B, p *producer.Producer, topic string, value []byte, n int) {
	ctx := context.Background()
	produceN(b, n, func(i int, acked func(error)) {
		r := &producer.Record{Topic: topic, Key: benchKeys[i%len(benchKeys)], Value: value}
		if err := p.Produce(ctx, r, func(res producer.Result) { acked(res.Err) }); err != nil {
			b.Fatal(err)
		}
	})
}

// produceKgo is produceKepoch with franz-go's producer.
func produceKgo(b *testing.B, cl *kgo.Client, value []byte, n int) {
	ctx := context.Background()
	produceN(b, n, func(i int, acked func(error)) {
		cl.Produce(ctx, &kgo.Record{Key: benchKeys[i%len(benchKeys)], Value: value}, func(_ *kgo.Record, err error) { acked(err) })
	})
}

// warmTopic writes n records of value to topic with a plain kgo producer.
func warmTopic(b *testing.B, topic string, n int, value []byte) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "warm-%d", i), Value: value}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// produceN is one iteration of BenchmarkProduce: produce(i, acked) sends
// record i, whose acknowledgement calls acked with its error, for i from 0
// to n-1; it waits for every acknowledgement and fails b with an error one
// reported.
func produceN(b *testing.B, n int, produce func(i int, acked func(error))) {
	var wg sync.WaitGroup
	wg.Add(n)
	var failed error
	var mu sync.Mutex
	acked := func(err error) {
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
		}
		wg.Done()
	}
	for i := 0; i < n; i++ {
		produce(i, acked)
	}
	waitAcks(b, &wg)
	if failed != nil {
		b.Fatal(failed)
	}
}

// waitAcks waits for every acknowledgement of one iteration, failing the
// benchmark instead of hanging when a client never delivers one (seen once
// with kgo's producer, all of its sink goroutines gone).
func waitAcks(b *testing.B, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatal("records still unacknowledged after 2m")
	}
}

// produceWrites counts the Produce requests a client writes and their
// bytes (a kgo broker-write hook; both clients use kgo's connections).
type produceWrites struct{ requests, bytes atomic.Int64 }

func (w *produceWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, bytes int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // Produce
		w.requests.Add(1)
		w.bytes.Add(int64(bytes))
	}
}

// benchProduce runs b.N iterations of run, which produces n records of size
// bytes, and reports records/s, MB/s of values, the process's CPU time per
// record and, when w counts them (nil: not), the Produce requests written
// per iteration and their mean size.
func benchProduce(b *testing.B, n, size int, w *produceWrites, run func()) {
	run() // warm up: producer ID, metadata, connections
	b.ReportAllocs()
	b.ResetTimer()
	var req0, bytes0 int64
	if w != nil {
		req0, bytes0 = w.requests.Load(), w.bytes.Load()
	}
	cpu0, t0 := cpuTime(), time.Now()
	for i := 0; i < b.N; i++ {
		run()
	}
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	recs := float64(n * b.N)
	b.ReportMetric(recs/elapsed.Seconds(), "records/s")
	b.ReportMetric(recs*float64(size)/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/recs, "cpu-ns/record")
	if w != nil {
		if reqs := w.requests.Load() - req0; reqs > 0 {
			b.ReportMetric(float64(reqs)/float64(b.N), "requests/op")
			b.ReportMetric(float64(w.bytes.Load()-bytes0)/float64(reqs)/1e3, "kB/request")
		}
	}
}
