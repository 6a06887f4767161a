package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/internal/wire"
)

// stressPart describes how one partition of the stress topic is written.
type stressPart struct {
	codec   compress.Codec
	batches int64
	per     int64
	random  bool // incompressible values (large compressed batches: the parallel path)
	size    int  // value sizes vary in [size/4, size)
}

var stressParts = []stressPart{
	{compress.Zstd, 50, 40, true, 1400},   // large zstd batches: decompressed ahead, straight into supplied buffers
	{compress.LZ4, 30, 100, false, 600},   // undeclared size: decompressed elsewhere, copied into a supplied buffer
	{compress.None, 40, 50, true, 500},    // values alias the Fetch answer
	{compress.Gzip, 40, 30, true, 1800},   // large gzip batches: ahead and copied
	{compress.Snappy, 40, 60, false, 300}, // raw snappy declares its size
	{compress.Zstd, 200, 7, false, 100},   // many small batches, small buffers (no finalizer below 4 KiB)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// stressValue is the value of record off of partition p: a readable prefix
// and bytes derived from (p, off).
func stressValue(p int32, off int64) []byte {
	spec := stressParts[p]
	x := splitmix(uint64(off)<<8 | uint64(p))
	n := spec.size/4 + int(x%uint64(spec.size-spec.size/4))
	b := fmt.Appendf(make([]byte, 0, n+8), "p%d-%d:", p, off)
	for len(b) < n {
		x = splitmix(x)
		if spec.random {
			b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		} else {
			b = append(b, "abcdefgh"[x%8])
		}
	}
	return b[:n]
}

func stressKey(off int64) []byte {
	if off%5 == 0 {
		return nil
	}
	return []byte("k" + strconv.FormatInt(off, 10))
}

func stressHeaders(off int64) []batch.RecordHeader {
	if off%3 != 0 {
		return nil
	}
	return []batch.RecordHeader{{Key: []byte("h"), Value: []byte("hv" + strconv.FormatInt(off, 10))}}
}

// checkStressRecord reports what is wrong with r, or "".
func checkStressRecord(r *consumer.Record) string {
	if r.Partition < 0 || int(r.Partition) >= len(stressParts) {
		return fmt.Sprintf("partition %d", r.Partition)
	}
	spec := stressParts[r.Partition]
	if r.Offset < 0 || r.Offset >= spec.batches*spec.per {
		return fmt.Sprintf("p%d offset %d out of range", r.Partition, r.Offset)
	}
	if want := stressValue(r.Partition, r.Offset); !bytes.Equal(r.Value, want) {
		n := min(len(r.Value), 40)
		return fmt.Sprintf("p%d offset %d: value %q… (len %d), want %q… (len %d)", r.Partition, r.Offset, r.Value[:n], len(r.Value), want[:min(len(want), 40)], len(want))
	}
	if want := stressKey(r.Offset); !bytes.Equal(r.Key, want) || (want == nil) != (r.Key == nil) {
		return fmt.Sprintf("p%d offset %d: key %q, want %q", r.Partition, r.Offset, r.Key, want)
	}
	wh := stressHeaders(r.Offset)
	if len(wh) != len(r.Headers) {
		return fmt.Sprintf("p%d offset %d: %d headers, want %d", r.Partition, r.Offset, len(r.Headers), len(wh))
	}
	for i := range wh {
		if r.Headers[i].Key != string(wh[i].Key) || !bytes.Equal(r.Headers[i].Value, wh[i].Value) {
			return fmt.Sprintf("p%d offset %d: header %q=%q", r.Partition, r.Offset, r.Headers[i].Key, r.Headers[i].Value)
		}
	}
	return ""
}

// produceStress writes every partition of stressParts, one Produce per batch.
func produceStress(t *testing.T) *kfake.Cluster {
	t.Helper()
	c := newCluster(t, int32(len(stressParts)))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now().UnixMilli()
	b := batch.NewBuilder(nil)
	for pi, spec := range stressParts {
		p := int32(pi)
		for bi := range spec.batches {
			s := batch.DefaultSpec()
			s.Codec = spec.codec
			b.Reset(s)
			for off := bi * spec.per; off < (bi+1)*spec.per; off++ {
				if err := b.Append(now, stressKey(off), stressValue(p, off), stressHeaders(off)); err != nil {
					t.Fatal(err)
				}
			}
			enc, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			rp, err := wire.Produce(ctx, cl.Broker(int(c.LeaderFor(topic, p))), topic, c.TopicInfo(topic).TopicID, p, enc, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil || rp.BaseOffset != bi*spec.per {
				t.Fatalf("p%d batch %d: base %d err %v", p, bi, rp.BaseOffset, err)
			}
		}
	}
	return c
}

func stressSeed(t *testing.T) uint64 {
	if s := os.Getenv("KEPOCH_STRESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func stressDuration() time.Duration {
	if s := os.Getenv("KEPOCH_STRESS_SECONDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return time.Duration(n) * time.Second
		}
	}
	return 3 * time.Second
}

// bufRegistry tracks the decompression buffers of the Fetches still held
// (not released, not dropped): a buffer of a new Poll must be none of them,
// and each compressed record's value must lie in a buffer of its own Poll.
type bufRegistry struct {
	mu    sync.Mutex
	owner map[uintptr]int64
	next  int64
}

type heldFetches struct {
	f  consumer.Fetches
	id int64
}

// add registers a fresh Fetches and checks it; it reports the first problem.
func (r *bufRegistry) add(f consumer.Fetches) (heldFetches, string) {
	bufs := consumer.PollBuffers(&f)
	type span struct{ lo, hi uintptr }
	var spans []span
	for _, b := range bufs {
		if cap(b) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(b[:1])))
		spans = append(spans, span{lo, lo + uintptr(cap(b))})
	}
	for i := range f.Records {
		rec := &f.Records[i]
		if len(rec.Value) == 0 {
			continue
		}
		at := uintptr(unsafe.Pointer(unsafe.SliceData(rec.Value)))
		in := false
		for _, s := range spans {
			if at >= s.lo && at < s.hi {
				in = true
			}
		}
		compressed := stressParts[rec.Partition].codec != compress.None
		if in != compressed {
			return heldFetches{}, fmt.Sprintf("p%d offset %d (%v): value in one of its poll's buffers: %v", rec.Partition, rec.Offset, stressParts[rec.Partition].codec, in)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owner == nil {
		r.owner = map[uintptr]int64{}
	}
	r.next++
	id := r.next
	for _, s := range spans {
		if o, ok := r.owner[s.lo]; ok {
			return heldFetches{}, fmt.Sprintf("a buffer of a new poll (%d) is still a buffer of held poll %d", id, o)
		}
		r.owner[s.lo] = id
	}
	return heldFetches{f: f, id: id}, ""
}

// forget unregisters h's buffers: call it before h is released or dropped.
func (r *bufRegistry) forget(h heldFetches) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range consumer.PollBuffers(&h.f) {
		if cap(b) > 0 {
			delete(r.owner, uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))))
		}
	}
}

// heldSet is the Fetches the pollers keep, checked again after later polls
// and collections, then released or dropped.
type heldSet struct {
	mu   sync.Mutex
	held []heldFetches
}

func (h *heldSet) add(f heldFetches, max int) (evicted []heldFetches) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, f)
	if len(h.held) > max {
		k := len(h.held) - max
		evicted = append(evicted, h.held[:k]...)
		h.held = append(h.held[:0:0], h.held[k:]...)
	}
	return evicted
}

// check checks every held record; it reports the first problem.
func (h *heldSet) check() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.held {
		for i := range f.f.Records {
			if msg := checkStressRecord(&f.f.Records[i]); msg != "" {
				return "held record: " + msg
			}
		}
	}
	return ""
}

// TestStressConcurrentPollsExactlyOnce: several Polls at once over answers
// split by a small MaxPollRecords, with DecompressParallelism, pauses and
// resumes, a Release of some Fetches (from another goroutine than the one
// that polled), others held and checked again after later polls and
// collections, others dropped for the finalizers: every record of every
// partition arrives exactly once with its own key, value and headers, and
// a held record never changes.
func TestStressConcurrentPollsExactlyOnce(t *testing.T) {
	seed := stressSeed(t)
	t.Logf("KEPOCH_STRESS_SEED=%d", seed)
	c := produceStress(t)
	cons := newConsumer(t, c, consumer.MaxPollRecords(37), consumer.DecompressParallelism(4), consumer.PoisonReleased(),
		consumer.FetchMaxBytes(1<<20), consumer.MaxBufferedBytes(3<<20))
	assignAll(t, cons, int32(len(stressParts)), consumer.At(0))
	total := int64(0)
	for _, s := range stressParts {
		total += s.batches * s.per
	}
	var (
		seenMu sync.Mutex
		seen   = map[[2]int64]int{}
		count  atomic.Int64
		failed atomic.Value
	)
	fail := func(msg string) {
		failed.CompareAndSwap(nil, msg)
	}
	held := &heldSet{}
	reg := &bufRegistry{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	release := make(chan consumer.Fetches, 64)
	wg.Add(1)
	go func() { // releases what the pollers hand it, from its own goroutine
		defer wg.Done()
		for f := range release {
			f.Release()
		}
	}()
	stop := make(chan struct{})
	var pollers sync.WaitGroup
	for g := range 3 {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for count.Load() < total && failed.Load() == nil && ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				f, err := cons.Poll(pctx)
				pcancel()
				if err != nil {
					continue
				}
				if len(f.Errors)+len(f.Truncations) > 0 {
					fail(fmt.Sprintf("errors %v truncations %v", f.Errors, f.Truncations))
					return
				}
				last := map[int32]int64{}
				for i := range f.Records {
					r := &f.Records[i]
					if msg := checkStressRecord(r); msg != "" {
						fail("fresh record: " + msg)
						return
					}
					if l, ok := last[r.Partition]; ok && r.Offset <= l {
						fail(fmt.Sprintf("p%d: offset %d after %d in one poll", r.Partition, r.Offset, l))
					}
					last[r.Partition] = r.Offset
				}
				seenMu.Lock()
				for i := range f.Records {
					seen[[2]int64{int64(f.Records[i].Partition), f.Records[i].Offset}]++
				}
				seenMu.Unlock()
				count.Add(int64(len(f.Records)))
				h, msg := reg.add(f)
				if msg != "" {
					fail(msg)
					return
				}
				switch rng.IntN(4) {
				case 0:
					reg.forget(h)
					f.Release()
				case 1:
					reg.forget(h)
					release <- f
				case 2:
					for _, e := range held.add(h, 24) {
						reg.forget(e)
						if rng.IntN(2) == 0 {
							e.f.Release()
						}
					}
				default: // dropped
					reg.forget(h)
				}
				if rng.IntN(8) == 0 {
					runtime.GC()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // pauses and resumes, and checks the held records
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(rng.IntN(10)) * time.Millisecond):
			}
			tp := consumer.TopicPartition{Topic: topic, Partition: int32(rng.IntN(len(stressParts)))}
			cons.Pause(tp)
			if rng.IntN(3) == 0 {
				runtime.GC()
			}
			cons.Resume(tp)
			if msg := held.check(); msg != "" {
				fail(msg)
			}
		}
	}()
	pollers.Wait()
	close(stop)
	close(release)
	wg.Wait()
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if msg := held.check(); msg != "" {
		fail(msg)
	}
	if msg := failed.Load(); msg != nil {
		t.Fatalf("seed %d: %s", seed, msg)
	}
	for pi, s := range stressParts {
		for off := range s.batches * s.per {
			if n := seen[[2]int64{int64(pi), off}]; n != 1 {
				t.Fatalf("seed %d: p%d offset %d delivered %d times", seed, pi, off, n)
			}
		}
	}
	if int64(len(seen)) != total || count.Load() != total {
		t.Fatalf("seed %d: %d distinct records, %d delivered, want %d", seed, len(seen), count.Load(), total)
	}
}

// TestStressSeeksUnderConcurrentPolls: the same, with random seeks of every
// partition while Polls run (answers part delivered are dropped): every
// record delivered still has its own bytes, fresh and after later polls,
// releases and collections.
func TestStressSeeksUnderConcurrentPolls(t *testing.T) {
	seed := stressSeed(t)
	t.Logf("KEPOCH_STRESS_SEED=%d", seed)
	c := produceStress(t)
	cons := newConsumer(t, c, consumer.MaxPollRecords(23), consumer.DecompressParallelism(3), consumer.PoisonReleased(),
		consumer.FetchMaxBytes(1<<20), consumer.MaxBufferedBytes(2<<20))
	assignAll(t, cons, int32(len(stressParts)), consumer.At(0))
	var (
		failed atomic.Value
		polls  atomic.Int64
		recs   atomic.Int64
	)
	fail := func(msg string) { failed.CompareAndSwap(nil, msg) }
	held := &heldSet{}
	reg := &bufRegistry{}
	deadline := time.Now().Add(stressDuration())
	ctx, cancel := context.WithTimeout(context.Background(), stressDuration()+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for time.Now().Before(deadline) && failed.Load() == nil {
				pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				f, err := cons.Poll(pctx)
				pcancel()
				if err != nil {
					continue
				}
				if len(f.Errors) > 0 {
					fail(fmt.Sprintf("errors %v", f.Errors))
					return
				}
				polls.Add(1)
				recs.Add(int64(len(f.Records)))
				for i := range f.Records {
					if msg := checkStressRecord(&f.Records[i]); msg != "" {
						fail("fresh record: " + msg)
						return
					}
				}
				h, msg := reg.add(f)
				if msg != "" {
					fail(msg)
					return
				}
				switch rng.IntN(3) {
				case 0:
					reg.forget(h)
					f.Release()
				case 1:
					for _, e := range held.add(h, 32) {
						reg.forget(e)
						if rng.IntN(2) == 0 {
							e.f.Release()
						}
					}
				default: // dropped
					reg.forget(h)
				}
				if rng.IntN(6) == 0 {
					runtime.GC()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // seeks, pauses, resumes; checks the held records
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 77))
		for time.Now().Before(deadline) && failed.Load() == nil {
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
			p := int32(rng.IntN(len(stressParts)))
			s := stressParts[p]
			tp := consumer.TopicPartition{Topic: topic, Partition: p}
			switch rng.IntN(5) {
			case 0, 1:
				if err := cons.Seek(topic, p, rng.Int64N(s.batches*s.per)); err != nil {
					fail(err.Error())
				}
			case 2:
				cons.Pause(tp)
			case 3:
				cons.Resume(tp)
			case 4:
				runtime.GC()
			}
			if msg := held.check(); msg != "" {
				fail(msg)
			}
		}
	}()
	wg.Wait()
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if msg := held.check(); msg != "" {
		fail(msg)
	}
	if msg := failed.Load(); msg != nil {
		t.Fatalf("seed %d: %s", seed, msg)
	}
	t.Logf("%d polls, %d records", polls.Load(), recs.Load())
	if recs.Load() < 1000 {
		t.Fatalf("only %d records: the test needs many", recs.Load())
	}
}
