package seek

import (
	"strconv"
	"strings"
)

// EpochStart is one step of a lineage: Start is the first offset consumed
// (or known) in leader epoch Epoch.
type EpochStart struct {
	Epoch int32
	Start int64
}

// Lineage is the bounded epoch history of what a partition consumed since
// its position was last set: for each leader epoch seen in a batch header,
// the first offset consumed in it. It answers the two questions divergence
// refinement needs (protocol.md §3.13): "which epoch did the record at
// offset o have?" and "where did the first epoch after E begin?".
//
// A lineage may also start from a claim: a seek or a committed position
// (offset, epoch) promises that record offset-1 was read in epoch, and says
// nothing of the records before it. When the history grows past its bound,
// the oldest step is dropped and turned into such a claim, so answers stay
// sound (upper bounds) and only lose exactness for very old epochs.
//
// The zero value is not usable; a Partition makes its own.
type Lineage struct {
	steps []EpochStart // strictly increasing Epoch and Start
	max   int
	// claim: record claim.Start has epoch claim.Epoch, nothing known below.
	// claim.Epoch is NoEpoch when there is none.
	claim EpochStart
	// partial: records were consumed before the first step that the
	// lineage knows nothing about (a pre-v2 message set).
	partial bool
	// rootAt is where a reset, a seek without an epoch or a rewind rooted
	// the lineage, with nothing consumed below it in this lineage unless
	// the lineage is partial or has a claim; NoOffset when not rooted.
	rootAt int64
}

// newLineage returns an empty lineage remembering at most max epochs.
func newLineage(max int) Lineage {
	return Lineage{steps: make([]EpochStart, 0, max), max: max, claim: EpochStart{Epoch: NoEpoch, Start: NoOffset}, rootAt: NoOffset}
}

// reset forgets everything.
func (l *Lineage) reset() {
	l.steps = l.steps[:0]
	l.claim = EpochStart{Epoch: NoEpoch, Start: NoOffset}
	l.partial = false
	l.rootAt = NoOffset
}

// root restarts the lineage at position p: if p has an epoch, record
// p.Offset-1 is claimed to have it.
func (l *Lineage) root(p Position) {
	l.reset()
	if p.Epoch >= 0 && p.Offset > 0 {
		l.claim = EpochStart{Epoch: p.Epoch, Start: p.Offset - 1}
		return
	}
	l.rootAt = p.Offset
}

// observe records that offsets from `from` on were consumed in epoch. It
// does not allocate.
func (l *Lineage) observe(epoch int32, from int64) {
	if epoch < 0 {
		// A pre-v2 message set: no epoch to remember, and what came
		// before no longer describes the position.
		l.reset()
		l.partial = true
		return
	}
	n := len(l.steps)
	if n > 0 && l.steps[n-1].Epoch == epoch {
		return
	}
	// Epochs never go down along a log. If a batch does (accepted only
	// after the leader confirmed the position), the higher steps were
	// wrong claims: drop them so the history stays monotonic.
	for n > 0 && l.steps[n-1].Epoch >= epoch {
		n--
	}
	l.steps = l.steps[:n]
	if l.claim.Epoch > epoch && n == 0 {
		l.claim = EpochStart{Epoch: NoEpoch, Start: NoOffset}
	}
	if n == l.max {
		// Drop the oldest step; what it said about the record just
		// before the next step survives as the claim.
		l.claim = EpochStart{Epoch: l.steps[0].Epoch, Start: l.steps[1].Start - 1}
		copy(l.steps, l.steps[1:])
		l.steps = l.steps[:n-1]
	}
	l.steps = append(l.steps, EpochStart{Epoch: epoch, Start: from})
}

// epochAt returns the epoch of consumed record o, if the lineage knows it.
// o must be below the position.
func (l *Lineage) epochAt(o int64) (int32, bool) {
	for i := len(l.steps) - 1; i >= 0; i-- {
		if l.steps[i].Start <= o {
			return l.steps[i].Epoch, true
		}
	}
	if l.claim.Epoch >= 0 && l.claim.Start == o {
		return l.claim.Epoch, true
	}
	return NoEpoch, false
}

// startBefore returns the first offset consumed in the epoch consumed just
// before epoch e, when the lineage holds a step for e and one before it.
// That record's epoch is below e, so epoch e began after it in every log
// that holds our records of e.
func (l *Lineage) startBefore(e int32) (int64, bool) {
	for i := 1; i < len(l.steps); i++ {
		if l.steps[i].Epoch == e {
			return l.steps[i-1].Start, true
		}
	}
	return NoOffset, false
}

// seed restarts the lineage at position p from a stored history: its
// entries below p.Offset become the steps (the oldest turned into the claim
// when they exceed the bound). The history describes records consumed
// before this lineage's root, so the lineage is partial: it does not claim
// to have seen everything consumed.
func (l *Lineage) seed(h *EpochHistory, p Position) {
	l.reset()
	if h != nil {
		for _, e := range h.entries {
			if e.StartOffset < p.Offset {
				l.observe(e.Epoch, e.StartOffset)
			}
		}
	}
	if len(l.steps) == 0 {
		l.root(p)
		return
	}
	l.partial = true
}

// consumedFrom returns the first offset consumed in this lineage, if the
// lineage saw everything consumed since its root (no claim, nothing
// forgotten); when nothing was consumed yet, its root, if nothing was
// consumed below it either.
func (l *Lineage) consumedFrom() (int64, bool) {
	switch {
	case l.claim.Epoch >= 0 || l.partial:
		return NoOffset, false
	case len(l.steps) == 0:
		return l.rootAt, l.rootAt >= 0
	}
	return l.steps[0].Start, true
}

// firstAbove returns an upper bound of the first consumed offset whose epoch
// is greater than e: exact when the lineage saw that epoch begin, the claim's
// offset when only the claim is known to be above e, and below-1 (the last
// consumed record, which the caller knows is above e) otherwise.
func (l *Lineage) firstAbove(e int32, below int64) int64 {
	if l.claim.Epoch > e {
		return l.claim.Start
	}
	for _, s := range l.steps {
		if s.Epoch > e {
			return s.Start
		}
	}
	return below - 1
}

// truncate keeps the history below offset d after the log was found to
// diverge at d with the leader's epoch e there. If exact, the history below
// d matches the leader and is kept; otherwise it cannot be vouched for and
// the lineage restarts from the claim (d, e), partial when records were
// consumed below d.
func (l *Lineage) truncate(d int64, e int32, exact bool) {
	if !exact {
		from, known := l.consumedFrom()
		l.root(Position{Offset: d, Epoch: e})
		// What was consumed below d is outside the lineage now (unless
		// nothing was), and still consumed.
		l.partial = d > 0 && !(known && from >= d)
		return
	}
	n := len(l.steps)
	for n > 0 && l.steps[n-1].Start >= d {
		n--
	}
	l.steps = l.steps[:n]
	if l.claim.Start >= d {
		l.claim = EpochStart{Epoch: NoEpoch, Start: NoOffset}
	}
	if n == 0 && l.claim.Epoch < 0 && d > 0 {
		l.claim = EpochStart{Epoch: e, Start: d - 1}
	}
}

// Steps returns a copy of the remembered history, oldest first.
func (l *Lineage) Steps() []EpochStart {
	return append([]EpochStart(nil), l.steps...)
}

// Claim returns the claim the history starts from, if any: record
// c.Start was read in epoch c.Epoch.
func (l *Lineage) Claim() (c EpochStart, ok bool) {
	return l.claim, l.claim.Epoch >= 0
}

// String formats the lineage as [^offset@epoch epoch@start ...], where the
// ^ entry is the claim.
func (l *Lineage) String() string {
	var b strings.Builder
	b.WriteByte('[')
	sep := ""
	if l.claim.Epoch >= 0 {
		b.WriteString("^" + Position{Offset: l.claim.Start, Epoch: l.claim.Epoch}.String())
		sep = " "
	}
	for _, s := range l.steps {
		b.WriteString(sep + "e" + strconv.Itoa(int(s.Epoch)) + ":" + strconv.FormatInt(s.Start, 10))
		sep = " "
	}
	b.WriteByte(']')
	return b.String()
}
