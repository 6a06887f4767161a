package kepochtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	kerrors "github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/kepochtest"
)

// TestHistoryRestartModel is a randomized end-to-end model of an
// application that stores (next offset, EpochHistory) atomically with its
// output after every Poll and restarts from them with AtHistory, while the
// partition goes through unclean elections, clean elections, record
// deletion and topic recreation, some while the application is down. At
// the end it checks: every record of the final log was processed exactly
// once; no record was processed twice; no record still in the log was
// reported replaced; every processed record an unclean election removed
// was reported replaced, unless a later DeleteRecords took its offset
// below the log start (documented: nobody can compare those;
// seek.Truncation.Exact); and every processed record of a deleted
// incarnation of the topic was reported replaced, unless DeleteRecords had
// removed it (a Recreated report's Replaced reaches back to the first
// offset consumed since the last reset: seek.Truncation.Replaced).
//
// A recreation is expected to be reported as Recreated (whether the
// application was running, or restarts from a history stored in the old
// incarnation): as it happens, it checks that no record of a new
// incarnation is processed before that report, that the report matches
// errors.ErrTopicIDChanged and its Replaced ends at the application's
// position, and that a report made when nothing was processed since the
// last reset replaces nothing. Every seed run so far located each loss it
// had to report, bound reports included.
//
// KEPOCH_HISTORY_SEED sets the first seed (1 by default; alone, it runs
// that seed only), KEPOCH_HISTORY_SEEDS the number of seeds (3 by default).
func TestHistoryRestartModel(t *testing.T) {
	n, base := 3, uint64(1)
	if s := os.Getenv("KEPOCH_HISTORY_SEED"); s != "" {
		base, _ = strconv.ParseUint(s, 10, 64)
		n = 1
	}
	if s := os.Getenv("KEPOCH_HISTORY_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := range n {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runHistoryModel(t, seed) })
	}
}

const modelTopic = "payments"

type histApp struct {
	t    *testing.T
	c    *kepochtest.Cluster
	rng  *rand.Rand
	cons *consumer.Consumer
	seq  int

	next       int64 // next offset the application processes; -1 after a reset, until a record comes
	storedOff  int64
	storedHist []byte
	// inc counts the topic's recreations: the incarnation being written.
	// posInc is the incarnation of the application's position (-1 before
	// the first record and after a Recreated report, until a record
	// comes), storedInc that of the stored one; incOf is each value's
	// incarnation.
	inc, posInc, storedInc int
	incOf                  map[string]int
	recreations            int // Recreated reports

	view      map[int64]string // the application's output: offset → value processed there
	delivered map[string]int
	reported  map[string]bool  // processed values reported replaced (compensated for)
	lost      map[string]int64 // values an unclean election removed, with their offsets
	lostStep  map[string]int   // the step of each loss
	step      int              // counts faults
	// starts are the log starts DeleteRecords set, with their steps:
	// a lost record whose offset a later deletion took below the log start
	// is one nobody can compare (seek.Truncation.Exact).
	starts []struct {
		step, inc int
		start     int64
	}
	deleted   map[string]bool // values DeleteRecords removed
	bound     bool            // a Diverged report was a bound
	anomalies []string
	trace     []string
}

func (a *histApp) logf(format string, args ...any) {
	a.trace = append(a.trace, fmt.Sprintf(format, args...))
}

func (a *histApp) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	a.t.Cleanup(cancel)
	return ctx
}

func (a *histApp) fail(format string, args ...any) {
	a.t.Helper()
	a.t.Fatalf("%s\ntrace:\n  %s", fmt.Sprintf(format, args...), strings.Join(a.trace, "\n  "))
}

func (a *histApp) produce(n int) []string {
	var vs []string
	for range n {
		vs = append(vs, fmt.Sprintf("v%d", a.seq))
		a.incOf[vs[len(vs)-1]] = a.inc
		a.seq++
	}
	offs, err := a.c.Produce(a.ctx(), modelTopic, 0, vs...)
	if err != nil {
		a.fail("produce: %v", err)
	}
	a.logf("produce %v at %d..%d", vs, offs[0], offs[len(offs)-1])
	return vs
}

func (a *histApp) records() []kepochtest.Record {
	recs, err := a.c.Records(a.ctx(), modelTopic, 0)
	if err != nil {
		a.fail("records: %v", err)
	}
	return recs
}

func (a *histApp) start(s consumer.Start) {
	cons, err := consumer.New(
		consumer.SeedBrokers(a.c.Seeds()...),
		consumer.FetchMaxWait(50*time.Millisecond),
		consumer.RetryBackoff(20*time.Millisecond),
		consumer.MetadataMaxAge(200*time.Millisecond),
		consumer.TruncationPolicy(consumer.PolicyEarliest),
	)
	if err != nil {
		a.fail("consumer: %v", err)
	}
	a.cons = cons
	if err := cons.Assign(consumer.Assignment{Topic: modelTopic, Partition: 0, Start: s}); err != nil {
		a.fail("assign: %v", err)
	}
}

func (a *histApp) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.cons.Close(ctx)
	a.cons = nil
}

// restart starts a new consumer from the stored (offset, history).
func (a *histApp) restart() {
	h := consumer.NewEpochHistory(0)
	if err := h.UnmarshalBinary(a.storedHist); err != nil {
		a.fail("unmarshal: %v", err)
	}
	s := consumer.AtHistory(a.storedOff, h)
	a.logf("restart AtHistory(%d, %v) → epoch %d unvalidated %v", a.storedOff, h, s.Epoch, s.Unvalidated())
	if s.Unvalidated() {
		if a.storedOff != 0 {
			a.anomalies = append(a.anomalies, fmt.Sprintf("unvalidated restart at %d with %v", a.storedOff, h))
		}
		s = consumer.At(a.storedOff)
	}
	a.next, a.posInc = a.storedOff, a.storedInc
	a.start(s)
}

// pollOnce polls once and applies the result to the model.
func (a *histApp) pollOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	f, err := a.cons.Poll(ctx)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		a.fail("poll: %v", err)
	}
	for _, e := range f.Truncations {
		a.logf("event %v (exact %v, resume %v, replaced %v)", e, e.Exact, e.Resume, e.Replaced)
		if e.Kind == consumer.Diverged && !e.Exact {
			a.bound = true
		}
		if e.Kind == consumer.Recreated {
			a.recreations++
			switch {
			case !errors.Is(e.Err(), kerrors.ErrTopicIDChanged):
				a.anomalies = append(a.anomalies, fmt.Sprintf("Recreated report %v: error %v", e, e.Err()))
			case a.posInc >= 0 && a.posInc == a.inc:
				a.anomalies = append(a.anomalies, fmt.Sprintf("Recreated report %v: the topic was not recreated since incarnation %d", e, a.posInc))
			case e.Replaced.From < 0 || e.Replaced.To != e.Consumed.Offset:
				a.anomalies = append(a.anomalies, fmt.Sprintf("Recreated report %v: replaced %v does not end at the consumed offset", e, e.Replaced))
			case a.next >= 0 && e.Consumed.Offset != a.next:
				a.anomalies = append(a.anomalies, fmt.Sprintf("Recreated report %v: consumed %d, the application is at %d", e, e.Consumed.Offset, a.next))
			case a.next < 0 && !e.Replaced.Empty():
				a.anomalies = append(a.anomalies, fmt.Sprintf("Recreated report %v: replaced %v, but nothing was processed since the last reset", e, e.Replaced))
			}
		}
		from := max(e.Replaced.From, 0)
		for o := from; o < e.Replaced.To; o++ {
			if v, ok := a.view[o]; ok {
				a.reported[v] = true
				delete(a.view, o)
			}
		}
		switch e.Kind {
		case consumer.Diverged:
			a.next = e.Resume.Offset
		case consumer.Recreated:
			// The old incarnation's records are gone: what is left of
			// them in the view was deleted before (checked at the end).
			a.next, a.posInc = -1, -1
			clear(a.view)
		default:
			a.next = -1
		}
	}
	for _, err := range f.Errors {
		a.logf("error %v", err)
		if errors.Is(err, kerrors.ErrUnvalidated) {
			a.fail("unvalidated: %v", err)
		}
	}
	for _, r := range f.Records {
		v := string(r.Value)
		if a.next >= 0 && r.Offset != a.next {
			a.anomalies = append(a.anomalies, fmt.Sprintf("record %s at %d, expected offset %d", v, r.Offset, a.next))
		}
		if a.posInc >= 0 && a.next != 0 && a.incOf[v] != a.posInc {
			// (At offset 0 nothing processed is left to lose: the
			// consumer reads whatever log there is from its start.)
			a.anomalies = append(a.anomalies, fmt.Sprintf("record %s at %d of incarnation %d, the position's is %d (no Recreated report)", v, r.Offset, a.incOf[v], a.posInc))
		}
		a.posInc = a.incOf[v]
		a.view[r.Offset] = v
		a.delivered[v]++
		a.next = r.Offset + 1
	}
	if len(f.Records) > 0 {
		a.logf("poll %d..%d", f.Records[0].Offset, f.Records[len(f.Records)-1].Offset)
	}
	if len(f.Records) > 0 || len(f.Truncations) > 0 {
		h, _ := a.cons.EpochHistory(modelTopic, 0)
		if a.next >= 0 {
			b, _ := h.MarshalBinary()
			a.storedOff, a.storedHist, a.storedInc = a.next, b, a.posInc
			a.logf("store (%d, %v)", a.next, h)
		}
	}
}

// catchUp writes a sentinel and polls until it is processed.
func (a *histApp) catchUp() {
	want := a.produce(1)[0]
	deadline := time.Now().Add(20 * time.Second)
	for a.delivered[want] == 0 {
		if time.Now().After(deadline) {
			a.fail("timed out waiting for %s", want)
		}
		a.pollOnce()
	}
}

// pollSome polls a few times (the application is mid-stream).
func (a *histApp) pollSome() {
	for range 1 + a.rng.IntN(3) {
		a.pollOnce()
	}
}

func (a *histApp) fault() {
	ctx := a.ctx()
	st, err := a.c.Partition(ctx, modelTopic, 0)
	if err != nil {
		a.fail("partition: %v", err)
	}
	switch k := a.rng.IntN(15); {
	case k < 5: // unclean election
		if st.LogEnd <= st.LogStart {
			return
		}
		before := a.records()
		keep := st.LogStart + a.rng.Int64N(st.LogEnd-st.LogStart)
		tr, err := a.c.UncleanElection(ctx, modelTopic, 0, keep)
		if errors.Is(err, kepochtest.ErrBelowLogStart) {
			return
		}
		if err != nil {
			a.fail("unclean election: %v", err)
		}
		a.step++
		for _, r := range before {
			if r.Offset >= tr.Divergence {
				a.lost[string(r.Value)] = r.Offset
				a.lostStep[string(r.Value)] = a.step
			}
		}
		a.logf("unclean election keep %d: lost %v, epoch %d → %d", keep, tr.Lost, tr.OldEpoch, tr.NewEpoch)
		a.produce(1 + a.rng.IntN(3))
	case k < 8:
		el, err := a.c.CleanElection(ctx, modelTopic, 0)
		if err != nil {
			a.fail("clean election: %v", err)
		}
		a.logf("clean election epoch %d → %d", el.OldEpoch, el.NewEpoch)
		a.produce(1 + a.rng.IntN(3))
	case k < 10:
		before := a.records()
		off := st.LogStart + a.rng.Int64N(st.LogEnd-st.LogStart+1)
		ls, err := a.c.DeleteRecords(ctx, modelTopic, 0, off)
		if err != nil {
			a.fail("delete records: %v", err)
		}
		a.step++
		a.starts = append(a.starts, struct {
			step, inc int
			start     int64
		}{a.step, a.inc, ls})
		for _, r := range before {
			if r.Offset < ls {
				a.deleted[string(r.Value)] = true
			}
		}
		a.logf("delete records below %d: log start %d", off, ls)
	case k < 12:
		a.recreate(ctx)
	default: // more often while the application is down
		if a.cons == nil {
			a.recreate(ctx)
		}
	}
}

// recreate deletes the topic and creates it again (a new topic ID, an
// empty log, epochs from 0), then perhaps writes to it.
func (a *histApp) recreate(ctx context.Context) {
	r, err := a.c.RecreateTopic(ctx, modelTopic, 1)
	if err != nil {
		a.fail("recreate topic: %v", err)
	}
	a.step++
	a.inc++
	a.logf("recreate topic: incarnation %d, ID %x → %x", a.inc, r.OldID[:4], r.NewID[:4])
	if n := a.rng.IntN(4); n > 0 {
		a.produce(n)
	}
}

func runHistoryModel(t *testing.T, seed uint64) {
	a := &histApp{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		view: map[int64]string{}, delivered: map[string]int{}, reported: map[string]bool{}, incOf: map[string]int{},
		lost: map[string]int64{}, lostStep: map[string]int{}, deleted: map[string]bool{},
	}
	a.c = kepochtest.New(t, kepochtest.Topic(modelTopic, 1))
	for range 2 + a.rng.IntN(3) {
		a.produce(1 + a.rng.IntN(4))
	}
	a.start(consumer.At(0))
	a.next, a.posInc, a.storedInc = 0, -1, -1
	a.storedHist, _ = consumer.NewEpochHistory(0).MarshalBinary()
	steps := 8 + a.rng.IntN(6)
	for range steps {
		switch k := a.rng.IntN(10); {
		case k < 3:
			a.produce(1 + a.rng.IntN(4))
			a.pollSome()
		case k < 6:
			a.fault()
			a.pollSome()
		case k < 8:
			a.logf("crash")
			a.stop()
			for range a.rng.IntN(3) {
				a.fault()
			}
			a.restart()
			a.pollSome()
		default:
			a.catchUp()
		}
	}
	a.catchUp()
	// Let anything pending arrive.
	for range 5 {
		a.pollOnce()
	}
	final := a.records()
	inLog := map[string]int64{}
	for _, r := range final {
		inLog[string(r.Value)] = r.Offset
	}
	var problems []string
	problems = append(problems, a.anomalies...)
	for _, r := range final {
		v := string(r.Value)
		if a.delivered[v] != 1 {
			problems = append(problems, fmt.Sprintf("final-log record %s at %d delivered %d times", v, r.Offset, a.delivered[v]))
		}
		if a.reported[v] {
			problems = append(problems, fmt.Sprintf("final-log record %s at %d reported replaced", v, r.Offset))
		}
	}
	var vs []string
	for v := range a.delivered {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		if n := a.delivered[v]; n > 1 {
			if _, ok := inLog[v]; !ok {
				problems = append(problems, fmt.Sprintf("record %s delivered %d times", v, n))
			}
		}
		if _, ok := inLog[v]; ok || a.deleted[v] || a.reported[v] {
			continue
		}
		if off, ok := a.lost[v]; ok {
			belowStart := false
			for _, s := range a.starts {
				belowStart = belowStart || s.inc == a.incOf[v] && s.step > a.lostStep[v] && s.start > off
			}
			if belowStart {
				continue // documented: below the log start, nobody can compare
			}
			msg := fmt.Sprintf("processed record %s lost by an unclean election, never reported", v)
			if a.bound {
				msg += " (a bound report was made)"
			}
			problems = append(problems, msg)
			continue
		}
		if a.incOf[v] < a.inc {
			problems = append(problems, fmt.Sprintf("processed record %s of incarnation %d (recreated since), never reported", v, a.incOf[v]))
			continue
		}
		problems = append(problems, fmt.Sprintf("processed record %s is not in the log, and no fault removed it", v))
	}
	if len(problems) > 0 {
		a.fail("seed %d:\n  %s", seed, strings.Join(problems, "\n  "))
	}
	if os.Getenv("KEPOCH_HISTORY_TRACE") != "" {
		t.Logf("trace:\n  %s", strings.Join(a.trace, "\n  "))
	}
	t.Logf("seed %d: %d records in the final log, %d processed, %d reported replaced, bound %v, %d recreations, %d Recreated reports",
		seed, len(final), len(a.delivered), len(a.reported), a.bound, a.inc, a.recreations)
}
