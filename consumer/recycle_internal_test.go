package consumer

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// Released memory comes back, in a class whose every capacity fits the
// request; before any release nothing is rounded up; and a Fetches
// released twice (through copies) hands its memory back once.
func TestRecycler(t *testing.T) {
	var r recycler
	if sl := r.records(100); cap(sl.recs) != 100 || sl.dirty != 0 {
		t.Fatalf("idle recycler: capacity %d, dirty %d for 100 records", cap(sl.recs), sl.dirty)
	}
	reused := 0
	for range 40 {
		s := r.records(100).recs
		b := r.bufs.get(5000)
		if cap(s) < 100 || cap(b) < 5000 || len(s) != 0 || len(b) != 0 {
			t.Fatalf("records: len %d cap %d; buffer: len %d cap %d", len(s), cap(s), len(b), cap(b))
		}
		f := Fetches{Records: s[:1], mem: &pollMemory{r: &r, recs: slab{recs: s}, bufs: [][]byte{b}}}
		g := f
		f.Release()
		g.Release() // a copy: no second hand-back
		if f.Records != nil || f.mem != nil {
			t.Fatal("Release left the records")
		}
		// Two takes never get the same memory (it went back once);
		// one of them usually gets it (sync.Pool may drop it, and
		// does at random under the race detector).
		s1, s2 := r.records(100).recs, r.records(100).recs
		b1, b2 := r.bufs.get(5000), r.bufs.get(5000)
		if &s1[:1][0] == &s2[:1][0] || &b1[:1][0] == &b2[:1][0] {
			t.Fatal("memory released once was handed out twice")
		}
		if &s1[:1][0] == &s[:1][0] || &s2[:1][0] == &s[:1][0] {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("released record slices were never reused")
	}
}

// A slice back in the recycler keeps no record past what its last use
// wrote: an earlier, longer use's records are cleared, so that the pool
// keeps no memory alive through them.
func TestRecyclerClearsStaleRecords(t *testing.T) {
	var r recycler
	r.active.Store(true)
	val := []byte("value")
	fill := func(sl slab, n int) slab {
		for i := range n {
			sl.recs = append(sl.recs, Record{Topic: "t", Offset: int64(i), Value: val})
		}
		return sl
	}
	for try := 0; try < 50; try++ {
		first := fill(r.records(10), 10)
		arr := &first.recs[:1][0]
		r.release(&pollMemory{r: &r, recs: first})
		again := r.records(10)
		if len(again.recs) != 0 || &again.recs[:1][0] != arr {
			continue // the pool dropped it (it may, under -race)
		}
		if again.dirty != 10 {
			t.Fatalf("dirty %d after a use of 10 records", again.dirty)
		}
		second := fill(again, 4)
		r.release(&pollMemory{r: &r, recs: second})
		third := r.records(10)
		if &third.recs[:1][0] != arr {
			continue
		}
		if third.dirty != 4 {
			t.Fatalf("dirty %d after a use of 4 records", third.dirty)
		}
		for i, rec := range third.recs[:cap(third.recs)] {
			if i >= 4 && (rec.Value != nil || rec.Topic != "") {
				t.Fatalf("slot %d keeps a stale record: %+v", i, rec)
			}
		}
		return
	}
	t.Fatal("the recycler never gave the same slice back")
}

// Every class serves the requests that map to it: a new allocation covers
// the request, by at most a quarter above 8 bytes, and a slice that goes
// back lands in a class none of whose requests exceeds its capacity.
func TestClasses(t *testing.T) {
	allocOf := map[int]int{} // class → what a new allocation for it gets
	check := func(n int) {
		c, alloc := classes(n)
		if alloc < n || n > 8 && alloc > n+n/4 || n <= 8 && alloc != max(n, 1) {
			t.Fatalf("classes(%d): allocation %d", n, alloc)
		}
		if prev, ok := allocOf[c]; ok && prev != alloc {
			t.Fatalf("class %d allocates %d and %d", c, prev, alloc)
		}
		allocOf[c] = alloc
		if putClass(alloc) != c {
			t.Fatalf("an allocation of %d for %d goes back to class %d, not %d", alloc, n, putClass(alloc), c)
		}
	}
	for n := 0; n <= 1<<16; n++ {
		check(n)
	}
	for e := 17; e < 40; e++ {
		for _, d := range []int{-1, 0, 1, 1<<(e-2) - 1, 1 << (e - 2), 1<<(e-2) + 1, 3 << (e - 2)} {
			check(1<<e + d)
		}
	}
	for c := 1; c <= 1<<16; c++ {
		if a, ok := allocOf[putClass(c)]; ok && a > c {
			t.Fatalf("a slice of capacity %d goes back to class %d, whose requests get %d", c, putClass(c), a)
		}
		if putClass(c) < 0 || putClass(c) >= numClasses {
			t.Fatalf("putClass(%d) = %d", c, putClass(c))
		}
	}
}

// collectUntil runs the collector until cond holds (finalizers run on
// their own goroutine after a collection), for up to d.
func collectUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
		if cond() {
			return true
		}
	}
	return false
}

// A decompression buffer comes back by itself once nothing refers to it,
// and not while anything does (a record's value is a slice of it).
func TestBufferComesBackByItself(t *testing.T) {
	r := &recycler{}
	b := r.buffer(64 << 10)
	b = append(b, make([]byte, 200)...)
	value := b[100:120] // what a record keeps
	b = nil
	if collectUntil(200*time.Millisecond, func() bool { return r.returned.Load() > 0 }) {
		t.Fatal("a buffer came back while a value in it was held")
	}
	runtime.KeepAlive(value)
	value = nil
	if !collectUntil(5*time.Second, func() bool { return r.returned.Load() == 1 }) {
		t.Fatalf("%d buffers came back, want 1", r.returned.Load())
	}
	_ = value
}

// A released buffer goes back once: Release clears its finalizer, so the
// collector never hands it back a second time (nor could it be given a
// finalizer again when reused).
func TestReleasedBufferGoesBackOnce(t *testing.T) {
	r := &recycler{}
	for range 20 {
		b := r.buffer(64 << 10) // perhaps the one released last round
		r.release(&pollMemory{r: r, bufs: [][]byte{b}})
	}
	// Whatever the pool drops is now unreachable: with a finalizer left
	// on it, it would come back.
	if collectUntil(200*time.Millisecond, func() bool { return r.returned.Load() > 0 }) {
		t.Fatalf("%d released buffers came back by themselves too", r.returned.Load())
	}
}

// Buffers handed out, kept, released and dropped by several goroutines at
// once, with the collector running often: a kept buffer's bytes never
// change (nothing reused it early), and the runtime stays sound with
// finalizers set, cleared and run all the while.
func TestBufferRecyclingUnderCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	r := &recycler{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			type kept struct {
				b    []byte
				fill byte
			}
			var keep []kept
			for i := range 3000 {
				n := autoReturnMin/2 + rng.IntN(64<<10)
				b := r.buffer(n)[:n]
				fill := byte(i)
				for j := range b {
					b[j] = fill
				}
				switch rng.IntN(4) {
				case 0: // kept a while, checked when let go
					keep = append(keep, kept{b[n/2 : n/2+1 : n/2+1], fill})
				case 1:
					r.release(&pollMemory{r: r, bufs: [][]byte{b}})
				} // else dropped
				if len(keep) > 20 {
					k := keep[0]
					keep = keep[1:]
					if k.b[0] != k.fill {
						t.Errorf("a kept buffer changed: %#x, want %#x", k.b[0], k.fill)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if r.returned.Load() == 0 {
		t.Fatal("no buffer came back by itself")
	}
}
