package seek

import (
	"fmt"
	"strconv"
	"strings"
)

// State is the fetch state of a partition (Kafka's SubscriptionState fetch
// states, plus Halted).
type State uint8

const (
	// StateInitializing: no position yet (not assigned, or revoked).
	StateInitializing State = iota
	// StateAwaitingReset: waiting for a ListOffsets answer (a start given
	// as earliest/latest/timestamp, a reset by policy, or classifying an
	// OFFSET_OUT_OF_RANGE). No position.
	StateAwaitingReset
	// StateAwaitingValidation: the position has an epoch that must be
	// checked against the leader (after an epoch-bearing seek or commit, a
	// leader change, a DivergingEpoch, an epoch regression, an
	// OFFSET_OUT_OF_RANGE), or a SeekToNearest is being resolved, or a
	// divergence is being narrowed down. Nothing is fetched.
	StateAwaitingValidation
	// StateFetching: the position is valid; Fetch actions flow.
	StateFetching
	// StateHalted: a break was reported under PolicyNone, or a broker
	// answered a non-retriable error. Nothing is sent until the application
	// seeks or reassigns.
	StateHalted
)

var stateNames = [...]string{"initializing", "awaiting-reset", "awaiting-validation", "fetching", "halted"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Config configures a Partition. Start from DefaultConfig; every field is
// validated by NewPartition (a zero field is an error, not a default).
type Config struct {
	// Policy is what happens on a break of the lineage.
	Policy Policy
	// RetryTicks is how many Ticks a failed request waits before it is
	// sent again (≥ 1).
	RetryTicks int
	// MaxEpochWaits is how many metadata reports in a row may name an
	// epoch older than one already known before the machine believes them
	// (≥ 1). Until then it waits (Kafka's "wait until metadata has reached
	// the committed epoch"); after, it accepts the rewind, so a bogus epoch
	// (from a commit made before the topic was recreated, or exposed by a
	// broker that then died) cannot stall the partition forever.
	MaxEpochWaits int
	// LineageSize bounds the epoch history kept per partition (≥ 2).
	LineageSize int
	// IDs is the request id source, shared by all partitions of a consumer.
	// Nil gives the partition its own.
	IDs *RequestIDs
}

// DefaultConfig returns the defaults: PolicyEarliest (a located divergence
// rewinds to the divergence point, anything else to the log start, every
// break reported), RetryTicks 1, MaxEpochWaits 5, LineageSize 16.
func DefaultConfig() Config {
	return Config{Policy: PolicyEarliest, RetryTicks: 1, MaxEpochWaits: 5, LineageSize: 16}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Policy < PolicyEarliest || c.Policy > PolicyNone:
		return fmt.Errorf("seek: invalid policy %d", c.Policy)
	case c.RetryTicks < 1:
		return fmt.Errorf("seek: RetryTicks %d < 1", c.RetryTicks)
	case c.MaxEpochWaits < 1:
		return fmt.Errorf("seek: MaxEpochWaits %d < 1", c.MaxEpochWaits)
	case c.LineageSize < 2:
		return fmt.Errorf("seek: LineageSize %d < 2", c.LineageSize)
	}
	return nil
}

// purpose is why a validation or a listing is in progress.
type purpose uint8

const (
	purposeNone purpose = iota
	// validations
	purposeValidate // check the position (seek/commit epoch, leader change, regression)
	purposeNearest  // resolve a SeekToNearest
	purposeRange    // an OFFSET_OUT_OF_RANGE with an epoch: rule out divergence first
	// listings
	purposeStart    // a start given as earliest/latest/timestamp
	purposeReset    // a reset by policy
	purposeClassify // an OFFSET_OUT_OF_RANGE: learn the log start
)

// Partition is the position and epoch-lineage state machine of one
// partition. It is driven only through Step and never blocks, sleeps,
// reads a clock or does I/O; the same state and event always give the same
// actions. It is not safe for concurrent use.
type Partition struct {
	cfg   Config
	ids   *RequestIDs
	state State

	pos      Position
	leader   Leader
	topicID  TopicID
	lastSeen int32 // largest trusted epoch from any source
	behind   int   // metadata reports in a row older than lastSeen
	paused   bool
	lineage  Lineage

	// The one request in flight (0: none), and the countdown to sending
	// the current request again (0: none scheduled).
	inflight RequestID
	infKind  ActionKind
	backoff  int

	vpurpose purpose
	check    Position // the position being validated
	// Narrowing a divergence over several OffsetForLeaderEpoch answers.
	narrowing bool
	cand      Position

	lpurpose  purpose
	listSpec  ListSpec
	listTS    int64
	rangeOK   bool // purposeClassify: the position's epoch was validated
	oorStreak int  // OFFSET_OUT_OF_RANGE answers in a row without progress

	regressAt int64 // position offset whose epoch regression was already checked
	// noLastEpochAt: position offset for which fetches carry no
	// LastFetchedEpoch (a DivergingEpoch there could not be acted on).
	noLastEpochAt int64

	brokeAt Position // PolicyNone halt: the reported consumed position
	broke   bool

	acts      []Action
	refreshed bool // an ActRefreshMetadata was emitted in this Step
}

// NewPartition returns a partition in StateInitializing with no leader
// known. Step LeaderChanged and Assigned to start it.
func NewPartition(cfg Config) (*Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ids := cfg.IDs
	if ids == nil {
		ids = new(RequestIDs)
	}
	return &Partition{
		cfg:           cfg,
		ids:           ids,
		pos:           Position{Offset: NoOffset, Epoch: NoEpoch},
		leader:        Leader{ID: NoBroker, Epoch: NoEpoch},
		lastSeen:      NoEpoch,
		lineage:       newLineage(cfg.LineageSize),
		regressAt:     NoOffset,
		noLastEpochAt: NoOffset,
		acts:          make([]Action, 0, 4),
	}, nil
}

// State returns the fetch state.
func (p *Partition) State() State { return p.state }

// Position returns the consumed position, the one to commit: the next
// offset and the epoch of the last consumed record. ok is false when there
// is no position (initializing, or awaiting a reset).
func (p *Partition) Position() (pos Position, ok bool) {
	switch p.state {
	case StateInitializing, StateAwaitingReset:
		return Position{Offset: NoOffset, Epoch: NoEpoch}, false
	}
	return p.pos, true
}

// Leader returns the leader the partition believes in.
func (p *Partition) Leader() Leader { return p.leader }

// Policy returns the current policy.
func (p *Partition) Policy() Policy { return p.cfg.Policy }

// Lineage returns the partition's lineage (read only; valid until the next
// Step).
func (p *Partition) Lineage() *Lineage { return &p.lineage }

// Step applies one event and returns the actions it causes, in order. The
// returned slice is reused by the next Step; copy what must outlive it.
func (p *Partition) Step(ev Event) []Action {
	p.acts = p.acts[:0]
	p.refreshed = false
	switch e := ev.(type) {
	case BatchFetched:
		p.onBatch(e)
	case FetchCompleted:
		if p.answers(e.Req, ActFetch) {
			p.inflight = 0
			p.send()
		}
	case FetchFailed:
		p.onFetchFailed(e)
	case DivergingEpoch:
		p.onDiverging(e)
	case EpochEndOffset:
		p.onEpochEnd(e)
	case ListedOffset:
		p.onListed(e)
	case LeaderChanged:
		p.onLeader(e)
	case Assigned:
		p.seekTo(e.Start, false)
	case Seek:
		p.seekTo(e.Start, true)
	case Revoked:
		p.forget()
		p.lineage.reset()
		p.state = StateInitializing
		p.pos = Position{Offset: NoOffset, Epoch: NoEpoch}
	case PolicyChanged:
		if e.Policy >= PolicyEarliest && e.Policy <= PolicyNone {
			p.cfg.Policy = e.Policy
		}
	case Paused:
		p.paused = e.Paused
		if !p.paused && p.state == StateFetching && p.inflight == 0 && p.backoff == 0 {
			p.send()
		}
	case Tick:
		if p.backoff > 0 {
			p.backoff--
			if p.backoff == 0 {
				p.send()
			}
		}
	}
	return p.acts
}

// answers reports whether an answer with id req and kind k is the one the
// partition waits for.
func (p *Partition) answers(req RequestID, k ActionKind) bool {
	return req != 0 && req == p.inflight && p.infKind == k
}

// forget drops everything in flight and every multi-step context.
func (p *Partition) forget() {
	p.inflight, p.infKind, p.backoff = 0, 0, 0
	p.vpurpose, p.lpurpose = purposeNone, purposeNone
	p.narrowing = false
	p.rangeOK = false
	p.oorStreak = 0
	p.regressAt = NoOffset
	p.noLastEpochAt = NoOffset
	p.broke = false
}

// ---------------------------------------------------------------------------
// Sending.

// send sends the request the current state needs, with a fresh id, or waits
// for metadata if it cannot. Whatever was in flight is superseded.
func (p *Partition) send() {
	p.inflight, p.infKind, p.backoff = 0, 0, 0
	switch p.state {
	case StateInitializing, StateHalted:
		return
	case StateFetching:
		if p.paused {
			return
		}
	}
	if p.leader.ID < 0 {
		p.waitMetadata(RefreshLeaderUnknown)
		return
	}
	if p.leader.Epoch >= 0 && p.leader.Epoch < p.lastSeen {
		p.waitMetadata(RefreshBehind)
		return
	}
	switch p.state {
	case StateFetching:
		p.emit(ActFetch)
		p.acts[len(p.acts)-1].Fetch = FetchRequest{
			Req:                p.inflight,
			Leader:             p.leader.ID,
			Offset:             p.pos.Offset,
			CurrentLeaderEpoch: p.leader.Epoch,
			LastFetchedEpoch:   p.pos.Epoch,
		}
		if p.noLastEpochAt == p.pos.Offset {
			p.acts[len(p.acts)-1].Fetch.LastFetchedEpoch = NoEpoch
		}
	case StateAwaitingValidation:
		if p.leader.Epoch < 0 {
			// Metadata without epochs: nothing to validate against
			// (Kafka's validatePosition needs both epochs).
			p.skipValidation()
			return
		}
		p.emit(ActValidate)
		p.acts[len(p.acts)-1].Validate = ValidateRequest{
			Req:                p.inflight,
			Leader:             p.leader.ID,
			Epoch:              p.check.Epoch,
			CurrentLeaderEpoch: p.leader.Epoch,
		}
	case StateAwaitingReset:
		p.emit(ActListOffsets)
		p.acts[len(p.acts)-1].List = ListRequest{
			Req:                p.inflight,
			Leader:             p.leader.ID,
			Spec:               p.listSpec,
			Timestamp:          p.listTS,
			CurrentLeaderEpoch: p.leader.Epoch,
		}
	}
}

// emit appends a request action of kind k with a fresh id, which becomes the
// one in flight.
func (p *Partition) emit(k ActionKind) {
	p.inflight, p.infKind = p.ids.next(), k
	p.acts = append(p.acts, Action{Kind: k})
}

// waitMetadata asks for metadata and schedules another attempt.
func (p *Partition) waitMetadata(r RefreshReason) {
	p.refresh(r)
	p.retryLater()
}

func (p *Partition) refresh(r RefreshReason) {
	if p.refreshed {
		return
	}
	p.refreshed = true
	p.acts = append(p.acts, Action{Kind: ActRefreshMetadata, Refresh: r})
}

func (p *Partition) retryLater() {
	p.inflight, p.infKind = 0, 0
	p.backoff = p.cfg.RetryTicks
}

// failed handles a retriable or fatal error code of the request in flight.
// It returns false for codes the caller must handle itself.
func (p *Partition) failed(c Code) bool {
	switch classify(c) {
	case clsFenced:
		// We are behind: newer metadata will resend at once (onLeader);
		// until then retry, in case the metadata we have is the newest.
		p.waitMetadata(RefreshFenced)
	case clsUnknownEpoch:
		// The broker is behind: the same request, later.
		p.retryLater()
	case clsTopicID:
		p.waitMetadata(RefreshTopicID)
	case clsFatal:
		p.halt(HaltError, c)
	case clsRetry:
		p.waitMetadata(RefreshError)
	default:
		return false
	}
	return true
}

func (p *Partition) halt(r HaltReason, c Code) {
	p.forget()
	p.state = StateHalted
	p.acts = append(p.acts, Action{Kind: ActHalt, Halt: Halt{Reason: r, Code: c}})
}

// ---------------------------------------------------------------------------
// Positions.

// seekTo handles Assigned (isSeek false) and Seek.
func (p *Partition) seekTo(s Start, isSeek bool) {
	ack := isSeek && p.state == StateHalted && p.broke && s.Kind == StartAt &&
		s.Offset == p.brokeAt.Offset && (s.Epoch < 0 || s.Epoch == p.brokeAt.Epoch)
	p.forget()
	p.lineage.reset()
	switch s.Kind {
	case StartAt, StartNearest:
		if s.Offset < 0 {
			p.startList(ListEarliest, 0, purposeStart)
			return
		}
		if s.Epoch < 0 || s.Offset == 0 || ack {
			// Nothing to validate, or the application accepted the
			// reported break: continue from here in whatever lineage
			// the leader has, without the epoch that diverged.
			p.setPosition(Position{Offset: s.Offset, Epoch: NoEpoch})
			p.send()
			return
		}
		p.raiseSeen(s.Epoch)
		p.pos = Position{Offset: s.Offset, Epoch: s.Epoch}
		p.lineage.root(p.pos)
		pur := purposeValidate
		if s.Kind == StartNearest {
			pur = purposeNearest
		}
		p.validate(pur)
	case StartEarliest:
		p.startList(ListEarliest, 0, purposeStart)
	case StartLatest:
		p.startList(ListLatest, 0, purposeStart)
	case StartTimestamp:
		p.startList(ListTimestamp, s.Timestamp, purposeStart)
	default:
		p.state = StateInitializing
	}
}

// setPosition makes pos the valid position and roots the lineage there.
func (p *Partition) setPosition(pos Position) {
	p.pos = normal(pos)
	p.lineage.root(pos)
	p.state = StateFetching
}

// startList asks for an offset. Classifying an OFFSET_OUT_OF_RANGE keeps
// the position (it is what gets classified); any other listing replaces it.
func (p *Partition) startList(spec ListSpec, ts int64, pur purpose) {
	p.state = StateAwaitingReset
	if pur != purposeClassify {
		p.pos = Position{Offset: NoOffset, Epoch: NoEpoch}
		p.lineage.reset()
	}
	p.listSpec, p.listTS, p.lpurpose = spec, ts, pur
	p.send()
}

// validate checks the position against the leader.
func (p *Partition) validate(pur purpose) {
	p.state = StateAwaitingValidation
	p.vpurpose = pur
	p.check = p.pos
	p.narrowing = false
	p.send()
}

func (p *Partition) raiseSeen(e int32) {
	if e > p.lastSeen {
		p.lastSeen = e
	}
}

// skipValidation ends a validation that cannot be made (no leader epoch,
// or a broker without OffsetForLeaderEpoch v3).
func (p *Partition) skipValidation() {
	if p.narrowing {
		p.diverged(p.cand, false)
		return
	}
	if p.vpurpose == purposeRange {
		p.rangeOK = false
		p.startList(ListEarliest, 0, purposeClassify)
		return
	}
	p.state = StateFetching
	p.vpurpose = purposeNone
	p.send()
}

// ---------------------------------------------------------------------------
// Fetch answers.

func (p *Partition) onBatch(e BatchFetched) {
	if !p.answers(e.Req, ActFetch) || e.Last < p.pos.Offset {
		return
	}
	if e.Epoch >= 0 && e.Epoch < p.pos.Epoch && p.regressAt != p.pos.Offset {
		// Epochs never go down along a log: the leader's log after our
		// position is not the one we consumed from. Check before
		// delivering (a broker below Fetch v12 cannot tell us in-band).
		// Checked once per position, so a position whose epoch was a
		// loose claim (a commit of the leader epoch instead of the
		// record epoch) costs one round trip, not a loop.
		p.regressAt = p.pos.Offset
		p.validate(purposeValidate)
		return
	}
	p.lineage.observe(e.Epoch, max(e.Base, p.pos.Offset))
	p.pos = Position{Offset: e.Last + 1, Epoch: max(e.Epoch, NoEpoch)}
	p.oorStreak = 0
}

func (p *Partition) onFetchFailed(e FetchFailed) {
	if !p.answers(e.Req, ActFetch) {
		return
	}
	p.inflight, p.infKind = 0, 0
	if h := e.Hint; h.ID >= 0 && h.Epoch > p.leader.Epoch {
		// KIP-951: the answer names a newer leader; no need to wait for
		// metadata.
		p.onLeader(LeaderChanged{Leader: h.ID, Epoch: h.Epoch})
		if p.inflight != 0 || p.state != StateFetching {
			return
		}
	}
	if classify(e.Code) == clsOutOfRange {
		p.outOfRange()
		return
	}
	if classify(e.Code) == clsUnsupported {
		p.halt(HaltError, e.Code)
		return
	}
	if !p.failed(e.Code) {
		p.send() // a "failure" with code NONE: as if completed
	}
}

// outOfRange classifies an OFFSET_OUT_OF_RANGE fetch answer: first rule out
// a divergence if the position has an epoch, then compare the position with
// the log start.
func (p *Partition) outOfRange() {
	p.oorStreak++
	if p.oorStreak > 2 {
		// Validation and the log start both said the position is fine,
		// twice, yet the leader keeps refusing it: treat it as past the
		// end.
		p.broken(PastLogEnd, Range{From: NoOffset, To: p.pos.Offset}, Range{})
		return
	}
	if p.pos.HasEpoch() && p.leader.Epoch >= 0 {
		p.validate(purposeRange)
		return
	}
	p.rangeOK = false
	p.startList(ListEarliest, 0, purposeClassify)
}

func (p *Partition) onDiverging(e DivergingEpoch) {
	if !p.answers(e.Req, ActFetch) {
		return
	}
	p.inflight, p.infKind = 0, 0
	if !p.pos.HasEpoch() {
		// We sent no LastFetchedEpoch; a conforming broker cannot say
		// this. Fetch again.
		p.send()
		return
	}
	p.state = StateAwaitingValidation
	p.vpurpose = purposeValidate
	p.check = p.pos
	p.narrowing = false
	if compare(p.check, e.End, &p.lineage).out == outConsistent {
		// The leader flags a divergence that its own answer does not
		// show (a broker that is not Kafka's): do not ask it again for
		// this position, or it would say the same forever.
		p.noLastEpochAt = p.pos.Offset
	}
	p.resolve(e.End)
}

// ---------------------------------------------------------------------------
// Validation answers.

func (p *Partition) onEpochEnd(e EpochEndOffset) {
	if !p.answers(e.Req, ActValidate) || p.state != StateAwaitingValidation {
		return
	}
	p.inflight, p.infKind = 0, 0
	switch classify(e.Code) {
	case clsNone:
		p.resolve(e.End)
	case clsUnsupported:
		// The leader lacks OffsetForLeaderEpoch v3: Kafka skips
		// validation; in-band DivergingEpoch still guards the fetches.
		p.skipValidation()
	case clsOutOfRange:
		p.waitMetadata(RefreshError)
	default:
		p.failed(e.Code)
	}
}

// resolve applies a leader's answer for p.check.
func (p *Partition) resolve(ans EpochEnd) {
	if p.vpurpose == purposeNearest {
		want := p.check
		np, ok := Nearest(want, ans)
		if !ok {
			p.broken(Unlocated, Range{From: NoOffset, To: want.Offset}, Range{})
			return
		}
		p.setPosition(np)
		p.vpurpose = purposeNone
		p.acts = append(p.acts, Action{Kind: ActResolved, Resolved: Resolved{Requested: want, Position: np}})
		p.send()
		return
	}
	v := compare(p.check, ans, &p.lineage)
	switch v.out {
	case outConsistent:
		if p.narrowing {
			// The leader has our record just below the candidate, in
			// the epoch just checked: the candidate is the first
			// divergent offset, and that epoch is the position's.
			p.diverged(Position{Offset: p.cand.Offset, Epoch: p.check.Epoch}, true)
			return
		}
		p.validated()
	case outUndefined:
		if p.narrowing {
			p.diverged(p.cand, false)
			return
		}
		p.broken(Unlocated, Range{From: NoOffset, To: p.pos.Offset}, Range{})
	case outExact:
		p.diverged(v.at, true)
	case outBound:
		p.diverged(v.at, false)
	case outRecheck:
		p.narrowing = true
		p.cand = v.at
		p.check = v.recheck
		p.send()
	}
}

// validated ends a validation that found nothing lost.
func (p *Partition) validated() {
	pur := p.vpurpose
	p.vpurpose = purposeNone
	if pur == purposeRange {
		// The epoch checks out, so the position is not past our
		// lineage's end; see where the log starts.
		p.rangeOK = true
		p.startList(ListEarliest, 0, purposeClassify)
		return
	}
	p.state = StateFetching
	p.send()
}

// diverged reports a located divergence at d and applies the policy.
func (p *Partition) diverged(d Position, exact bool) {
	d = normal(d)
	p.narrowing = false
	p.vpurpose = purposeNone
	replaced := Range{From: d.Offset, To: p.pos.Offset}
	if from, ok := p.lineage.consumedFrom(); ok && from > d.Offset {
		replaced.From = from // nothing below was consumed in this lineage
	}
	t := Truncation{
		Kind:      Diverged,
		Consumed:  p.pos,
		Divergent: d,
		Exact:     exact,
		Replaced:  replaced,
		Skipped:   Range{From: p.pos.Offset, To: p.pos.Offset},
	}
	if p.cfg.Policy == PolicyNone {
		t.Then = ThenHalt
		p.report(t)
		return
	}
	t.Then = ThenRewind
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	// Move to the divergence point itself, validated by the answer just
	// received; nothing more of the old lineage is delivered.
	p.pos = d
	p.lineage.truncate(d.Offset, d.Epoch, exact)
	p.regressAt = NoOffset
	p.state = StateFetching
	p.send()
}

// normal drops the epoch of a position at offset 0: there is no record
// before it to have one (and a leader asked about it would answer
// DivergingEpoch forever).
func normal(pos Position) Position {
	if pos.Offset <= 0 {
		pos.Epoch = NoEpoch
	}
	return pos
}

// broken reports a break that has no divergence point and applies the
// policy: halt, or reset by policy.
func (p *Partition) broken(kind BreakKind, replaced, skipped Range) {
	p.narrowing = false
	p.vpurpose = purposeNone
	if skipped.Empty() {
		skipped = Range{From: p.pos.Offset, To: p.pos.Offset}
	}
	t := Truncation{
		Kind:      kind,
		Consumed:  p.pos,
		Divergent: Position{Offset: NoOffset, Epoch: NoEpoch},
		Replaced:  replaced,
		Skipped:   skipped,
	}
	if p.cfg.Policy == PolicyNone {
		t.Then = ThenHalt
		p.report(t)
		return
	}
	t.Then = ThenReset
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	spec := ListEarliest
	if p.cfg.Policy == PolicyLatest && kind != Recreated {
		// A recreated topic diverges at its very start: kepoch's stance
		// is the divergence point, whatever the policy.
		spec = ListLatest
	}
	p.forget()
	p.startList(spec, 0, purposeReset)
}

// report emits a PolicyNone break and halts, keeping the position.
func (p *Partition) report(t Truncation) {
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	p.halt(HaltBreak, CodeNone)
	p.broke = true
	p.brokeAt = t.Consumed
}

// ---------------------------------------------------------------------------
// ListOffsets answers.

func (p *Partition) onListed(e ListedOffset) {
	if !p.answers(e.Req, ActListOffsets) || p.state != StateAwaitingReset {
		return
	}
	p.inflight, p.infKind = 0, 0
	switch classify(e.Code) {
	case clsNone:
	case clsUnsupported:
		p.halt(HaltError, e.Code)
		return
	case clsOutOfRange:
		p.waitMetadata(RefreshError)
		return
	default:
		p.failed(e.Code)
		return
	}
	if p.lpurpose == purposeClassify {
		p.classified(e.Offset)
		return
	}
	if e.Offset < 0 {
		if p.listSpec == ListTimestamp {
			// No record at or after the timestamp: the log end.
			p.startList(ListLatest, 0, p.lpurpose)
			return
		}
		p.retryLater()
		return
	}
	// ListOffsets results carry no position epoch (the epoch returned is
	// that of the record at Offset, not of the one before it); the first
	// batch supplies it.
	p.lpurpose = purposeNone
	p.setPosition(Position{Offset: e.Offset, Epoch: NoEpoch})
	p.send()
}

// classified finishes an OFFSET_OUT_OF_RANGE given the log start.
func (p *Partition) classified(logStart int64) {
	p.lpurpose = purposeNone
	p.state = StateFetching // the position is still ours while we decide
	switch {
	case logStart >= 0 && p.pos.Offset < logStart:
		p.brokenAt(BelowLogStart, Range{From: p.pos.Offset, To: p.pos.Offset}, Range{From: p.pos.Offset, To: logStart}, logStart)
	case p.rangeOK:
		// The leader vouched for our epoch up to the position and the
		// position is not below the log start: a passing condition.
		p.rangeOK = false
		p.send()
	default:
		p.brokenAt(PastLogEnd, Range{From: NoOffset, To: p.pos.Offset}, Range{}, logStart)
	}
}

// brokenAt is broken when the log start is already known: under
// PolicyEarliest the position moves there without another ListOffsets.
func (p *Partition) brokenAt(kind BreakKind, replaced, skipped Range, logStart int64) {
	if p.cfg.Policy != PolicyEarliest || logStart < 0 {
		p.broken(kind, replaced, skipped)
		return
	}
	if skipped.Empty() {
		skipped = Range{From: p.pos.Offset, To: p.pos.Offset}
	}
	p.acts = append(p.acts, Action{Kind: ActReport, Report: Truncation{
		Kind:      kind,
		Consumed:  p.pos,
		Divergent: Position{Offset: NoOffset, Epoch: NoEpoch},
		Replaced:  replaced,
		Skipped:   skipped,
		Then:      ThenReset,
	}})
	p.forget()
	p.setPosition(Position{Offset: logStart, Epoch: NoEpoch})
	p.send()
}

// ---------------------------------------------------------------------------
// Metadata.

func (p *Partition) onLeader(e LeaderChanged) {
	var zero TopicID
	if e.TopicID != zero {
		if p.topicID != zero && e.TopicID != p.topicID {
			p.recreated(e)
			return
		}
		p.topicID = e.TopicID
	}
	if e.Epoch < 0 {
		// No trustworthy epoch (Metadata below v9, or a leaderless
		// partition). "No leader" never replaces a known leader
		// (franz-go #1331); a leader named without an epoch is
		// followed, without one: its requests carry no
		// CurrentLeaderEpoch and nothing can be validated against it,
		// but the fetches still carry LastFetchedEpoch.
		if e.Leader < 0 || e.Leader == p.leader.ID {
			return
		}
		p.leader = Leader{ID: e.Leader, Epoch: NoEpoch}
		p.leaderMoved()
		return
	}
	if e.Epoch < p.lastSeen || e.Epoch < p.leader.Epoch {
		p.behind++
		if p.behind < p.cfg.MaxEpochWaits {
			if e.Epoch > p.leader.Epoch {
				// Newer than the leader we know, older than an epoch
				// a commit or seek told us of: adopt it, still wait.
				p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
				p.leaderMoved()
			}
			return
		}
		// Confirmed often enough: the epoch really went back.
		p.lastSeen = e.Epoch
		p.behind = 0
		if e.Epoch == p.leader.Epoch && e.Leader == p.leader.ID {
			// Already adopted while waiting: stop waiting.
			if p.inflight == 0 {
				p.send()
			}
			return
		}
	}
	p.behind = 0
	if e.Epoch == p.leader.Epoch && e.Leader == p.leader.ID {
		return
	}
	p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
	p.raiseSeen(e.Epoch)
	p.leaderMoved()
}

// leaderMoved reacts to a new leader or leader epoch: anything in flight
// carries a stale CurrentLeaderEpoch and is superseded.
func (p *Partition) leaderMoved() {
	switch p.state {
	case StateFetching:
		if p.pos.HasEpoch() && p.leader.Epoch >= 0 && p.leader.ID >= 0 {
			// A new leader may have a different log: check before
			// fetching from it (Kafka's maybeValidatePosition). In-band
			// DivergingEpoch would catch it too, but not every
			// Kafka-compatible broker implements it.
			p.validate(purposeValidate)
			return
		}
		p.send()
	case StateAwaitingValidation:
		if p.narrowing {
			// A narrowing is only meaningful against one leader's log:
			// start over from the consumed position.
			p.narrowing = false
			p.check = p.pos
		}
		p.send()
	case StateAwaitingReset:
		p.send()
	}
}

// recreated handles a topic id change.
func (p *Partition) recreated(e LeaderChanged) {
	p.topicID = e.TopicID
	p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
	p.lastSeen = e.Epoch // epochs restart with the new topic
	p.behind = 0
	switch p.state {
	case StateFetching, StateAwaitingValidation:
		if p.pos.Offset <= 0 && !p.pos.HasEpoch() {
			// Nothing consumed from the old topic.
			p.forget()
			p.setPosition(Position{Offset: 0, Epoch: NoEpoch})
			p.send()
			return
		}
		p.broken(Recreated, Range{From: 0, To: p.pos.Offset}, Range{})
	case StateAwaitingReset:
		p.send()
	}
}

// String formats the state the way the scenario scripts print it.
func (p *Partition) String() string {
	var b strings.Builder
	b.WriteString("state=")
	b.WriteString(p.state.String())
	if pos, ok := p.Position(); ok {
		b.WriteString(" pos=")
		b.WriteString(pos.String())
	}
	b.WriteString(" leader=")
	b.WriteString(p.leader.String())
	if p.lastSeen > p.leader.Epoch {
		b.WriteString(" seen=")
		b.WriteString(epochString(p.lastSeen))
	}
	b.WriteString(" lineage=")
	b.WriteString(p.lineage.String())
	if p.inflight != 0 {
		b.WriteString(" inflight=")
		b.WriteString(p.infKind.String())
		b.WriteString("#")
		b.WriteString(strconv.FormatUint(uint64(p.inflight), 10))
	}
	if p.backoff > 0 {
		b.WriteString(" backoff=")
		b.WriteString(strconv.Itoa(p.backoff))
	}
	if p.narrowing {
		b.WriteString(" narrowing=")
		b.WriteString(p.cand.String())
		b.WriteString(" check=")
		b.WriteString(p.check.String())
	}
	if p.paused {
		b.WriteString(" paused")
	}
	if p.behind > 0 {
		b.WriteString(" behind=")
		b.WriteString(strconv.Itoa(p.behind))
	}
	return b.String()
}
