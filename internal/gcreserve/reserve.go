// Package gcreserve keeps the process's garbage-collection reserve: one
// block of heap memory, allocated and then never written or read, kept
// reachable while any client holds it.
//
// Why a client library holds one: Go's collector starts a cycle when the
// heap has grown by GOGC percent (100 by default) of what the previous
// cycle found live, and never below 4 MiB. A consumer moves fetched data
// through the heap in large short-lived blocks (the transport reads each
// Fetch answer, up to a MiB per partition, into memory of its own) while
// keeping little of it live. In a process whose own live heap is small,
// as in most pipeline services, the collector then runs about once per
// answer read, and at 1 KiB records that cost the benchmark's consumer
// a third or more of its CPU per record. The reserve counts as live, so
// cycles come once per reserve's worth of allocation instead: fewer
// cycles, the same garbage.
//
// The reserve is one per process whatever the number of holders: its size
// is the largest any current holder asked for, so ten consumers do not
// reserve ten times. It is freed when the last holder releases it.
//
// What it costs: the heap's goal grows by twice the reserve, so up to
// that much more garbage may wait for a cycle, and the reserve itself is
// resident whenever the runtime had to clear reused memory for it
// (memory fresh from the operating system stays untouched). It adds
// nothing to marking: the block holds no pointers. Under GOMEMLIMIT the
// reserve counts towards the limit like any live memory. With GOGC=off the
// collector does not pace by the live heap at all and no reserve is taken.
package gcreserve

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Hold is one holder's claim on the reserve. Its zero value and nil hold
// nothing.
type Hold struct {
	size     int
	released atomic.Bool
}

var (
	mu    sync.Mutex
	holds = map[int]int{} // size → number of holders asking for it
	block []byte          // the reserve; len(block) == largest(holds)
)

// Take claims a reserve of n bytes (none if n ≤ 0 or GOGC is off) until
// Release. The process's reserve becomes n if n is larger than every
// other holder's.
func Take(n int) *Hold {
	if n <= 0 || gcOff() {
		return &Hold{}
	}
	mu.Lock()
	defer mu.Unlock()
	holds[n]++
	resizeLocked()
	return &Hold{size: n}
}

// Release gives the claim up; the reserve shrinks to the largest claim
// left, and is freed with the last. Release is idempotent and safe on nil.
func (h *Hold) Release() {
	if h == nil || h.size == 0 || !h.released.CompareAndSwap(false, true) {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if holds[h.size]--; holds[h.size] == 0 {
		delete(holds, h.size)
	}
	resizeLocked()
}

// Size returns the bytes h claims: 0 once released, or if it claimed none.
func (h *Hold) Size() int {
	if h == nil || h.released.Load() {
		return 0
	}
	return h.size
}

// Current returns the process's reserve in bytes.
func Current() int {
	mu.Lock()
	defer mu.Unlock()
	return len(block)
}

// resizeLocked makes block the size largest(holds) asks for.
func resizeLocked() {
	want := largest(holds)
	if want == len(block) {
		return
	}
	block = nil // the old block is garbage before the new one is made
	if want > 0 {
		block = make([]byte, want)
	}
}

// largest returns the largest size with a holder, or 0.
func largest(holds map[int]int) int {
	n := 0
	for size, count := range holds {
		if count > 0 && size > n {
			n = size
		}
	}
	return n
}

// gcOff reports whether GOGC is off (the collector then runs only for
// GOMEMLIMIT, and a reserve would change nothing but memory).
func gcOff() bool {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Kind() == metrics.KindUint64 && int64(s[0].Value.Uint64()) < 0
}
