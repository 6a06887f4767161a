package consumer

import "testing"

// Released memory comes back, in a class whose every capacity fits the
// request; before any release nothing is rounded up; and a Fetches
// released twice (through copies) hands its memory back once.
func TestRecycler(t *testing.T) {
	var r recycler
	if s := r.records(100); cap(s) != 100 {
		t.Fatalf("idle recycler: capacity %d for 100 records", cap(s))
	}
	reused := 0
	for range 40 {
		s := r.records(100)
		b := r.buffer(5000)
		if cap(s) < 100 || cap(b) < 5000 || len(s) != 0 || len(b) != 0 {
			t.Fatalf("records: len %d cap %d; buffer: len %d cap %d", len(s), cap(s), len(b), cap(b))
		}
		f := Fetches{Records: s[:1], mem: &pollMemory{r: &r, slabs: [][]Record{s}, bufs: [][]byte{b}}}
		g := f
		f.Release()
		g.Release() // a copy: no second hand-back
		if f.Records != nil || f.mem != nil {
			t.Fatal("Release left the records")
		}
		// Two takes never get the same memory (it went back once);
		// one of them usually gets it (sync.Pool may drop it, and
		// does at random under the race detector).
		s1, s2 := r.records(100), r.records(100)
		b1, b2 := r.buffer(5000), r.buffer(5000)
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
