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

// The model test drives one Partition against a reference model of a
// replicated Kafka partition with leader epochs: three replicas, appends
// by the leader, follower catch-up (truncating to the common prefix first,
// as KIP-279 followers do), clean elections (the new leader has the whole
// log) and unclean ones (any replica, possibly with a shorter or divergent
// log), each bumping the leader epoch. Broker answers are computed from the
// model when the harness chooses to deliver them, in any order and late, so
// stale answers abound: Fetch (CurrentLeaderEpoch fencing, LastFetchedEpoch
// divergence per Partition.readRecords, in half of the runs), OffsetForLeaderEpoch
// (LeaderEpochFileCache.endOffsetFor), ListOffsets; plus stale metadata,
// KIP-951 hints, transport errors, ticks, pauses, consumer restarts from the
// committed position, and, under PolicyNone, the application's seeks.
//
// After every step it checks, against the records the consumer delivered
// (its "view", by record identity, not by epoch):
//
//   - contiguity: every delivery starts exactly where the previous one, the
//     last reported rewind, reset or seek left off (no silent skip);
//   - no record is delivered twice (no duplicate at the same offset and
//     epoch, in particular after a rewind), unless a report said it was
//     replaced and a later election brought it back;
//   - nothing is delivered while a record already delivered is gone from
//     the leader's log without a report (every truncation is reported
//     before the new lineage is read);
//   - a Diverged report is true (some delivered record is gone), sound (every
//     delivered record at or after Divergent is gone), and, when Exact,
//     precise (every delivered record before Divergent is still there):
//     Divergent is the model's first replaced offset; after it, no replaced
//     record remains in the view, so each truncation is reported once;
//   - a below-log-start break names exactly the offsets retention removed
//     before they were read (the model deletes records all replicas
//     agree on); no other kind of break happens without topic recreation,
//     except past-log-end for an epoch-less position;
//   - at the end, with faults stopped, the consumer catches up to the log
//     end with nothing unreported (liveness).
//
// Every seed runs twice: validating first (the default), and with
// Config.InBandValidation, where a leader change or an epoch-bearing start
// is checked by the first fetch. In that mode what the consumer knows of
// the brokers is sometimes wrong (a v12 broker not known yet, a broker
// believed v12 that answers below it, as after a downgrade), and a leader
// now and then answers a fetch the way a Kafka leader that names a
// preferred read replica does (empty, nothing checked), so the answers
// that prove nothing are exercised; the same invariants hold, and every
// validating fetch carries the position as Offset and LastFetchedEpoch.
//
// SEEK_MODEL_SEEDS=n runs n seeds instead of 16 (a longer soak).
func TestModel(t *testing.T) {
	seeds := uint64(16)
	if s := os.Getenv("SEEK_MODEL_SEEDS"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	for _, inBand := range []bool{false, true} {
		name := "validate-first"
		if inBand {
			name = "in-band"
		}
		t.Run(name, func(t *testing.T) { runModel(t, seeds, inBand) })
	}
}

func runModel(t *testing.T, seeds uint64, inBand bool) {
	var total modelStats
	for seed := uint64(1); seed <= seeds; seed++ {
		h := newHarness(t, seed, inBand)
		h.run(4000)
		h.quiesce()
		total.add(h.stats)
		if t.Failed() {
			return
		}
	}
	t.Logf("model: %+v", total)
	if !inBand && total.inBandChecked+total.inBandUnchecked+total.inBandDiverging > 0 {
		t.Errorf("validating fetches without InBandValidation: %+v", total)
	}
	// The run must have exercised what it claims to check.
	switch {
	case inBand && total.inBandChecked < 100:
		t.Errorf("only %d positions validated by a checked fetch", total.inBandChecked)
	case inBand && total.inBandUnchecked < 20:
		t.Errorf("only %d unchecked answers to a validating fetch", total.inBandUnchecked)
	case inBand && total.inBandDiverging < 20:
		t.Errorf("only %d DivergingEpoch answers to a validating fetch", total.inBandDiverging)
	case total.delivered < 5000:
		t.Errorf("only %d records delivered", total.delivered)
	case total.exact < 50:
		t.Errorf("only %d exact divergence reports", total.exact)
	case total.bound < 5:
		t.Errorf("only %d bounded divergence reports", total.bound)
	case total.narrowed < 3:
		t.Errorf("only %d narrowed divergences", total.narrowed)
	case total.cleanElections < 100 || total.uncleanElections < 100:
		t.Errorf("elections: %d clean, %d unclean", total.cleanElections, total.uncleanElections)
	case total.diverging < 20:
		t.Errorf("only %d in-band DivergingEpoch answers", total.diverging)
	case total.stale < 100:
		t.Errorf("only %d stale answers", total.stale)
	case total.restarts < 20:
		t.Errorf("only %d restarts", total.restarts)
	case total.halts < 10:
		t.Errorf("only %d halts", total.halts)
	case total.belowStart < 5:
		t.Errorf("only %d below-log-start breaks", total.belowStart)
	}
}

type modelStats struct {
	steps, delivered                 int
	exact, bound, narrowed           int
	cleanElections, uncleanElections int
	diverging, stale, restarts       int
	halts, pastEnd, underReported    int
	deletions, belowStart            int
	// Answers to a fetch that validates the position (InBandValidation):
	// checked (the position proven), unchecked (validated first instead),
	// DivergingEpoch.
	inBandChecked, inBandUnchecked, inBandDiverging int
}

func (s *modelStats) add(o modelStats) {
	s.steps += o.steps
	s.delivered += o.delivered
	s.exact += o.exact
	s.bound += o.bound
	s.narrowed += o.narrowed
	s.cleanElections += o.cleanElections
	s.uncleanElections += o.uncleanElections
	s.diverging += o.diverging
	s.stale += o.stale
	s.restarts += o.restarts
	s.halts += o.halts
	s.pastEnd += o.pastEnd
	s.underReported += o.underReported
	s.deletions += o.deletions
	s.belowStart += o.belowStart
	s.inBandChecked += o.inBandChecked
	s.inBandUnchecked += o.inBandUnchecked
	s.inBandDiverging += o.inBandDiverging
}

// rec is one record: its leader epoch and an identity unique in the run
// (two records with the same offset and epoch are the same record).
type rec struct {
	epoch int32
	id    uint64
	batch uint64
}

// replica is one broker's copy of the partition: its log and its leader
// epoch cache (epoch → start offset), maintained as Kafka's
// LeaderEpochFileCache is.
type replica struct {
	log      []rec // indexed by offset; below logStart deleted
	logStart int64
	cache    []EpochStart
}

func (r *replica) leo() int64 { return int64(len(r.log)) }

// assign is LeaderEpochFileCache.assign: entries that the new one makes
// non-monotonic are dropped.
func (r *replica) assign(epoch int32, start int64) {
	if n := len(r.cache); n > 0 && r.cache[n-1].Epoch == epoch {
		return
	}
	r.cache = slices.DeleteFunc(r.cache, func(e EpochStart) bool { return e.Epoch >= epoch || e.Start >= start })
	r.cache = append(r.cache, EpochStart{Epoch: epoch, Start: start})
}

func (r *replica) append(x rec) {
	if n := len(r.cache); n == 0 || r.cache[n-1].Epoch < x.epoch {
		r.assign(x.epoch, r.leo())
	}
	r.log = append(r.log, x)
}

// truncate is a follower truncating its log (and truncateFromEnd).
func (r *replica) truncate(n int64) {
	r.log = r.log[:n]
	r.cache = slices.DeleteFunc(r.cache, func(e EpochStart) bool { return e.Start >= n })
}

// deleteBefore advances the log start (retention, DeleteRecords) and
// truncates the epoch cache from the start as Kafka does: the entry that
// covers the new start survives, starting there.
func (r *replica) deleteBefore(start int64) {
	r.logStart = start
	keep := 0
	for i, e := range r.cache {
		if e.Start <= start {
			keep = i
		}
	}
	r.cache = r.cache[keep:]
	if len(r.cache) > 0 && r.cache[0].Start < start {
		r.cache[0].Start = start
	}
}

// endOffsetFor is LeaderEpochFileCache.endOffsetFor (protocol.md §2.2).
func (r *replica) endOffsetFor(req int32) EpochEnd {
	undefined := EpochEnd{Epoch: NoEpoch, EndOffset: NoOffset}
	n := len(r.cache)
	if req < 0 || n == 0 {
		return undefined
	}
	if req == r.cache[n-1].Epoch {
		return EpochEnd{Epoch: req, EndOffset: r.leo()}
	}
	if req > r.cache[n-1].Epoch {
		return undefined
	}
	i := 0
	for r.cache[i].Epoch <= req {
		i++
	}
	if i == 0 {
		return EpochEnd{Epoch: req, EndOffset: r.cache[0].Start} // older than the cache: echoed
	}
	return EpochEnd{Epoch: r.cache[i-1].Epoch, EndOffset: r.cache[i].Start}
}

// replicas is the partition's three replicas and the controller's view:
// the randomized log operations the model and the equivalence test share.
type replicas struct {
	rng   *rand.Rand
	reps  [3]*replica
	lead  int   // index of the leader; its broker id is lead+1
	epoch int32 // the controller's leader epoch

	nextRec, nextBatch uint64
}

func newReplicas(rng *rand.Rand) replicas {
	rs := replicas{rng: rng}
	for i := range rs.reps {
		rs.reps[i] = &replica{}
	}
	return rs
}

func (rs *replicas) leader() *replica { return rs.reps[rs.lead] }

// appendBatch appends one batch of 1 to most records to the leader's log.
func (rs *replicas) appendBatch(most int) {
	rs.nextBatch++
	for range 1 + rs.rng.IntN(most) {
		rs.nextRec++
		rs.leader().append(rec{epoch: rs.epoch, id: rs.nextRec, batch: rs.nextBatch})
	}
}

// replicate brings follower i towards the leader: truncate to the common
// prefix, then copy up to a random batch boundary.
func (rs *replicas) replicate(i int) {
	if i == rs.lead {
		return
	}
	f, l := rs.reps[i], rs.leader()
	k := int64(0)
	for k < f.leo() && k < l.leo() && f.log[k].id == l.log[k].id {
		k++
	}
	f.truncate(k)
	target := k + rs.rng.Int64N(l.leo()-k+1)
	for target < l.leo() && target > 0 && l.log[target].batch == l.log[target-1].batch {
		target++
	}
	for o := k; o < target; o++ {
		f.append(l.log[o])
	}
}

// elect makes a new leader, clean (a replica holding the whole log, maybe
// the leader itself: an epoch bump without a leader change) or unclean
// (any other replica), in the next epoch; false when there is no
// candidate.
func (rs *replicas) elect(clean bool) bool {
	var cands []int
	l := rs.leader()
	for i, r := range rs.reps {
		switch {
		case clean && r.leo() == l.leo() && (r.leo() == 0 || r.log[r.leo()-1].id == l.log[l.leo()-1].id):
			cands = append(cands, i)
		case !clean && i != rs.lead:
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return false
	}
	rs.lead = cands[rs.rng.IntN(len(cands))]
	rs.epoch++
	rs.leader().assign(rs.epoch, rs.leader().leo())
	return true
}

// agreed is the end of the prefix every replica holds.
func (rs *replicas) agreed() int64 {
	agreed := rs.reps[0].leo()
	for _, r := range rs.reps[1:] {
		k := int64(0)
		for k < agreed && k < r.leo() && rs.reps[0].log[k].id == r.log[k].id {
			k++
		}
		agreed = k
	}
	return agreed
}

type harness struct {
	t    *testing.T
	seed uint64
	replicas
	hist []Leader
	v12  bool // brokers check LastFetchedEpoch (Fetch v12+)
	// Only with v12, where in-band detection makes up for them:
	legacy  bool // metadata carries no leader epochs (Metadata < v9)
	noFence bool // brokers ignore CurrentLeaderEpoch in Fetch (Redpanda #17728)

	// InBandValidation: krng draws what the consumer knows of the
	// brokers and the leaders' redirects (its own stream, so that the
	// validate-first runs are the model's runs without the option).
	inBand bool
	krng   *rand.Rand

	ids      RequestIDs
	cfg      Config
	p        *Partition
	pending  []Action
	meta     bool // metadata requested
	todo     []Event
	narrowed bool // a narrowing was seen since the last report

	// The consumer's view: the records delivered since the last reset,
	// by offset from viewLow; viewNext is where the next delivery must
	// start.
	view     []rec
	viewLow  int64
	viewNext int64
	seen     map[uint64]int64 // delivered record id → offset
	goneIDs  map[uint64]bool  // delivered records replaced, then deleted
	trace    []string

	stats modelStats
}

func newHarness(t *testing.T, seed uint64, inBand bool) *harness {
	h := &harness{
		t:        t,
		seed:     seed,
		replicas: newReplicas(rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15))),
		inBand:   inBand,
		krng:     rand.New(rand.NewPCG(seed^0x5bd1e995, seed+1)),
		v12:      seed%2 == 0,
		seen:     map[uint64]int64{},
		goneIDs:  map[uint64]bool{},
	}
	h.legacy = seed%4 == 0
	h.noFence = seed%4 == 2
	h.cfg = DefaultConfig()
	h.cfg.IDs = &h.ids
	h.cfg.LineageSize = 64
	h.cfg.InBandValidation = inBand
	if seed%4 == 3 {
		h.cfg.LineageSize = 3 // forgets old epochs: bounds instead of exact answers
	}
	if seed%3 == 0 {
		h.cfg.Policy = PolicyNone
	}
	h.reps[0].assign(0, 0)
	h.hist = append(h.hist, Leader{ID: 1, Epoch: 0})
	h.newConsumer(Earliest())
	return h
}

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	tail := h.trace[max(0, len(h.trace)-40):]
	h.t.Fatalf("seed %d step %d: %s\nview [%d,%d) state %s\nleader %d epoch %d log %s\nlast events:\n%s",
		h.seed, h.stats.steps, fmt.Sprintf(format, args...), h.viewLow, h.viewNext, h.p,
		h.lead+1, h.epoch, h.logString(h.reps[h.lead]), strings.Join(tail, "\n"))
}

func (h *harness) logString(r *replica) string {
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

func (h *harness) newConsumer(s Start) {
	var err error
	if h.p, err = NewPartition(h.cfg); err != nil {
		h.t.Fatal(err)
	}
	h.step(h.leaderChanged(Leader{ID: int32(h.lead + 1), Epoch: h.epoch}))
	h.start(Assigned{Start: s})
}

// start steps a start or a seek, after what the consumer knows of the
// partition's leader (BrokerInBand), as the consumer does.
func (h *harness) start(ev Event) {
	if h.inBand {
		// (Not h.step: a halted partition waits for ev.)
		k := BrokerInBand{Broker: h.p.Leader().ID, InBand: h.knowsInBand()}
		h.tracef("%T%+v", k, k)
		if acts := h.p.Step(k); len(acts) > 0 {
			h.fail("BrokerInBand caused %v", acts)
		}
	}
	h.step(ev)
}

// knowsInBand is what the consumer believes of a broker: that it checks
// LastFetchedEpoch. Usually right (the brokers answer v12+ or not), but a
// v12 broker may not be known yet and a broker below v12 may be believed
// v12 (it was downgraded).
func (h *harness) knowsInBand() bool {
	if !h.inBand {
		return false
	}
	if h.v12 {
		return h.krng.IntN(4) != 0
	}
	return h.krng.IntN(4) == 0
}

// leaderChanged is what metadata says about l.
func (h *harness) leaderChanged(l Leader) LeaderChanged {
	if h.legacy {
		l.Epoch = NoEpoch
	}
	return LeaderChanged{Leader: l.ID, Epoch: l.Epoch, InBand: h.knowsInBand()}
}

func (h *harness) run(steps int) {
	for range steps {
		h.stats.steps++
		switch r := h.rng.IntN(100); {
		case r < 30:
			h.answer()
			if h.rng.IntN(60) == 0 {
				h.deleteRecords()
			}
		case r < 45:
			h.appendBatch(4)
		case r < 55:
			h.replicate(h.rng.IntN(3))
		case r < 59:
			h.elect(true)
		case r < 63:
			h.elect(false)
		case r < 78:
			h.metadata()
		case r < 94:
			if h.meta && h.rng.IntN(2) == 0 {
				h.metadata()
			}
			h.step(Tick{})
		case r < 96:
			h.restart()
		case r < 98:
			h.step(Paused{Paused: !h.p.paused})
		default:
			h.staleMetadata()
		}
	}
}

// quiesce stops faults and drives the consumer until it has read the whole
// leader log with nothing left unreported.
func (h *harness) quiesce() {
	h.step(Paused{Paused: false})
	for i := range 300 {
		h.metadata()
		for n := 0; len(h.pending) > 0 && n < 50; n++ {
			h.answerAt(0)
		}
		h.step(Tick{})
		if h.p.state == StateFetching && h.viewNext == h.leader().leo() && h.firstGone() < 0 && i > 2 {
			return
		}
	}
	h.fail("no progress: the consumer did not catch up with the log")
}

// ---------------------------------------------------------------------------
// The partition's history.

// elect elects a new leader (replicas.elect) and records it.
func (h *harness) elect(clean bool) {
	if !h.replicas.elect(clean) {
		return
	}
	if clean {
		h.stats.cleanElections++
	} else {
		h.stats.uncleanElections++
	}
	h.hist = append(h.hist, Leader{ID: int32(h.lead + 1), Epoch: h.epoch})
	h.tracef("elect clean=%v leader=%d epoch=%d log%s", clean, h.lead+1, h.epoch, h.logString(h.leader()))
}

// deleteRecords advances the log start of every replica, within what all
// replicas agree on (only committed data is deleted).
func (h *harness) deleteRecords() {
	agreed := h.agreed()
	// Retention could also erase the evidence of a replacement the
	// consumer has not been told of yet (the leader would then echo the
	// gone epoch at its log start and nobody could tell); the model does
	// not delete past such a record, so every replacement stays
	// detectable.
	if g := h.firstGone(); g >= 0 && g < agreed {
		agreed = g
	}
	ls := h.reps[0].logStart
	if agreed <= ls {
		return
	}
	ls += 1 + h.rng.Int64N(agreed-ls)
	// What was already replaced stays replaced once deleted.
	for o := max(h.viewLow, h.leader().logStart); o < min(ls, h.viewNext); o++ {
		if h.gone(o) {
			h.goneIDs[h.view[o-h.viewLow].id] = true
		}
	}
	for _, r := range h.reps {
		r.deleteBefore(ls)
	}
	h.stats.deletions++
	h.tracef("delete records before %d", ls)
}

func (h *harness) metadata() {
	h.meta = false
	h.step(h.leaderChanged(Leader{ID: int32(h.lead + 1), Epoch: h.epoch}))
}

func (h *harness) staleMetadata() {
	h.step(h.leaderChanged(h.hist[h.rng.IntN(len(h.hist))]))
}

// restart replaces the consumer with a new one that starts from the
// committed position (with its epoch), as after a crash.
func (h *harness) restart() {
	pos, ok := h.p.Position()
	if !ok || h.p.state == StateHalted {
		return
	}
	h.stats.restarts++
	h.tracef("restart at %v", pos)
	if h.rng.IntN(4) == 0 && pos.HasEpoch() {
		h.newConsumer(NearestTo(pos.Offset, pos.Epoch))
		return
	}
	h.newConsumer(AtEpoch(pos.Offset, pos.Epoch))
}

// ---------------------------------------------------------------------------
// Broker answers.

func (h *harness) answer() {
	if len(h.pending) == 0 {
		return
	}
	h.answerAt(h.rng.IntN(len(h.pending)))
}

func (h *harness) answerAt(i int) {
	a := h.pending[i]
	h.pending = slices.Delete(h.pending, i, i+1)
	if !h.current(a) {
		h.stats.stale++
	}
	lost := h.rng.IntN(40) == 0
	switch a.Kind {
	case ActFetch:
		h.answerFetch(a.Fetch, lost)
	case ActValidate:
		v := a.Validate
		if code := h.fence(v.Leader, v.CurrentLeaderEpoch, lost); code != CodeNone {
			h.step(EpochEndOffset{Req: v.Req, Code: code})
			return
		}
		h.step(EpochEndOffset{Req: v.Req, End: h.leader().endOffsetFor(v.Epoch)})
	case ActListOffsets:
		l := a.List
		if code := h.fence(l.Leader, l.CurrentLeaderEpoch, lost); code != CodeNone {
			h.step(ListedOffset{Req: l.Req, Code: code, Offset: NoOffset, Epoch: NoEpoch})
			return
		}
		ld := h.leader()
		switch l.Spec {
		case ListEarliest:
			e := NoEpoch
			if ld.leo() > ld.logStart {
				e = ld.log[ld.logStart].epoch
			}
			h.step(ListedOffset{Req: l.Req, Offset: ld.logStart, Epoch: e})
		default:
			h.step(ListedOffset{Req: l.Req, Offset: ld.leo(), Epoch: h.epoch})
		}
	}
}

func (h *harness) current(a Action) bool {
	var req RequestID
	switch a.Kind {
	case ActFetch:
		req = a.Fetch.Req
	case ActValidate:
		req = a.Validate.Req
	case ActListOffsets:
		req = a.List.Req
	}
	return req == h.p.inflight
}

// fence is Partition.checkCurrentLeaderEpoch followed by the leadership
// check, as every broker knows the controller's current epoch; lost
// requests fail as a whole.
func (h *harness) fence(id, cle int32, lost bool) Code {
	switch {
	case lost:
		return CodeNetworkException
	case cle >= 0 && cle < h.epoch:
		return CodeFencedLeaderEpoch
	case cle > h.epoch:
		return CodeUnknownLeaderEpoch
	case id != int32(h.lead+1):
		return CodeNotLeaderOrFollower
	}
	return CodeNone
}

func (h *harness) answerFetch(f FetchRequest, lost bool) {
	cle := f.CurrentLeaderEpoch
	if h.noFence {
		cle = NoEpoch
	}
	if code := h.fence(f.Leader, cle, lost); code != CodeNone {
		var hint *Leader
		if code != CodeNetworkException && !h.legacy && h.rng.IntN(2) == 0 {
			hint = &Leader{ID: int32(h.lead + 1), Epoch: h.epoch}
		}
		e := FetchFailed{Req: f.Req, Code: code, Hint: hint}
		if hint != nil {
			e.HintInBand = h.knowsInBand()
		}
		h.step(e)
		return
	}
	validates := f.Validates && h.current(Action{Kind: ActFetch, Fetch: f})
	if h.inBand && h.krng.IntN(20) == 0 {
		// The leader names a preferred read replica: it reads nothing,
		// so it checks nothing (the consumer steps the empty answer as
		// unchecked).
		if validates {
			h.stats.inBandUnchecked++
		}
		h.step(FetchCompleted{Req: f.Req})
		return
	}
	l := h.leader()
	// The consumer marks the answer checked when the broker answered at
	// v12+ (a leader, here, that read the partition).
	checked := h.v12
	if validates && f.Offset >= l.logStart && f.Offset <= l.leo() {
		if checked {
			h.stats.inBandChecked++
		} else {
			h.stats.inBandUnchecked++
		}
	}
	if h.v12 && f.LastFetchedEpoch >= 0 {
		eo := l.endOffsetFor(f.LastFetchedEpoch)
		if eo.Undefined() || f.Offset < l.logStart {
			h.step(FetchFailed{Req: f.Req, Code: CodeOffsetOutOfRange})
			return
		}
		if eo.Epoch < f.LastFetchedEpoch || eo.EndOffset < f.Offset {
			if h.current(Action{Kind: ActFetch, Fetch: f}) {
				h.stats.diverging++
			}
			if validates {
				h.stats.inBandDiverging++
			}
			h.step(DivergingEpoch{Req: f.Req, End: eo})
			return
		}
	}
	if f.Offset < l.logStart || f.Offset > l.leo() {
		h.step(FetchFailed{Req: f.Req, Code: CodeOffsetOutOfRange})
		return
	}
	start := f.Offset
	for start > 0 && start < l.leo() && l.log[start-1].batch == l.log[start].batch {
		start--
	}
	for range 1 + h.rng.IntN(3) {
		if start >= l.leo() {
			break
		}
		end := start + 1
		for end < l.leo() && l.log[end].batch == l.log[start].batch {
			end++
		}
		h.stepBatch(BatchFetched{Req: f.Req, Base: start, Last: end - 1, Epoch: l.log[start].epoch, Checked: checked}, l.log[start:end])
		start = end
	}
	h.step(FetchCompleted{Req: f.Req, Checked: checked})
}

// ---------------------------------------------------------------------------
// Stepping and checking.

func (h *harness) tracef(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
	if len(h.trace) > 200 {
		h.trace = h.trace[100:]
	}
}

func (h *harness) stepBatch(b BatchFetched, recs []rec) {
	before := h.p.pos
	accepted := h.p.infKind == ActFetch && b.Req == h.p.inflight && b.Last >= before.Offset
	h.step(b)
	if !accepted || h.p.state != StateFetching || h.p.pos.Offset != b.Last+1 {
		return // ignored, or held back for validation
	}
	// The records [before, Last] were delivered.
	if before.Offset != h.viewNext {
		h.fail("delivery from %d, expected %d (silent skip or re-read)", before.Offset, h.viewNext)
	}
	if g := h.firstGone(); g >= 0 {
		h.fail("delivered %d..%d while record %d, delivered earlier, is gone unreported", before.Offset, b.Last, g)
	}
	for o := before.Offset; o <= b.Last; o++ {
		x := recs[o-b.Base]
		if _, dup := h.seen[x.id]; dup {
			h.fail("record %d@%d (id %d) delivered twice", o, x.epoch, x.id)
		}
		h.seen[x.id] = o
		h.view = append(h.view, x)
		h.stats.delivered++
	}
	h.viewNext = b.Last + 1
	if want := (Position{Offset: b.Last + 1, Epoch: b.Epoch}); h.p.pos != want {
		h.fail("position %v after batch, want %v", h.p.pos, want)
	}
}

func (h *harness) step(ev Event) {
	h.tracef("%T%+v", ev, ev)
	before := h.p.pos
	wasReset := h.p.state == StateAwaitingReset
	wasValidating := h.p.state == StateAwaitingValidation
	acts := slices.Clone(h.p.Step(ev))
	for _, a := range acts {
		h.tracef("  -> %v", a)
		switch a.Kind {
		case ActFetch, ActValidate, ActListOffsets:
			if a.Kind == ActFetch && a.Fetch.Validates {
				// The fetch is the check of the position: it must carry
				// it, to the leader the machine knows, only with the
				// option, and only while validation is pending.
				f, pos := a.Fetch, h.p.pos
				if !h.inBand || !pos.HasEpoch() || f.Offset != pos.Offset || f.LastFetchedEpoch != pos.Epoch ||
					f.Leader != h.p.leader.ID || f.CurrentLeaderEpoch != h.p.leader.Epoch || f.CurrentLeaderEpoch < 0 ||
					h.p.state != StateAwaitingValidation || h.p.paused {
					h.fail("validating fetch %v for position %v, leader %v, state %v", a, pos, h.p.leader, h.p.state)
				}
			}
			h.pending = append(h.pending, a)
		case ActRefreshMetadata:
			h.meta = true
		case ActReport:
			h.checkReport(a.Report, before)
		case ActHalt:
			h.stats.halts++
			if a.Halt.Reason != HaltBreak {
				h.fail("halted on %v", a.Halt.Code)
			}
		case ActResolved:
			// The application asked for the nearest position: whatever
			// it moved over is its choice. Start a new view there.
			h.claimView(a.Resolved.Position, true)
		}
	}
	if wasReset && h.p.state == StateFetching && h.p.pos.Offset != before.Offset {
		h.resetView(h.p.pos.Offset, true) // a start or reset position arrived
	}
	switch ev.(type) {
	case BatchFetched, FetchCompleted, EpochEndOffset, DivergingEpoch:
		// A validation that the leader's answer passed without a report,
		// by an OffsetForLeaderEpoch or by the fetch itself, proves
		// that nothing delivered is gone: the leader's record before
		// the position is the one delivered, and so is every record
		// before it (a SeekToNearest resolution restarted the view
		// where it landed).
		if wasValidating && h.p.state == StateFetching && h.p.leader.Epoch >= 0 &&
			!slices.ContainsFunc(acts, func(a Action) bool { return a.Kind == ActReport }) {
			if g := h.firstGone(); g >= 0 {
				h.fail("%T validated position %v while delivered record %d is gone", ev, h.p.pos, g)
			}
		}
	}
	if h.p.narrowing {
		h.narrowed = true
	}
	if h.p.state == StateHalted && len(h.todo) == 0 {
		h.fail("halted with nothing for the application to do")
	}
	for len(h.todo) > 0 {
		ev := h.todo[0]
		h.todo = h.todo[1:]
		h.start(ev)
	}
}

// claimView restarts the view at p. If p has an epoch, the consumer now
// claims the leader's record p.Offset-1 was read in it: that must be true,
// and the record joins the view (as if delivered) so that a later report
// about it can be checked.
func (h *harness) claimView(p Position, forgetSeen bool) {
	h.resetView(p.Offset, forgetSeen)
	if !p.HasEpoch() || p.Offset == 0 {
		return
	}
	l := h.leader()
	if p.Offset-1 < l.logStart && p.Offset <= l.leo() {
		return // the record is deleted: nothing to check, nothing to lose
	}
	if p.Offset > l.leo() || l.log[p.Offset-1].epoch != p.Epoch {
		h.fail("position %v claims an epoch the leader's record before it does not have", p)
	}
	h.view = append(h.view, l.log[p.Offset-1])
	h.viewLow = p.Offset - 1
}

// forgetFrom forgets the deliveries at offsets ≥ d: a report declared them
// replaced, so reading them again (if an election brings them back) is not
// a duplicate.
func (h *harness) forgetFrom(d int64) {
	for id, o := range h.seen {
		if o >= d {
			delete(h.seen, id)
		}
	}
}

func (h *harness) resetView(at int64, forgetSeen bool) {
	h.view = h.view[:0]
	h.viewLow, h.viewNext = at, at
	if forgetSeen {
		clear(h.seen)
	}
}

// gone reports whether the delivered record at offset o is no longer in the
// leader's log: replaced or truncated. Below the log start it is what it
// was when retention deleted it (every replica agreed on it then).
func (h *harness) gone(o int64) bool {
	l := h.leader()
	if o < l.logStart {
		return h.goneIDs[h.view[o-h.viewLow].id]
	}
	return o >= l.leo() || l.log[o].id != h.view[o-h.viewLow].id
}

func (h *harness) firstGone() int64 {
	for o := h.viewLow; o < h.viewNext; o++ {
		if h.gone(o) {
			return o
		}
	}
	return -1
}

func (h *harness) checkReport(t Truncation, before Position) {
	if t.Consumed.Offset != h.viewNext {
		h.fail("report %v: consumed %d, but the consumer had read up to %d", t, t.Consumed.Offset, h.viewNext)
	}
	switch t.Kind {
	case Diverged:
		d := t.Divergent.Offset
		if t.Resume.Offset != d || t.Then == ThenRewind && h.p.pos != t.Resume {
			h.fail("report %v: resume %v, position %v", t, t.Resume, h.p.pos)
		}
		if h.firstGone() < 0 && d >= h.leader().logStart {
			// (A divergence below the log start is about records
			// retention deleted: neither side can check it.)
			h.fail("report %v but every delivered record is still in the leader's log", t)
		}
		// Records deleted by retention cannot be checked either way.
		ls := h.leader().logStart
		for o := max(d, h.viewLow, ls); o < h.viewNext; o++ {
			if !h.gone(o) {
				h.fail("report %v: delivered record %d is still in the leader's log", t, o)
			}
		}
		if t.Exact {
			h.stats.exact++
			for o := max(h.viewLow, ls); o < min(d, h.viewNext); o++ {
				if h.gone(o) {
					h.fail("exact report %v: delivered record %d, before it, is gone too", t, o)
				}
			}
		} else {
			h.stats.bound++
		}
		if h.narrowed {
			h.stats.narrowed++
			h.narrowed = false
		}
		// Forget what is gone; the next delivery starts at d. A replaced
		// record may come back (a later unclean election can bring back
		// a log that has it): delivering it again then is reading the
		// current log, after a report that said it was gone.
		h.forgetFrom(d)
		switch {
		case d <= h.viewLow || !t.Resume.HasEpoch():
			// Nothing left, or nothing the consumer can vouch for: a
			// position without an epoch is not validated (it gets one
			// from the next batch), so the view restarts there.
			h.claimView(t.Resume, false)
		default:
			h.view = h.view[:d-h.viewLow]
			h.viewNext = d
			if g := h.firstGone(); g >= 0 {
				// A bound below what the lineage remembers: records
				// before it may be gone too, and the report said so
				// (not exact). They count as reported.
				h.stats.underReported++
				h.forgetFrom(g)
				h.claimView(t.Resume, false)
			} else if e := t.Resume.Epoch; e >= 0 && d-1 >= ls && h.view[d-1-h.viewLow].epoch != e {
				h.fail("report %v: the record before the divergence has epoch %d", t, h.view[d-1-h.viewLow].epoch)
			}
		}
		if t.Then == ThenHalt {
			h.seekAfterHalt(t)
		}
	case BelowLogStart:
		ls := h.leader().logStart
		if t.Consumed.Offset >= ls || t.Skipped != (Range{From: t.Consumed.Offset, To: ls}) {
			h.fail("report %v with the log starting at %d", t, ls)
		}
		h.stats.belowStart++
		h.resetView(t.Consumed.Offset, true)
		if t.Then == ThenHalt {
			h.todo = append(h.todo, Seek{Start: Earliest()})
		}
	case PastLogEnd:
		if before.HasEpoch() {
			h.fail("report %v for a position with an epoch", t)
		}
		h.stats.pastEnd++
		h.resetView(t.Consumed.Offset, true)
		if t.Then == ThenHalt {
			h.todo = append(h.todo, Seek{Start: Earliest()})
		}
	default:
		h.fail("unexpected report %v", t)
	}
}

// seekAfterHalt is the application's answer to a PolicyNone halt: seek to
// the divergence point (validated), or accept the loss and continue at the
// consumed position if the log reaches it.
func (h *harness) seekAfterHalt(t Truncation) {
	if h.rng.IntN(3) == 0 && h.leader().leo() >= t.Consumed.Offset {
		h.resetView(t.Consumed.Offset, false)
		h.todo = append(h.todo, Seek{Start: At(t.Consumed.Offset)})
		return
	}
	h.todo = append(h.todo, Seek{Start: AtEpoch(t.Resume.Offset, t.Resume.Epoch)})
}
