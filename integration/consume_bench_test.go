package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/compress"
)

// Fetch sizes shared by both consumers of BenchmarkConsume.
const (
	benchFetchMaxBytes     = 50 << 20
	benchFetchMaxPartBytes = 1 << 20
	benchFetchMaxWait      = 500 * time.Millisecond
	benchPartitions        = 3
)

// benchTopics caches the pre-produced topic of each configuration, so that
// -count repeats do not produce again.
var benchTopics sync.Map // "codec/size" → topic

// benchTopic returns a topic with 3 partitions (replication factor 1, one
// partition led by each broker) holding n records of size bytes written
// with codec, creating and filling it on first use.
func benchTopic(b *testing.B, c *Cluster, codec compress.Codec, size, n int) string {
	key := fmt.Sprintf("%s/%d", codec, size)
	if t, ok := benchTopics.Load(key); ok {
		return t.(string)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic := TopicName(fmt.Sprintf("bench-consume-%s-%d", codec, size))
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1}, {2}, {3}}, nil); err != nil {
		b.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgoCodec(codec)),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	// Values that compress about as well as typical JSON-ish payloads:
	// a random pick of words.
	words := []string{"id", "user", "event", "click", "view", "2024", "true", "false", "null", "value", "{", "}", ":", ",", "\""}
	rng := rand.New(rand.NewPCG(1, 2))
	var (
		mu     sync.Mutex
		failed error
	)
	for i := 0; i < n; i++ {
		v := make([]byte, 0, size)
		for len(v) < size {
			v = append(v, words[rng.IntN(len(words))]...)
			v = append(v, byte('0'+rng.IntN(10)))
		}
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: v[:size]}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if failed != nil {
		b.Fatal(failed)
	}
	benchTopics.Store(key, topic)
	return topic
}

// kgoCodec is franz-go's producer codec for codec: kgo writes zstd frames
// that declare their content size, lz4 frames that do not (as the Java
// client's).
func kgoCodec(codec compress.Codec) kgo.CompressionCodec {
	switch codec {
	case compress.Zstd:
		return kgo.ZstdCompression()
	case compress.LZ4:
		return kgo.Lz4Compression()
	case compress.Gzip:
		return kgo.GzipCompression()
	case compress.Snappy:
		return kgo.SnappyCompression()
	}
	return kgo.NoCompression()
}

// deleteBenchTopics deletes the topics benchTopic made.
func deleteBenchTopics(b *testing.B, c *Cluster) {
	benchTopics.Range(func(key, topic any) bool {
		if err := c.DeleteTopic(context.Background(), topic.(string)); err != nil {
			b.Error(err)
		}
		benchTopics.Delete(key)
		return true
	})
}

// BenchmarkConsume compares kepoch's consumer with franz-go's on the real
// cluster, side by side in one run: each iteration starts a new client and
// reads a pre-produced topic of 3 partitions (one per broker) from the start
// to the end, with the same fetch sizes for both clients (50 MiB per fetch,
// 1 MiB per partition). A new client per iteration keeps a fetch left in
// flight by the previous iteration out of the measurement. Each client runs
// as an application uses it by default (kepoch, kgo) and with the memory of
// consumed records handed back for reuse (kepoch-release: Fetches.Release;
// kgo-pooled: WithPools and Record.Recycle, with pools like kepoch's):
// compare like with like. Reported: records/s, MB/s of record values, and
// the process's user+system CPU time per record.
//
//	KEPOCH_KAFKA=1 go test -run '^$' -bench BenchmarkConsume -count 6 ./integration/
func BenchmarkConsume(b *testing.B) {
	c := Require(b)
	b.Cleanup(func() { deleteBenchTopics(b, c) })
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			n := consumeRecords(size)
			// run is client's sub-benchmark: read reads the n records of
			// topic with a new client and returns what closes it.
			run := func(client string, read func(b *testing.B, topic string) (closeFn func())) {
				b.Run(fmt.Sprintf("%s/%dB/%s", codec, size, client), func(b *testing.B) {
					topic := benchTopic(b, c, codec, size, n)
					benchConsume(b, n, size, func() func() { return read(b, topic) })
				})
			}
			runKepoch := func() {
				run("kepoch", func(b *testing.B, topic string) func() { return consumeKepoch(b, topic, n, 1, false) })
				run("kepoch-release", func(b *testing.B, topic string) func() { return consumeKepoch(b, topic, n, 1, true) })
				if codec != compress.None && runtime.GOMAXPROCS(0) > 1 {
					run("kepoch-parallel", func(b *testing.B, topic string) func() {
						return consumeKepoch(b, topic, n, runtime.GOMAXPROCS(0), false)
					})
				}
			}
			runKgo := func() {
				run("kgo", func(b *testing.B, topic string) func() { return consumeKgo(b, topic, n, false) })
				run("kgo-pooled", func(b *testing.B, topic string) func() { return consumeKgo(b, topic, n, true) })
			}
			if kgoFirst() {
				runKgo()
				runKepoch()
			} else {
				runKepoch()
				runKgo()
			}
		}
	}
}

// consumeKepoch reads the n records of topic's benchPartitions partitions
// from offset 0 with a new kepoch consumer (decompressing with parallel
// goroutines, and opts besides), releasing each poll's records after
// counting them with release, and returns the function that closes it.
func consumeKepoch(b *testing.B, topic string, n, parallel int, release bool, opts ...consumer.Opt) (closeFn func()) {
	cons, err := consumer.New(append([]consumer.Opt{consumer.SeedBrokers(Seeds...),
		consumer.FetchMaxBytes(benchFetchMaxBytes), consumer.FetchMaxPartitionBytes(benchFetchMaxPartBytes),
		consumer.FetchMaxWait(benchFetchMaxWait), consumer.DecompressParallelism(parallel)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	as := make([]consumer.Assignment, benchPartitions)
	for p := range as {
		as[p] = consumer.Assignment{Topic: topic, Partition: int32(p), Start: consumer.At(0)}
	}
	if err := cons.Assign(as...); err != nil {
		b.Fatal(err)
	}
	readN(b, n, func(ctx context.Context) (int, error) {
		f, err := cons.Poll(ctx)
		if err != nil {
			return 0, err
		}
		if len(f.Truncations)+len(f.Errors) > 0 {
			b.Fatalf("events %v errors %v", f.Truncations, f.Errors)
		}
		n := len(f.Records)
		if release {
			f.Release()
		}
		return n, nil
	})
	return func() { cons.Close(context.Background()) }
}

// consumeKgo is consumeKepoch with franz-go's consumer, the same fetch
// sizes; with pooled, its pools (sharedKgoPools) and every record recycled
// after counting.
func consumeKgo(b *testing.B, topic string, n int, pooled bool) (closeFn func()) {
	start := map[int32]kgo.Offset{}
	for p := int32(0); p < benchPartitions; p++ {
		start[p] = kgo.NewOffset().At(0)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(Seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchMaxBytes(benchFetchMaxBytes), kgo.FetchMaxPartitionBytes(benchFetchMaxPartBytes),
		kgo.FetchMaxWait(benchFetchMaxWait)}
	if pooled {
		opts = append(opts, kgo.WithPools(sharedKgoPools))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	readN(b, n, func(ctx context.Context) (int, error) {
		fs := cl.PollFetches(ctx)
		k := fs.NumRecords()
		if pooled {
			fs.EachRecord(func(r *kgo.Record) { r.Recycle() })
		}
		return k, fs.Err()
	})
	return cl.Close
}

// consumeRecords is how many records of size bytes an iteration of the
// consume benchmarks reads, each with a new client from offset 0: 1M of
// 100 B, 250k of 1 KiB. A new client's first record comes 20-70 ms after it
// starts (connections, metadata, the first full fetch): a quarter to a
// third of a 200k-record iteration, a few percent of these, so that the
// figures measure throughput rather than start-up.
func consumeRecords(size int) int { return 5 * benchRecords(size) }

// kgoFirst says whether the benchmarks run franz-go before kepoch in each
// configuration (KEPOCH_BENCH_ORDER=kgo-first). scripts/bench-real.sh
// alternates it between rounds, one process per round, so that a drift of
// the machine or the cluster during a run does not favour one client.
func kgoFirst() bool { return os.Getenv("KEPOCH_BENCH_ORDER") == "kgo-first" }

// readN polls until n records are read, within 2 minutes: poll returns
// how many records one poll read, or its error. Reading more than n fails b.
func readN(b *testing.B, n int, poll func(context.Context) (int, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := 0
	for got < n {
		k, err := poll(ctx)
		if err != nil {
			b.Fatalf("poll after %d of %d records: %v", got, n, err)
		}
		got += k
	}
	if got != n {
		b.Fatalf("read %d records of %d", got, n)
	}
}

// benchConsume runs b.N iterations of run, which reads the n records with a
// new client and returns the function closing it; closing is not measured.
func benchConsume(b *testing.B, n, size int, run func() (closeFn func())) {
	run()() // warm up: the cluster's page cache, the code paths
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed, cpu time.Duration
	for i := 0; i < b.N; i++ {
		cpu0, t0 := cpuTime(), time.Now()
		closeFn := run()
		elapsed += time.Since(t0)
		cpu += cpuTime() - cpu0
		b.StopTimer()
		closeFn()
		b.StartTimer()
	}
	b.StopTimer()
	recs := float64(n * b.N)
	b.ReportMetric(recs/elapsed.Seconds(), "records/s")
	b.ReportMetric(recs*float64(size)/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/recs, "cpu-ns/record")
}
