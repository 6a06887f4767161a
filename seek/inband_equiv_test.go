package seek

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestInBandEquivalence runs two partitions side by side over the same
// random history of a replicated partition (the model's replicas: appends,
// follower catch-up, clean and unclean elections, retention): one
// validates first (the default), the other has Config.InBandValidation
// with every leader known to check LastFetchedEpoch. Whenever they are
// driven, both are answered from the same log state, frozen while they
// run, by a Kafka broker at Fetch v12+ (Partition.readRecords' check,
// LeaderEpochFileCache.endOffsetFor, the log start). Everything they show
// the application must be the same: every report (kind, consumed,
// divergent, resume, exactness, replaced and skipped ranges, what follows),
// every halt and SeekToNearest resolution, every batch delivered, and the
// position. Only the requests differ: where the first asks
// OffsetForLeaderEpoch, the second fetches.
//
// SEEK_MODEL_SEEDS=n runs n seeds instead of 300.
func TestInBandEquivalence(t *testing.T) {
	seeds := uint64(300)
	if s := os.Getenv("SEEK_MODEL_SEEDS"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	var total eqStats
	for seed := uint64(1); seed <= seeds; seed++ {
		w := newEqWorld(t, seed)
		w.run(600)
		total.add(w.stats)
		if t.Failed() {
			return
		}
	}
	t.Logf("equivalence: %+v", total)
	switch {
	case total.reports < 200:
		t.Errorf("only %d reports compared", total.reports)
	case total.inBandDiverging < 100:
		t.Errorf("only %d DivergingEpoch answers to a validating fetch", total.inBandDiverging)
	case total.inBandChecked < 200:
		t.Errorf("only %d checked answers to a validating fetch", total.inBandChecked)
	case total.inBandOutOfRange < 10:
		t.Errorf("only %d OFFSET_OUT_OF_RANGE answers to a validating fetch", total.inBandOutOfRange)
	case total.starts < 100:
		t.Errorf("only %d epoch-bearing starts", total.starts)
	case total.validationsFirst <= total.validationsInBand:
		t.Errorf("OffsetForLeaderEpoch: %d validating first, %d in band", total.validationsFirst, total.validationsInBand)
	}
}

type eqStats struct {
	reports, starts                                    int
	inBandChecked, inBandDiverging, inBandOutOfRange   int
	validationsFirst, validationsInBand, deliveredRecs int
}

func (s *eqStats) add(o eqStats) {
	s.reports += o.reports
	s.starts += o.starts
	s.inBandChecked += o.inBandChecked
	s.inBandDiverging += o.inBandDiverging
	s.inBandOutOfRange += o.inBandOutOfRange
	s.validationsFirst += o.validationsFirst
	s.validationsInBand += o.validationsInBand
	s.deliveredRecs += o.deliveredRecs
}

// eqWorld is a replicated partition and two consumers of it.
type eqWorld struct {
	t    *testing.T
	seed uint64
	replicas
	policy        Policy
	first, inBand *eqRun
	stats         eqStats
}

// eqRun is one consumer: its partition, the requests it has out, and what
// it showed the application.
type eqRun struct {
	w       *eqWorld
	name    string
	ids     RequestIDs
	p       *Partition
	pending []Action
	meta    bool
	todo    []Event
	shown   []string
}

func newEqWorld(t *testing.T, seed uint64) *eqWorld {
	w := &eqWorld{t: t, seed: seed, replicas: newReplicas(rand.New(rand.NewPCG(seed, seed^0xa0761d6478bd642f)))}
	w.reps[0].assign(0, 0)
	w.policy = []Policy{PolicyEarliest, PolicyLatest, PolicyNone}[seed%3]
	lineage := 64
	if seed%4 == 3 {
		lineage = 3
	}
	w.first = w.newRun("validate-first", false, lineage)
	w.inBand = w.newRun("in-band", true, lineage)
	w.both(func(r *eqRun) { r.start(Earliest()) })
	return w
}

func (w *eqWorld) newRun(name string, inBand bool, lineage int) *eqRun {
	r := &eqRun{w: w, name: name}
	cfg := DefaultConfig()
	cfg.Policy = w.policy
	cfg.LineageSize = lineage
	cfg.InBandValidation = inBand
	cfg.IDs = &r.ids
	var err error
	if r.p, err = NewPartition(cfg); err != nil {
		w.t.Fatal(err)
	}
	r.step(w.leaderChanged())
	return r
}

func (w *eqWorld) leaderChanged() LeaderChanged {
	return LeaderChanged{Leader: int32(w.lead + 1), Epoch: w.epoch, InBand: true}
}

func (w *eqWorld) both(f func(*eqRun)) {
	f(w.first)
	f(w.inBand)
}

func (w *eqWorld) run(steps int) {
	for range steps {
		switch r := w.rng.IntN(100); {
		case r < 35:
			w.appendBatch(3)
		case r < 50:
			w.replicate(w.rng.IntN(3))
		case r < 56:
			w.elect(true)
		case r < 64:
			w.elect(false)
		case r < 70:
			w.deleteRecords()
		case r < 74:
			w.restart()
		default:
			w.drive()
		}
		if w.t.Failed() {
			return
		}
	}
	w.drive()
}

// elect elects a new leader (replicas.elect) and tells both consumers at
// once.
func (w *eqWorld) elect(clean bool) {
	if w.replicas.elect(clean) {
		w.both(func(r *eqRun) { r.step(w.leaderChanged()) })
	}
}

// deleteRecords advances every replica's log start within what they all
// agree on.
func (w *eqWorld) deleteRecords() {
	agreed := w.agreed()
	ls := w.reps[0].logStart
	if agreed <= ls {
		return
	}
	ls += 1 + w.rng.Int64N(agreed-ls)
	for _, r := range w.reps {
		r.deleteBefore(ls)
	}
}

// restart starts both consumers anew from the position they have (the
// same one, or the comparison has failed already): a committed (offset,
// epoch), or a SeekToNearest.
func (w *eqWorld) restart() {
	pos, ok := w.first.p.Position()
	if !ok || w.first.p.State() == StateHalted || !pos.HasEpoch() {
		return
	}
	w.stats.starts++
	s := AtEpoch(pos.Offset, pos.Epoch)
	if w.rng.IntN(4) == 0 {
		s = NearestTo(pos.Offset, pos.Epoch)
	}
	w.both(func(r *eqRun) {
		r.shown = append(r.shown, "restart "+s.String())
		var err error
		cfg := r.p.cfg
		if r.p, err = NewPartition(cfg); err != nil {
			w.t.Fatal(err)
		}
		r.pending, r.meta, r.todo = nil, false, nil
		r.step(w.leaderChanged())
		r.start(s)
	})
}

// drive answers both consumers from the log as it is now until each is
// fetching at the log end, or halted with nothing to do, and compares
// what they showed.
func (w *eqWorld) drive() {
	w.both(func(r *eqRun) { r.drive() })
	a, b := w.first, w.inBand
	pa, oka := a.p.Position()
	pb, okb := b.p.Position()
	if !slices.Equal(a.shown, b.shown) || pa != pb || oka != okb || a.p.State() != b.p.State() {
		w.t.Fatalf("seed %d: the two paths differ\n%s: %v %v %v\n%s\n%s: %v %v %v\n%s\nleader %d epoch %d log%s",
			w.seed, a.name, a.p.State(), pa, oka, diffTail(a.shown, b.shown), b.name, b.p.State(), pb, okb, diffTail(b.shown, a.shown),
			w.lead+1, w.epoch, eqLogString(w.leader()))
	}
}

// diffTail returns x from the first entry where it differs from y.
func diffTail(x, y []string) string {
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	return "  " + strings.Join(x[max(0, i-3):], "\n  ")
}

func eqLogString(r *replica) string {
	var b strings.Builder
	last := int32(-2)
	for i, x := range r.log {
		if x.epoch != last {
			fmt.Fprintf(&b, " e%d:%d", x.epoch, i)
			last = x.epoch
		}
	}
	fmt.Fprintf(&b, " start=%d leo=%d cache=%v", r.logStart, r.leo(), r.cache)
	return b.String()
}

func (r *eqRun) start(s Start) {
	r.step(BrokerInBand{Broker: r.p.Leader().ID, InBand: true})
	r.step(Assigned{Start: s})
}

func (r *eqRun) step(ev Event) {
	before, _ := r.p.Position()
	acts := slices.Clone(r.p.Step(ev))
	if b, ok := ev.(BatchFetched); ok {
		if after, _ := r.p.Position(); after.Offset == b.Last+1 && after.Offset > before.Offset {
			r.shown = append(r.shown, fmt.Sprintf("deliver %d..%d@%d", before.Offset, b.Last, b.Epoch))
			if r == r.w.first {
				r.w.stats.deliveredRecs += int(b.Last + 1 - before.Offset)
			}
		}
	}
	for _, a := range acts {
		switch a.Kind {
		case ActFetch, ActValidate, ActListOffsets:
			r.pending = append(r.pending, a)
			if a.Kind == ActValidate {
				if r == r.w.first {
					r.w.stats.validationsFirst++
				} else {
					r.w.stats.validationsInBand++
				}
			}
		case ActRefreshMetadata:
			r.meta = true
		case ActReport:
			r.shown = append(r.shown, "report "+a.Report.String())
			if r == r.w.first {
				r.w.stats.reports++
			}
			if a.Report.Then == ThenHalt {
				// The application's answer: continue at the divergence
				// point (validated) or start over.
				s := Earliest()
				if a.Report.Kind == Diverged {
					s = AtEpoch(a.Report.Resume.Offset, a.Report.Resume.Epoch)
				}
				r.todo = append(r.todo, Seek{Start: s})
			}
		case ActHalt:
			r.shown = append(r.shown, "halt "+a.String())
		case ActResolved:
			r.shown = append(r.shown, a.String())
		}
	}
}

func (r *eqRun) drive() {
	w := r.w
	for range 2000 {
		switch {
		case len(r.todo) > 0:
			ev := r.todo[0]
			r.todo = r.todo[1:]
			r.step(BrokerInBand{Broker: r.p.Leader().ID, InBand: true})
			r.step(ev)
			continue
		case r.meta:
			r.meta = false
			r.step(w.leaderChanged())
			continue
		case len(r.pending) == 0:
			if r.p.backoff > 0 {
				r.step(Tick{})
				continue
			}
			return
		}
		a := r.pending[0]
		if a.Kind == ActFetch && a.Fetch.Req == r.p.inflight && r.p.State() == StateFetching &&
			a.Fetch.Offset == w.leader().leo() {
			return // caught up: the fetch waits for more
		}
		r.pending = r.pending[1:]
		w.answer(r, a)
	}
	w.t.Fatalf("seed %d: %s does not settle: %v", w.seed, r.name, r.p)
}

// answer is a Kafka leader's answer to a, from the log as it is now.
func (w *eqWorld) answer(r *eqRun, a Action) {
	l := w.leader()
	fenced := func(id, cle int32) Code {
		switch {
		case cle >= 0 && cle < w.epoch:
			return CodeFencedLeaderEpoch
		case cle > w.epoch:
			return CodeUnknownLeaderEpoch
		case id != int32(w.lead+1):
			return CodeNotLeaderOrFollower
		}
		return CodeNone
	}
	switch a.Kind {
	case ActValidate:
		v := a.Validate
		if code := fenced(v.Leader, v.CurrentLeaderEpoch); code != CodeNone {
			r.step(EpochEndOffset{Req: v.Req, Code: code})
			return
		}
		r.step(EpochEndOffset{Req: v.Req, End: l.endOffsetFor(v.Epoch)})
	case ActListOffsets:
		q := a.List
		if code := fenced(q.Leader, q.CurrentLeaderEpoch); code != CodeNone {
			r.step(ListedOffset{Req: q.Req, Code: code, Offset: NoOffset, Epoch: NoEpoch})
			return
		}
		switch q.Spec {
		case ListEarliest:
			e := NoEpoch
			if l.leo() > l.logStart {
				e = l.log[l.logStart].epoch
			}
			r.step(ListedOffset{Req: q.Req, Offset: l.logStart, Epoch: e})
		default:
			r.step(ListedOffset{Req: q.Req, Offset: l.leo(), Epoch: w.epoch})
		}
	case ActFetch:
		f := a.Fetch
		current := f.Req == r.p.inflight
		if code := fenced(f.Leader, f.CurrentLeaderEpoch); code != CodeNone {
			r.step(FetchFailed{Req: f.Req, Code: code})
			return
		}
		// Partition.readRecords: the LastFetchedEpoch check comes first.
		if f.LastFetchedEpoch >= 0 {
			eo := l.endOffsetFor(f.LastFetchedEpoch)
			if eo.Undefined() || f.Offset < l.logStart {
				if f.Validates && current {
					w.stats.inBandOutOfRange++
				}
				r.step(FetchFailed{Req: f.Req, Code: CodeOffsetOutOfRange})
				return
			}
			if eo.Epoch < f.LastFetchedEpoch || eo.EndOffset < f.Offset {
				if f.Validates && current {
					w.stats.inBandDiverging++
				}
				r.step(DivergingEpoch{Req: f.Req, End: eo})
				return
			}
		}
		if f.Offset < l.logStart || f.Offset > l.leo() {
			r.step(FetchFailed{Req: f.Req, Code: CodeOffsetOutOfRange})
			return
		}
		if f.Validates && current {
			w.stats.inBandChecked++
		}
		start := f.Offset
		for start > 0 && start < l.leo() && l.log[start-1].batch == l.log[start].batch {
			start--
		}
		for start < l.leo() {
			end := start + 1
			for end < l.leo() && l.log[end].batch == l.log[start].batch {
				end++
			}
			r.step(BatchFetched{Req: f.Req, Base: start, Last: end - 1, Epoch: l.log[start].epoch, Checked: true})
			start = end
		}
		r.step(FetchCompleted{Req: f.Req, Checked: true})
	}
}
