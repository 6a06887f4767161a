package seek

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kepoch/kepoch/errors"
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
	// divergence is being narrowed down. Nothing is fetched, except, with
	// Config.InBandValidation, the one fetch whose answer is the check
	// (FetchRequest.Validates): none of its records is accepted before
	// the answer proved the position.
	StateAwaitingValidation
	// StateFetching: the position is valid; Fetch actions flow.
	StateFetching
	// StateHalted: a break was reported under PolicyNone, or a broker
	// answered a non-retriable error. Nothing is sent until the application
	// seeks or reassigns.
	StateHalted
)

var stateNames = [...]string{"initializing", "awaiting-reset", "awaiting-validation", "fetching", "halted"}

// String returns the name used in scenario scripts.
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
	// InBandValidation lets the fetch itself validate a position where it
	// can (off by default: every check is an OffsetForLeaderEpoch first).
	// After a leader or leader-epoch change, an AtEpoch seek or start, or
	// an AtHistory start, the position is checked by a Fetch to the
	// leader carrying LastFetchedEpoch (FetchRequest.Validates) instead
	// of an OffsetForLeaderEpoch round trip, when the leader is known to
	// check it (LeaderChanged.InBand, BrokerInBand) and the partition is
	// not paused. The answer is the validation: a DivergingEpoch is judged
	// exactly as an OffsetForLeaderEpoch answer is, and an answer the
	// broker checked (BatchFetched.Checked, FetchCompleted.Checked) proves
	// the position; an answer it did not check is no proof, and the
	// position is validated with OffsetForLeaderEpoch before anything of
	// it is accepted. Only for brokers that implement the check (Apache
	// Kafka 2.7+, Fetch v12+): a broker that answers v12 and ignores
	// LastFetchedEpoch would let a truncation go unreported.
	InBandValidation bool
}

// DefaultConfig returns the defaults: PolicyEarliest (a located divergence
// rewinds to the divergence point, anything else to the log start, every
// break reported), RetryTicks 1, MaxEpochWaits 5, LineageSize 16.
func DefaultConfig() Config {
	return Config{Policy: PolicyEarliest, RetryTicks: 1, MaxEpochWaits: 5, LineageSize: 16}
}

// Validate reports the first invalid field: an error matching
// errors.ErrInvalidOption that names the field and its value.
func (c Config) Validate() error {
	switch {
	case c.Policy < PolicyEarliest || c.Policy > PolicyNone:
		return invalidOption("Policy", int(c.Policy), "is not a policy")
	case c.RetryTicks < 1:
		return invalidOption("RetryTicks", c.RetryTicks, "is less than 1")
	case c.MaxEpochWaits < 1:
		return invalidOption("MaxEpochWaits", c.MaxEpochWaits, "is less than 1")
	case c.LineageSize < 2:
		return invalidOption("LineageSize", c.LineageSize, "is less than 2")
	}
	return nil
}

// invalidOption is Validate's error: the field, its value and why it is
// refused.
func invalidOption(name string, value any, why string) error {
	return fmt.Errorf("seek: option %s: %v %s: %w", name, value, why, errors.ErrInvalidOption)
}

// purpose is why a validation or a listing is in progress.
type purpose uint8

const (
	purposeNone purpose = iota
	// validations
	purposeValidate // check the position (seek/commit epoch, leader change, regression)
	purposeNearest  // resolve a SeekToNearest
	purposeRange    // an OFFSET_OUT_OF_RANGE with an epoch: rule out divergence first
	purposeFetch    // check the position by the next fetch's LastFetchedEpoch (InBandValidation)
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
	// leaderInBand: the leader is known to check a fetch's
	// LastFetchedEpoch (from the LeaderChanged, hint or BrokerInBand that
	// last spoke of it).
	leaderInBand bool

	// The one request in flight (0: none), and the countdown to sending
	// the current request again (0: none scheduled).
	inflight RequestID
	infKind  ActionKind
	backoff  int

	vpurpose purpose
	check    Position // the position being validated
	// Narrowing a divergence over several OffsetForLeaderEpoch answers.
	narrowing  bool
	cand       Position
	candResume Position

	lpurpose  purpose
	listSpec  ListSpec
	listTS    int64
	rangeOK   bool // purposeClassify: the position's epoch was validated
	oorStreak int  // OFFSET_OUT_OF_RANGE answers in a row without progress

	regressAt int64 // position offset whose epoch regression was already checked
	// noLastEpochAt: position offset for which fetches carry no
	// LastFetchedEpoch (the leader's DivergingEpoch there could not be
	// acted on); it holds until the position moves, or a divergence
	// starts a new lineage there.
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
// is no position (initializing, or awaiting a start or reset; an
// OFFSET_OUT_OF_RANGE being classified keeps its position).
func (p *Partition) Position() (pos Position, ok bool) {
	switch {
	case p.state == StateInitializing,
		p.state == StateAwaitingReset && p.lpurpose != purposeClassify:
		return Position{Offset: NoOffset, Epoch: NoEpoch}, false
	}
	return p.pos, true
}

// Leader returns the leader the partition believes in.
func (p *Partition) Leader() Leader { return p.leader }

// AwaitsFetch reports whether req is the Fetch the partition waits for;
// an answer to any other is stale and changes nothing.
func (p *Partition) AwaitsFetch(req RequestID) bool { return p.answers(req, ActFetch) }

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
			if p.fetchValidates() {
				if !e.Checked {
					// The broker did not check LastFetchedEpoch
					// (below v12, or a leader that named a replica
					// and read nothing): no proof. Ask the leader.
					p.validate(purposeValidate)
					break
				}
				p.checkedInBand()
			}
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
	case BrokerInBand:
		if e.Broker >= 0 && e.Broker == p.leader.ID {
			p.leaderInBand = e.InBand
		}
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
		if p.paused && p.fetchValidates() {
			// Validation goes on while paused, and no fetch is sent:
			// check the position with OffsetForLeaderEpoch (the fetch
			// in flight, if any, is superseded).
			p.vpurpose = purposeValidate
			p.send()
		}
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
	if p.leaderInBand {
		b.WriteString(" leader-in-band")
	}
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
	if p.fetchValidates() {
		b.WriteString(" validating=fetch")
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
