package consumer

import "testing"

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
