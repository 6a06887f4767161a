package consumer

// recycle.go: the memory Fetches.Release hands back: the record slice Poll
// returns and the buffers compressed batches are decompressed into, reused
// by later polls and fetches instead of allocated (and zeroed, and
// collected) anew; the decompression buffers an application drops without
// releasing them, which come back by themselves once nothing refers to
// them; and the pool of the Ref slices answers are buffered in.

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kepoch/kepoch/internal/batch"
)

// recycled is the process's recycler, shared by its consumers: memory one
// releases serves all (a consumer's lifetime is no bound on it).
var recycled recycler

// recycler keeps record slices and decompression buffers in size classes
// four to a power of two (classes). Record slices come back only when the
// application releases a Fetches: until its first release every record
// slice is exact, as if the recycler did not exist. Decompression buffers
// come back on release too, and otherwise by themselves (buffer). Its
// pools are sync.Pools, emptied by the garbage collector, so it holds
// nothing an idle process would keep forever.
type recycler struct {
	active atomic.Bool
	slabs  [numClasses]sync.Pool // *slab
	bufs   classPool[byte]
	// returned counts the buffers that came back by themselves.
	returned atomic.Int64
}

// classPool keeps slices of T in the recycler's size classes; a slice from
// it has len 0, and its contents are whatever a previous use left.
type classPool[T any] [numClasses]sync.Pool // *[]T

// get returns an empty slice with a capacity of n or more.
func (p *classPool[T]) get(n int) []T {
	c, alloc := classes(n)
	if v, ok := p[c].Get().(*[]T); ok {
		return (*v)[:0]
	}
	return make([]T, 0, alloc)
}

// put takes back a slice nothing refers to any more.
func (p *classPool[T]) put(s []T) {
	if cap(s) > 0 {
		s = s[:0]
		p[putClass(cap(s))].Put(&s)
	}
}

// numClasses is the number of size classes: capacities up to 8 are
// classes of their own, and each power of two above is split in four.
const numClasses = 4 * bits.UintSize

// classes returns the class a request for n must come from (every
// capacity in it is at least n) and the capacity a new allocation for the
// class gets: at most a quarter more than n (above 8; exactly n up to 8).
func classes(n int) (class int, alloc int) {
	if n <= 8 {
		n = max(n, 1)
		return n, n
	}
	e := bits.Len(uint(n-1)) - 1 // 2^e < n ≤ 2^(e+1), e ≥ 3
	step := 1 << (e - 2)
	m := (n - 1<<e + step - 1) / step // 1..4
	if m == 4 {
		e, m = e+1, 0
	}
	return 4*e + m, 1<<e + m<<(e-2)
}

// putClass is the class a slice of capacity n goes back to: the largest
// class whose allocations n covers.
func putClass(n int) int {
	if n <= 8 {
		return n
	}
	e := bits.Len(uint(n)) - 1 // 2^e ≤ n < 2^(e+1), e ≥ 3
	return 4*e + (n-1<<e)>>(e-2)
}

// autoReturnMin is the least capacity of a decompression buffer that comes
// back by itself: below it a finalizer would cost more than the memory.
const autoReturnMin = 4 << 10

// buffer returns an empty decompression buffer with room for n bytes: a
// recycled one or a new one. One of autoReturnMin or more carries a
// finalizer that hands it back to the recycler once nothing refers to it
// (no record's key or value, no Fetches): the garbage collector decides
// that, so an application that keeps its records keeps their memory, and
// one that drops them gets its buffers reused without calling Release,
// already faulted in rather than fresh from the OS. A buffer in the pool
// never has a finalizer: release clears it first (disarm), and a finalizer
// runs once.
func (r *recycler) buffer(n int) []byte {
	b := r.bufs.get(n)
	if c := cap(b); c >= autoReturnMin {
		runtime.SetFinalizer(unsafe.SliceData(b[:1]), func(p *byte) {
			r.returned.Add(1)
			r.bufs.put(unsafe.Slice(p, c))
		})
	}
	return b
}

// disarm clears the finalizer buffer set on b, which is about to go back
// by hand: it must not come back a second time.
func disarm(b []byte) {
	if cap(b) >= autoReturnMin {
		runtime.SetFinalizer(unsafe.SliceData(b[:1]), nil)
	}
}

// slab is a record slice with room for records and how much of it may
// still hold an earlier use's records: slots [0, dirty) may, the rest are
// zero. A released slice keeps no pointer past what its last use wrote, so
// that the pool does not keep memory alive through stale records.
type slab struct {
	recs  []Record // len 0 when handed out; the records written when back
	dirty int
}

// records returns an empty record slice with room for n records: a
// released one of that capacity or more, or a new one.
func (r *recycler) records(n int) slab {
	if !r.active.Load() {
		return slab{recs: make([]Record, 0, n)}
	}
	c, alloc := classes(n)
	if v, ok := r.slabs[c].Get().(*slab); ok {
		return slab{recs: v.recs[:0], dirty: v.dirty}
	}
	return slab{recs: make([]Record, 0, alloc)}
}

// release takes back the memory of a released Fetches.
func (r *recycler) release(m *pollMemory) {
	r.active.Store(true)
	r.putSlab(m.recs)
	for _, b := range m.bufs {
		disarm(b)
		if m.poison {
			b = b[:cap(b)]
			for i := range b {
				b[i] = 0xa5
			}
		}
		r.bufs.put(b)
	}
}

// putSlab takes back a record slice, its records from the last use
// included: what an earlier, longer use left past them is cleared.
func (r *recycler) putSlab(sl slab) {
	if cap(sl.recs) == 0 {
		return
	}
	w := len(sl.recs)
	if sl.dirty > w {
		clear(sl.recs[w:sl.dirty])
	}
	r.slabs[putClass(cap(sl.recs))].Put(&slab{recs: sl.recs[:0], dirty: w})
}

// pollMemory is the recyclable memory behind the records of one Poll: its
// record slice (with the records it was made with) and the decompression
// buffers they live in.
type pollMemory struct {
	r        *recycler
	poison   bool // PoisonReleased
	released atomic.Bool
	recs     slab
	bufs     [][]byte
}

// Release hands the memory of f's records back to the consumer, which
// reuses it for the records of later polls instead of allocating more:
// with small compressed records, most of a consumer's garbage. After it,
// f.Records and the keys, values and headers of every record in it must
// not be used (copy what you keep before); PoisonReleased makes a use
// after Release visible in tests. Calling it is optional: the buffers of
// records that are not released come back by themselves once nothing
// refers to them (the garbage collector finds it), and their record
// slices are collected as usual. It sets f.Records to nil; releasing
// twice, or through a copy of f, has no further effect.
func (f *Fetches) Release() {
	m := f.mem
	f.Records, f.mem = nil, nil
	if m == nil || m.released.Swap(true) {
		return
	}
	m.r.release(m)
}

// refSlices keeps the Ref slices buffered answers are decoded into: they
// never reach the application, so each goes back once its answer is
// delivered and its records made (decoded.drop), whether or not the
// application releases anything.
var refSlices classPool[batch.Ref]
