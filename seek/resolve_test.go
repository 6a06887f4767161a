package seek

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNearest(t *testing.T) {
	for _, c := range []struct {
		name   string
		want   Position
		answer EpochEnd
		got    Position
		ok     bool
	}{
		{"kept in its epoch", Position{100, 4}, EpochEnd{4, 150}, Position{100, 4}, true},
		{"kept at the very end", Position{100, 4}, EpochEnd{4, 100}, Position{100, 4}, true},
		{"epoch ends before", Position{100, 4}, EpochEnd{4, 90}, Position{90, 4}, true},
		{"epoch gone, older one ends before", Position{100, 4}, EpochEnd{3, 80}, Position{80, 3}, true},
		{"epoch gone, older one reaches past", Position{100, 4}, EpochEnd{3, 120}, Position{100, NoEpoch}, true},
		{"moved to offset 0", Position{100, 4}, EpochEnd{4, 0}, Position{0, NoEpoch}, true},
		{"undefined", Position{100, 4}, EpochEnd{NoEpoch, NoOffset}, Position{NoOffset, NoEpoch}, false},
		{"undefined end only", Position{100, 4}, EpochEnd{4, NoOffset}, Position{NoOffset, NoEpoch}, false},
	} {
		got, ok := Nearest(c.want, c.answer)
		if got != c.got || ok != c.ok {
			t.Errorf("%s: Nearest(%v, %v) = %v, %v; want %v, %v", c.name, c.want, c.answer, got, ok, c.got, c.ok)
		}
	}
}

// lineageOf builds a lineage from batches {epoch, first offset consumed}.
func lineageOf(claim Position, steps ...EpochStart) *Lineage {
	l := newLineage(16)
	l.root(claim)
	for _, s := range steps {
		l.observe(s.Epoch, s.Start)
	}
	return &l
}

func TestCompare(t *testing.T) {
	noClaim := Position{Offset: 0, Epoch: NoEpoch}
	x := Position{}
	for _, c := range []struct {
		name       string
		check      Position
		answer     EpochEnd
		lineage    *Lineage
		out        outcome
		at, resume Position
		recheck    Position
	}{
		{"same epoch, end after", Position{100, 5}, EpochEnd{5, 120}, lineageOf(Position{100, 5}), outConsistent, x, x, x},
		{"same epoch, end at position", Position{100, 5}, EpochEnd{5, 100}, lineageOf(Position{100, 5}), outConsistent, x, x, x},
		{"undefined", Position{100, 5}, EpochEnd{NoEpoch, NoOffset}, lineageOf(Position{100, 5}), outUndefined, x, x, x},
		{"same epoch, end before, no lineage: Kafka's bound, maybe an echo", Position{100, 5}, EpochEnd{5, 90}, lineageOf(Position{100, 5}),
			outBound, Position{90, 5}, Position{90, NoEpoch}, x},
		{"same epoch, end before, lineage agrees", Position{100, 5}, EpochEnd{5, 90}, lineageOf(noClaim, EpochStart{4, 0}, EpochStart{5, 50}),
			outExact, Position{90, 5}, Position{90, 5}, x},
		{"same epoch, end before, our record below is older: recheck", Position{100, 5}, EpochEnd{5, 40}, lineageOf(noClaim, EpochStart{4, 0}, EpochStart{5, 50}),
			outRecheck, Position{40, 5}, Position{40, NoEpoch}, Position{40, 4}},
		{"leader lacks our epoch, end beyond: lineage locates", Position{100, 5}, EpochEnd{4, 130}, lineageOf(noClaim, EpochStart{4, 0}, EpochStart{5, 50}),
			outExact, Position{50, 4}, Position{50, 4}, x},
		{"leader lacks our epoch, no lineage: the last record", Position{100, 5}, EpochEnd{4, 130}, lineageOf(Position{100, 5}),
			outBound, Position{99, NoEpoch}, Position{99, NoEpoch}, x},
		{"leader lacks our epoch, ends before: its range is not empty", Position{100, 5}, EpochEnd{4, 60}, lineageOf(Position{100, 5}),
			outBound, Position{60, 4}, Position{60, 4}, x},
		{"leader lacks our epoch, end before our epoch began", Position{100, 5}, EpochEnd{4, 30}, lineageOf(noClaim, EpochStart{4, 0}, EpochStart{5, 50}),
			outExact, Position{30, 4}, Position{30, 4}, x},
		{"below everything consumed", Position{100, 5}, EpochEnd{3, 20}, lineageOf(noClaim, EpochStart{5, 60}),
			outExact, Position{20, 3}, Position{20, 3}, x},
		{"down to offset 0", Position{100, 5}, EpochEnd{5, 0}, lineageOf(Position{100, 5}), outExact, Position{0, 5}, Position{0, NoEpoch}, x},
		{"nothing consumed", Position{0, 5}, EpochEnd{3, 0}, lineageOf(noClaim), outConsistent, x, x, x},
	} {
		v := compare(c.check, c.answer, c.lineage)
		if v.out != c.out || v.at != c.at || v.resume != c.resume || v.recheck != c.recheck {
			t.Errorf("%s: compare(%v, %v, %v) = %+v; want out %d at %v resume %v recheck %v",
				c.name, c.check, c.answer, c.lineage, v, c.out, c.at, c.resume, c.recheck)
		}
	}
}

// TestLineageAgainstNaive cross-checks the bounded lineage with a naive
// history of every consumed offset's epoch: known epochs are right, and
// firstAbove is never below the true first offset above an epoch (an upper
// bound, so a divergence is never placed too early), and exact while nothing
// was forgotten.
func TestLineageAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 500 {
		size := 2 + rng.IntN(5)
		l := newLineage(size)
		var naive []int32 // epoch of every consumed offset from 0
		epoch := int32(rng.IntN(3))
		forgot := false
		distinct := 0
		for range 1 + rng.IntN(40) {
			if rng.IntN(3) == 0 {
				epoch += 1 + int32(rng.IntN(3))
			}
			n := 1 + rng.IntN(5)
			if len(naive) == 0 || naive[len(naive)-1] != epoch {
				distinct++
				forgot = forgot || distinct > size
			}
			l.observe(epoch, int64(len(naive)))
			for range n {
				naive = append(naive, epoch)
			}
		}
		c := int64(len(naive))
		for o := int64(0); o < c; o++ {
			if e, ok := l.epochAt(o); ok && e != naive[o] {
				t.Fatalf("run %d: epochAt(%d) = %d, want %d (lineage %v)", run, o, e, naive[o], &l)
			} else if !ok && !forgot {
				t.Fatalf("run %d: epochAt(%d) unknown though nothing was forgotten (lineage %v)", run, o, &l)
			}
		}
		for e := int32(-1); e <= naive[c-1]; e++ {
			first := c - 1
			for o := int64(0); o < c; o++ {
				if naive[o] > e {
					first = o
					break
				}
			}
			if naive[c-1] <= e {
				continue
			}
			got := l.firstAbove(e, c)
			if got < first {
				t.Fatalf("run %d: firstAbove(%d) = %d below the truth %d (lineage %v)", run, e, got, first, &l)
			}
			if !forgot && got != first {
				t.Fatalf("run %d: firstAbove(%d) = %d, want %d (lineage %v)", run, e, got, first, &l)
			}
		}
	}
}

// TestDivergingEpochMatchesValidation checks that the in-band path and the
// OffsetForLeaderEpoch path reach the same verdict from the same leader
// answer: same report, same position, same next request kind.
func TestDivergingEpochMatchesValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 2000 {
		// A consumed history: batches in rising epochs.
		type batch struct {
			base, last int64
			epoch      int32
		}
		var hist []batch
		off, epoch := int64(0), int32(1+rng.IntN(3))
		for range 1 + rng.IntN(8) {
			if rng.IntN(2) == 0 {
				epoch += 1 + int32(rng.IntN(2))
			}
			n := 1 + int64(rng.IntN(10))
			hist = append(hist, batch{off, off + n - 1, epoch})
			off += n
		}
		answer := EpochEnd{Epoch: int32(rng.IntN(int(epoch) + 2)), EndOffset: int64(rng.IntN(int(off) + 5))}
		policy := Policy(1 + rng.IntN(3))

		run1 := func(inBand bool) (acts []Action, p *Partition) {
			cfg := DefaultConfig()
			cfg.Policy = policy
			p, _ = NewPartition(cfg)
			p.Step(LeaderChanged{Leader: 1, Epoch: epoch})
			req := p.Step(Assigned{Start: At(0)})[0].Fetch.Req
			for _, b := range hist {
				p.Step(BatchFetched{Req: req, Base: b.base, Last: b.last, Epoch: b.epoch})
			}
			req = p.Step(FetchCompleted{Req: req})[0].Fetch.Req
			if inBand {
				return slices.Clone(p.Step(DivergingEpoch{Req: req, End: answer})), p
			}
			v := p.Step(LeaderChanged{Leader: 1, Epoch: epoch + 1})[0].Validate
			if v.Epoch != epoch {
				t.Fatalf("run %d: validated epoch %d, want %d", run, v.Epoch, epoch)
			}
			return slices.Clone(p.Step(EpochEndOffset{Req: v.Req, End: answer})), p
		}
		a, pa := run1(true)
		b, pb := run1(false)
		if len(a) != len(b) {
			t.Fatalf("run %d: answer %v: in-band %v, validation %v", run, answer, a, b)
		}
		for i := range a {
			if a[i].Kind != b[i].Kind || a[i].Report != b[i].Report || a[i].Halt != b[i].Halt {
				t.Fatalf("run %d: answer %v: in-band %v, validation %v", run, answer, a, b)
			}
		}
		if pa.state != pb.state || pa.pos != pb.pos || pa.check != pb.check {
			t.Fatalf("run %d: answer %v: in-band ends %v, validation ends %v", run, answer, pa, pb)
		}
	}
}
