package integration

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/compress"
)

// The paired benchmarks run kepoch and kgo in turns inside one benchmark,
// one iteration each, alternating which goes first, and report kepoch's
// throughput as a multiple of kgo's (x-kgo: the geometric mean of the
// pairs' ratios) beside each client's records/s, CPU per record,
// collections per turn and the largest heap a turn held (peak-heap-MiB,
// sampled every 2 ms: what a client's speed costs in memory). On a
// machine whose cluster drifts between fast and slow spells (seen here:
// uncompressed 1 KiB produce runs hold ~130k or ~260k records/s for
// seconds at a time, whichever client runs), a pair shares its spell, so
// the ratio is steadier than a comparison of separate runs. Between turns
// (untimed) the client is closed and the heap collected, so that neither
// turn pays for the other's garbage.
//
//	KEPOCH_KAFKA=1 go test -run '^$' -bench Paired -count 6 ./integration/

// pairs runs b.N pairs of kepoch and kgo iterations, alternating the order,
// each moving n records; an iteration returns what ends it (closing a
// client), which is not measured, or nil. It reports the figures.
func pairs(b *testing.B, n int, kepoch, kgo func() (end func())) {
	pairsOf(b, n, n, "kepoch", kepoch, kgo)
}

// pairsOf is pairs with side0, named name in the figures and moving n0
// records an iteration, in kepoch's place (kgo moves n).
func pairsOf(b *testing.B, n0, n int, name string, side0, kgo func() (end func())) {
	sides := [2]func() func(){side0, kgo}
	for _, side := range sides { // warm up
		if end := side(); end != nil {
			end()
		}
	}
	b.ResetTimer()
	var (
		logRatio     float64
		elapsed, cpu [2]time.Duration
		gcs, peak    [2]uint64
	)
	for i := 0; i < b.N; i++ {
		var took [2]time.Duration
		for j := range 2 {
			side := (i + j) % 2 // even pairs: kepoch first
			h := sampleHeap()
			g0, c0, t0 := gcCycles(), cpuTime(), time.Now()
			end := sides[side]()
			took[side] = time.Since(t0)
			cpu[side] += cpuTime() - c0
			gcs[side] += gcCycles() - g0
			peak[side] = max(peak[side], h.end())
			// Untimed: closing the client, and a collection so that
			// neither turn pays for the other's garbage.
			b.StopTimer()
			if end != nil {
				end()
			}
			runtime.GC()
			b.StartTimer()
		}
		elapsed[0] += took[0]
		elapsed[1] += took[1]
		// Throughput ratio of the pair.
		logRatio += math.Log(float64(n0) / took[0].Seconds() / (float64(n) / took[1].Seconds()))
	}
	b.StopTimer()
	recs0, recs := float64(n0*b.N), float64(n*b.N)
	b.ReportMetric(math.Exp(logRatio/float64(b.N)), "x-kgo")
	b.ReportMetric(recs0/elapsed[0].Seconds(), name+"-records/s")
	b.ReportMetric(recs/elapsed[1].Seconds(), "kgo-records/s")
	b.ReportMetric(float64(cpu[0].Nanoseconds())/recs0, name+"-cpu-ns/record")
	b.ReportMetric(float64(cpu[1].Nanoseconds())/recs, "kgo-cpu-ns/record")
	b.ReportMetric(float64(gcs[0])/float64(b.N), name+"-gcs/turn")
	b.ReportMetric(float64(gcs[1])/float64(b.N), "kgo-gcs/turn")
	b.ReportMetric(float64(peak[0])/(1<<20), name+"-peak-heap-MiB")
	b.ReportMetric(float64(peak[1])/(1<<20), "kgo-peak-heap-MiB")
}

// heapSampler follows the heap's size during a turn: the bytes of heap
// objects, live or garbage not yet swept (what the process holds for its
// heap, GC reserve included), read every 2 ms.
type heapSampler struct {
	stop chan struct{}
	done chan uint64
}

// sampleHeap starts following the heap.
func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan uint64)}
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var peak uint64
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-h.stop:
				h.done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return h
}

// end stops following the heap and returns the most it held.
func (h *heapSampler) end() uint64 {
	close(h.stop)
	return <-h.done
}

// gcCycles is how many collections the runtime started by itself (not
// runtime.GC's) so far. A consumer's allocations are mostly its answers,
// freed as soon as delivered: its live heap stays small, and the
// collector, whose heap goal is twice the live heap but at least 4 MiB
// (GOGC=100), runs every few MiB fetched. How many times it ran in a turn
// is reported beside the throughput because it explains much of it (the
// README's paragraph on GOGC).
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/automatic:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkProducePaired is BenchmarkProduce with the clients in turns: the
// same topic (3 partitions, replication factor 3), records, acks=all and
// idempotence; one producer of each kind for the whole benchmark. Its
// bound-paired runs put BenchmarkProduceBound's raw requests in kepoch's
// place, so the ceiling's multiple of kgo is measured the same way.
func BenchmarkProducePaired(b *testing.B) {
	c := Require(b)
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			n := benchRecords(size)
			b.Run(fmt.Sprintf("%s/%dB/paired", codec, size), func(b *testing.B) {
				topic, _, value := produceBenchTopic(b, c, "paired", codec, size)
				warmTopic(b, topic, n, value)
				p := newBenchProducer(b, codec, nil)
				cl := newBenchKgoProducer(b, codec, topic, nil)
				pairs(b, n,
					func() func() { produceKepoch(b, p, topic, value, n); return nil },
					func() func() { produceKgo(b, cl, value, n); return nil })
			})
			b.Run(fmt.Sprintf("%s/%dB/bound-paired", codec, size), func(b *testing.B) {
				topic, id, value := produceBenchTopic(b, c, "bound-paired", codec, size)
				warmTopic(b, topic, n, value)
				run, records, closeFn := produceBoundRun(b, codec, topic, id, value, n)
				defer closeFn()
				cl := newBenchKgoProducer(b, codec, topic, nil)
				pairsOf(b, records, n, "bound",
					func() func() { run(); return nil },
					func() func() { produceKgo(b, cl, value, n); return nil })
			})
		}
	}
}

// BenchmarkConsumePaired is BenchmarkConsume with the clients in turns:
// each turn a new client reads the pre-produced topic from the start. The
// paired runs use each client as it is by default, the pooled-paired runs
// with the memory of consumed records handed back (kepoch-release against
// kgo-pooled), the reserve0-paired runs with kepoch holding no GC reserve
// (GCReserve(0): kgo holds none; what the reserve is worth, and what
// kepoch reads without it). The bound-paired runs put BenchmarkConsumeBound's reader in
// kepoch's place: their x-kgo is the ceiling's own multiple of kgo,
// measured the same way, beyond which no client's x-kgo can go on this
// machine. Besides uncompressed and zstd records (kgo's zstd frames
// declare their size), lz4 ones stand for the codecs whose frames do not
// (the Java client's lz4 and zstd alike).
func BenchmarkConsumePaired(b *testing.B) {
	c := Require(b)
	b.Cleanup(func() { deleteBenchTopics(b, c) })
	for _, codec := range []compress.Codec{compress.None, compress.Zstd, compress.LZ4} {
		for _, size := range []int{100, 1024} {
			n := consumeRecords(size)
			for _, pooled := range []bool{false, true} {
				name := "paired"
				if pooled {
					name = "pooled-paired"
				}
				b.Run(fmt.Sprintf("%s/%dB/%s", codec, size, name), func(b *testing.B) {
					topic := benchTopic(b, c, codec, size, n)
					pairs(b, n,
						func() func() { return consumeKepoch(b, topic, n, 1, pooled) },
						func() func() { return consumeKgo(b, topic, n, pooled) })
				})
			}
			b.Run(fmt.Sprintf("%s/%dB/reserve0-paired", codec, size), func(b *testing.B) {
				topic := benchTopic(b, c, codec, size, n)
				pairs(b, n,
					func() func() { return consumeKepoch(b, topic, n, 1, false, consumer.GCReserve(0)) },
					func() func() { return consumeKgo(b, topic, n, false) })
			})
			b.Run(fmt.Sprintf("%s/%dB/bound-paired", codec, size), func(b *testing.B) {
				topic := benchTopic(b, c, codec, size, n)
				id := topicID(b, c, topic)
				pairsOf(b, n, n, "bound",
					func() func() { return consumeBound(b, topic, id, n) },
					func() func() { return consumeKgo(b, topic, n, false) })
			})
		}
	}
}
