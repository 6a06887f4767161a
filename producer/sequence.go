package producer

// sequence.go: producer identities, sequence arithmetic and the per-partition
// sequence state of an idempotent or transactional producer (the Sequencer).
// What the Sequencer decides when a Produce answer arrives is in recovery.go;
// the outcome types it reports are in recovery_outcome.go.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kepoch/kepoch/errors"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s[%d]", tp.Topic, tp.Partition) }

// ProducerID is a producer identity as the brokers know it: the producer ID
// from InitProducerId and its producer epoch. Sequences are scoped to one
// identity and one partition.
type ProducerID struct {
	ID    int64
	Epoch int16
}

// NoProducerID is the identity "none yet" (-1, -1), as sent in an
// InitProducerId request that asks for a brand-new producer ID.
var NoProducerID = ProducerID{ID: -1, Epoch: -1}

// Valid reports whether p names a real identity (ID and epoch both ≥ 0).
func (p ProducerID) Valid() bool { return p.ID >= 0 && p.Epoch >= 0 }

func (p ProducerID) String() string { return fmt.Sprintf("%d/%d", p.ID, p.Epoch) }

// BatchIdentity is what a record batch header carries for idempotence:
// producer ID, producer epoch and base sequence. The broker deduplicates a
// resent batch only if its identity is unchanged, so the Sequencer never
// changes the identity of a batch that may have been written, except when it
// rewrites all in-flight batches of a partition at once under a new identity
// after an epoch bump, and then it says so (PossibleDuplicate).
type BatchIdentity struct {
	Producer     ProducerID
	BaseSequence int32
}

func (b BatchIdentity) String() string { return fmt.Sprintf("%v#%d", b.Producer, b.BaseSequence) }

// BatchRef is the Sequencer's stable handle for one batch. It does not change
// when the batch's identity is rewritten.
type BatchRef uint64

// MaxInFlightPerPartition is the most batches a partition may have in flight.
// A broker remembers the last 5 batches of each producer per partition for
// deduplication (ProducerStateEntry.NUM_BATCHES_TO_RETAIN); a retry older than
// that is answered OUT_OF_ORDER_SEQUENCE_NUMBER instead of being recognised as
// a duplicate.
const MaxInFlightPerPartition = 5

// NextSequence returns seq advanced by n records. Sequences are int32 and wrap
// from math.MaxInt32 to 0, as the broker expects (a batch following one that
// ends at MaxInt32 starts at 0).
func NextSequence(seq, n int32) int32 {
	return int32((int64(seq) + int64(n)) % (int64(math.MaxInt32) + 1))
}

// LastSequence returns the sequence of the last record of a batch of n ≥ 1
// records starting at base.
func LastSequence(base, n int32) int32 { return NextSequence(base, n-1) }

// Errors returned by Sequencer methods. Assign's errors are "not now": the
// partition cannot take a new batch until the condition clears (an
// InitProducerId answer, acknowledgements, or a recovery finishing).
//
// A Sequencer's (or an AckLedger's, or a TxnState's) method given an
// argument it cannot take (a batch of no records, a ref it does not know or
// that is not in the state the call needs, an invalid producer identity, a
// split that does not add up, an acked range that is empty or negative)
// returns an error matching errors.ErrInvalidArgument that names the call,
// the argument and the value, and changes nothing; NewSequencer refuses a
// Config field with one matching errors.ErrInvalidOption.
var (
	// ErrNoProducerID: there is no producer identity yet, or a new producer
	// ID has been requested (epoch exhaustion, INVALID_PRODUCER_EPOCH,
	// INVALID_PRODUCER_ID_MAPPING) and SetProducer has not been called.
	ErrNoProducerID = errors.New("kepoch: no producer ID yet")

	// ErrInFlightLimit: the partition already has MaxInFlight batches in
	// flight.
	ErrInFlightLimit = errors.New("kepoch: partition has the maximum number of batches in flight")

	// ErrPartitionRecovering: the partition has retries to send first, an
	// unresolved batch, a pending split, or in-flight batches under an older
	// producer identity that must finish before its sequences restart.
	ErrPartitionRecovering = errors.New("kepoch: partition is recovering its sequence state")

	// ErrProducerFailing: a transaction is aborting (or the producer is
	// closing): pending batches fail instead of being sent.
	ErrProducerFailing = errors.New("kepoch: producer is failing pending batches")

	// ErrProducerFatal: the producer hit a fatal error (fenced, not
	// authorized) and cannot continue. Errors wrapping it also wrap the
	// cause.
	ErrProducerFatal = errors.New("kepoch: producer is in a fatal state")

	// ErrNoProducerIdentity: an InitProducerId answered without error
	// held no producer identity (a negative producer ID or epoch), a
	// broker's fault. The request is asked again after the retry backoff;
	// an error that ends the wait for it (a delivery timeout, an
	// InitTransactions context) wraps it.
	ErrNoProducerIdentity = errors.New("kepoch: InitProducerId answered without a producer identity")

	// ErrDeliveryTimeout: a batch's delivery deadline passed before it was
	// acknowledged. An idempotent producer's error wrapping it also wraps
	// the error code of the last answer that had the batch sent again, if
	// one did, or, for a batch that waited for a producer identity, the
	// last InitProducerId failure.
	ErrDeliveryTimeout = errors.New("kepoch: delivery timeout expired")

	// ErrAckCheckFailed: acknowledged writes could not be verified after a
	// leader change (AckedWritesLost.Err): the acked-write check's
	// requests failed for good or kept failing. Errors wrapping it also
	// wrap the last attempt's error.
	ErrAckCheckFailed = errors.New("kepoch: acknowledged writes not verified after a leader change: the check failed")

	// ErrResumeRefused: Resume cannot end the failing period as things
	// stand: batches lost their sequences (NeedsBump: a new producer
	// epoch is needed, SetProducer), or batches are still on the wire
	// (Outstanding: their answers come first). The error says which.
	ErrResumeRefused = errors.New("kepoch: sequences cannot resume")

	// ErrPartitionerOutOfRange: the producer's Partitioner (WithPartitioner)
	// returned a partition outside [0, n) for a topic of n partitions. The
	// record is refused (Produce returns a *errors.PartitionError naming
	// the topic and the partition returned, wrapping it), never queued on
	// another partition. It matches errors.ErrInvalidArgument: the
	// record's partition, as chosen, is refused.
	ErrPartitionerOutOfRange error = &partitionerError{}
)

type partitionerError struct{}

func (*partitionerError) Error() string {
	return "kepoch: the partitioner returned a partition outside [0, n)"
}

func (*partitionerError) Unwrap() error { return errors.ErrInvalidArgument }

// Config configures a Sequencer.
type Config struct {
	// Transactional selects the transactional rules: the Sequencer never
	// bumps the epoch itself; errors that need a new epoch make the
	// transaction abortable instead (Decision.Abortable), and the bump
	// comes from the transaction coordinator through SetProducer.
	Transactional bool

	// MaxInFlight is the most batches one partition may have in flight,
	// 1..MaxInFlightPerPartition; 0 means MaxInFlightPerPartition.
	MaxInFlight int

	// SoloAfterIdle: a partition that has had no batch acknowledged for
	// this long (counted from that batch's first send, since the leader
	// counts from its records' timestamps) sends its next batch alone, and
	// pipelines again only once it is acknowledged. Batches refused or
	// unanswered since do not restart the count: the leader may have
	// appended nothing and expired the state all the same. 0 means
	// DefaultSoloAfterIdle; negative disables. Set it at or below the
	// brokers' producer.id.expiration.ms (KIP-854).
	//
	// Why: a leader that has no state for the producer (the partition's
	// first batch under an identity, or state expired after idling)
	// accepts any sequence on brokers 2.5–4.4, so if the first of two
	// pipelined batches is lost in transit or refused (too large), the
	// second is appended anyway and the first lands after it when resent:
	// the partition's order breaks (KAFKA-15591, fixed on the broker only
	// in Kafka 4.5). One batch at a time until the leader holds state
	// rules that out. A partition's first batch under each identity is
	// always sent alone, whatever this setting.
	SoloAfterIdle time.Duration
}

// DefaultSoloAfterIdle is the default Config.SoloAfterIdle: well below the
// brokers' default producer.id.expiration.ms (1 day) and above typical gaps
// between batches of a busy partition.
const DefaultSoloAfterIdle = time.Minute

// disposition is what is to become of a batch.
type disposition uint8

const (
	// active: to be delivered; sent again whenever it is not outstanding.
	active disposition = iota + 1
	// splitting: MESSAGE_TOO_LARGE; waiting for Split.
	splitting
	// abandoned: failed to the application (delivery timeout, rejection);
	// it keeps its sequence slot until it is resolved.
	abandoned
	// acked: acknowledged while an earlier batch of the partition is not.
	acked
)

// batch is the Sequencer's record of one batch.
type batch struct {
	ref      BatchRef
	part     *partition
	records  int32
	id       BatchIdentity
	deadline time.Time
	disp     disposition
	// outstanding: a request carrying this batch has been written and its
	// answer has not been reported yet.
	outstanding bool
	// maybeWritten: some attempt ended without a definite "not appended"
	// (no response, or an error that can follow an append). Sticky: it
	// describes the records, whatever identity they carry later.
	maybeWritten bool
	// maybeInLog is maybeWritten restricted to the partition's current
	// topic incarnation: it is cleared when the partition's sequences
	// restart in a new incarnation (rewrite), whose log has not received
	// the batch (a request that named the deleted incarnation is not
	// appended to the new one, as NewIncarnation assumes); the deleted
	// log's possible copy is reported then (PossibleDuplicate). It decides
	// whether the batch's sequences can be given back (rollbackTail) and
	// how a later rewrite reports the batch.
	maybeInLog bool
	attempts   int
	// retried is the error code of the latest answer that had the batch
	// sent again (a Kafka code, kept until one ends it otherwise): a
	// batch whose delivery timeout passes while it is retried says why it
	// was not written.
	retried error
	// assignedAt is when the batch (or the batch it was split from) was
	// first assigned.
	assignedAt time.Time
	// gen is the partition's generation at the batch's latest send.
	gen uint64
	// send numbers the batch's latest send (Sequencer.sends); ackedSend
	// is the send whose acknowledgement proves the batch appended (its
	// own, or a later batch's for one resolved as appended).
	send      uint64
	ackedSend uint64
	// inc is the partition's incarnation at the batch's latest send: the
	// answer to that send is about that incarnation's log.
	inc uint64
	// n is the batch's place in assignment order (Sequencer.assigned once
	// it was assigned; kept by its splits).
	n uint64
}

func (b *batch) lastSequence() int32 { return LastSequence(b.id.BaseSequence, b.records) }

// partition is the sequence state of one partition.
type partition struct {
	tp TopicPartition
	// owner is the identity the partition's sequences belong to. It lags
	// the Sequencer's identity after a bump until the partition's in-flight
	// batches under the old identity are finished (KAFKA-12152).
	owner        ProducerID
	nextSeq      int32
	lastAckedSeq int32 // under owner; -1 if none
	// lastAckedSend is the ackedSend of the batch that set lastAckedSeq:
	// an out-of-order refusal proves a gap only for an attempt sent
	// after it (an earlier attempt may have reached the leader before
	// the acknowledged one).
	lastAckedSend uint64
	// latestAckedSeq is the last sequence of the latest batch (in sequence
	// order) acknowledged under owner; -1 if none. It is ahead of
	// lastAckedSeq while an earlier batch is unacknowledged.
	latestAckedSeq int32
	// lastAckedOffset is the highest offset acknowledged on this partition
	// under any identity; -1 if none. It is what UNKNOWN_PRODUCER_ID's log
	// start offset is compared with.
	lastAckedOffset int64
	// inflight holds the batches from the first unacknowledged one on, in
	// sequence (assignment) order.
	inflight []*batch
	// rewrite: once no request is outstanding, resequence the remaining
	// batches from 0 under the Sequencer's identity.
	rewrite bool
	// needNewIdentity: the rewrite cannot reuse the current identity; an
	// idempotent Sequencer bumps when the partition drains, a
	// transactional one waits for SetProducer.
	needNewIdentity bool
	// newPID: the bump must take a new producer ID, not epoch+1.
	newPID bool
	// cause is the error that started the pending rewrite.
	cause Cause
	// lastAppend is when the latest acknowledged batch was first assigned
	// (zero: none acknowledged): what the leader's producer-state expiry
	// counts from, at the latest.
	lastAppend time.Time
	// solo: send one batch at a time until a batch sent in the current
	// generation is acknowledged.
	solo bool
	// gen counts leader changes and idle restarts: only an acknowledgement
	// of a batch sent in the current generation ends solo mode (a late
	// acknowledgement from a former leader proves nothing about the new
	// one).
	gen uint64
	// inc counts the topic incarnations the partition has seen
	// (NewIncarnation). restart: the sequences start afresh for the
	// current incarnation once nothing is outstanding (a rewrite that
	// needs no new identity: the new partition holds no producer state).
	inc     uint64
	restart bool
	// byTopicID: the partition's last answer named its topic by ID
	// (ProduceResult.ByTopicID), so its requests cannot land in another
	// incarnation than the one they named.
	byTopicID bool
	// ackedN is the highest n of an acknowledged batch (0: none): whether
	// the open transaction had a batch acknowledged here (ackedSince).
	ackedN uint64
}

func (p *partition) reset(id ProducerID) {
	p.owner = id
	p.nextSeq = 0
	p.lastAckedSeq = -1
	p.latestAckedSeq = -1
	p.lastAckedSend = 0
}

// front returns the first batch that is not acknowledged, or nil.
func (p *partition) front() *batch {
	for _, b := range p.inflight {
		if b.disp != acked {
			return b
		}
	}
	return nil
}

func (p *partition) outstanding() int {
	n := 0
	for _, b := range p.inflight {
		if b.outstanding {
			n++
		}
	}
	return n
}

func (p *partition) hasAbandoned() bool {
	for _, b := range p.inflight {
		if b.disp == abandoned {
			return true
		}
	}
	return false
}

// expectedSequence is the sequence the leader expects next from owner if it
// has everything this partition had acknowledged.
func (p *partition) expectedSequence() int32 {
	if p.lastAckedSeq < 0 {
		return 0
	}
	return NextSequence(p.lastAckedSeq, 1)
}

// isNext reports whether b is the batch the leader must accept next: the
// first unacknowledged batch, under the partition's identity, starting right
// after the last acknowledged sequence (Java's isNextSequence).
func (p *partition) isNext(b *batch) bool {
	return p.front() == b && b.id.Producer == p.owner && b.id.BaseSequence == p.expectedSequence()
}

// popAcked drops acknowledged batches from the front and advances the last
// acknowledged sequence.
func (p *partition) popAcked(s *Sequencer) {
	i := 0
	for i < len(p.inflight) && p.inflight[i].disp == acked {
		b := p.inflight[i]
		if b.id.Producer == p.owner {
			p.lastAckedSeq = b.lastSequence()
			p.lastAckedSend = b.ackedSend
		}
		delete(s.batches, b.ref)
		i++
	}
	p.inflight = append(p.inflight[:0], p.inflight[i:]...)
}

// Sequencer is the pure sequence and recovery state of one idempotent or
// transactional producer: one producer identity, and per partition the next
// sequence, the last acknowledged sequence and offset, and up to MaxInFlight
// batches in flight. It does no I/O, starts no goroutines and reads no clock;
// time comes in as deadlines and Expire's now. It is not safe for concurrent
// use.
//
// The I/O layer drives it:
//
//	SetProducer(pid)                  after InitProducerId
//	LeaderChanged(tp)                 when metadata shows a new leader or leader epoch for tp
//	d := NewIncarnation(tp)           when metadata shows tp's topic deleted and created again
//	ref, id, err := AssignAt(tp, n, now, dl) when it puts a new batch of n records into a request
//	                                  (err: not now); stamp id into the batch header
//	ref, id, ok := NextResend(tp)     before building a request: a retry to send first;
//	Sent(ref)                         when that retry is written to a connection
//	d := Complete(ref, result)        for every batch of every request, exactly once per send
//	d := Expire(now)                  periodically, for delivery timeouts (it also advances the clock)
//	d := Abandon(ref, err)            to give up on a batch it cannot send (e.g. cannot encode)
//	Split(ref, counts)                when a Decision asks for a split
//
// Every step returns a Decision: acknowledgements, outcomes for the
// application, and what to do (split, bump, ask for a producer ID, abort, stop).
type Sequencer struct {
	cfg        Config
	producer   ProducerID
	awaitingID bool
	fatal      error
	failing    error
	nextRef    BatchRef
	parts      map[TopicPartition]*partition
	order      []*partition // creation order, for deterministic decisions
	batches    map[BatchRef]*batch
	bumps      int
	sends      uint64    // sends so far (AssignAt and Sent): numbers them
	clock      time.Time // latest time given (AssignAt, Expire)
	assigned   uint64    // batches assigned so far
	// forgot holds the sequences of partitions Forget dropped, until
	// Revive or until more than maxForgotten (default
	// MaxForgottenPartitions) are kept; forgotOrder is their order, oldest
	// first (with entries already removed, compacted by trimForgotten).
	forgot       map[TopicPartition]forgotten
	forgotOrder  []TopicPartition
	maxForgotten int
}

// NewSequencer returns a Sequencer without a producer identity; call
// SetProducer with the InitProducerId answer before assigning batches.
func NewSequencer(cfg Config) (*Sequencer, error) {
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = MaxInFlightPerPartition
	}
	if cfg.SoloAfterIdle == 0 {
		cfg.SoloAfterIdle = DefaultSoloAfterIdle
	}
	if cfg.MaxInFlight < 1 || cfg.MaxInFlight > MaxInFlightPerPartition {
		return nil, invalidOption("Config.MaxInFlight", fmt.Sprintf("%d is not in [1, %d] (brokers deduplicate only the last %d batches)",
			cfg.MaxInFlight, MaxInFlightPerPartition, MaxInFlightPerPartition))
	}
	return &Sequencer{
		cfg:      cfg,
		producer: NoProducerID,
		parts:    make(map[TopicPartition]*partition),
		batches:  make(map[BatchRef]*batch),
	}, nil
}

// Producer returns the current producer identity (NoProducerID while none).
func (s *Sequencer) Producer() ProducerID { return s.producer }

// Bumps returns how many epoch bumps (or new-producer-ID requests) the
// Sequencer has made on its own. Transactional bumps come from the
// coordinator and are not counted.
func (s *Sequencer) Bumps() int { return s.bumps }

// Fatal returns the fatal error, if the producer hit one.
func (s *Sequencer) Fatal() error { return s.fatal }

func (s *Sequencer) partition(tp TopicPartition) *partition {
	p := s.parts[tp]
	if p == nil {
		delete(s.forgot, tp) // used again without Revive: starts at 0
		p = &partition{tp: tp, owner: s.producer, lastAckedSeq: -1, latestAckedSeq: -1, lastAckedOffset: -1}
		s.parts[tp] = p
		s.order = append(s.order, p)
	}
	return p
}

// Assign is AssignAt at the latest time the Sequencer was given (by AssignAt
// or Expire).
func (s *Sequencer) Assign(tp TopicPartition, records int32, deadline time.Time) (BatchRef, BatchIdentity, error) {
	return s.AssignAt(tp, records, s.clock, deadline)
}

// AssignAt gives a new batch of records records for tp its identity and
// records it as in flight and outstanding: call it when the batch is put into
// a Produce request, and stamp the returned identity into the batch header.
// now is the current time; deadline is the batch's delivery deadline (zero:
// none), after which Expire fails it.
//
// Sequences are assigned at send time, not when records are buffered, so a
// batch that never leaves the client consumes no sequence. An error means
// "not now" (see the Err variables); the batch stays with the caller.
//
// The in-flight limit is MaxInFlight, except that it is 1 while the
// partition has nothing acknowledged under the current identity, and after
// an idle period (Config.SoloAfterIdle) or a leader change (LeaderChanged)
// until the next acknowledgement: whenever the leader may hold no state for
// the producer.
func (s *Sequencer) AssignAt(tp TopicPartition, records int32, now, deadline time.Time) (BatchRef, BatchIdentity, error) {
	if now.After(s.clock) {
		s.clock = now
	}
	if records <= 0 {
		return 0, BatchIdentity{}, invalidArgument("Sequencer.AssignAt", "records", fmt.Sprintf("%d is not positive", records))
	}
	if s.fatal != nil {
		return 0, BatchIdentity{}, fmt.Errorf("%w: %w", ErrProducerFatal, s.fatal)
	}
	if s.failing != nil {
		return 0, BatchIdentity{}, fmt.Errorf("%w: %w", ErrProducerFailing, s.failing)
	}
	if !s.producer.Valid() {
		return 0, BatchIdentity{}, ErrNoProducerID
	}
	p := s.partition(tp)
	if p.owner != s.producer {
		if len(p.inflight) > 0 {
			return 0, BatchIdentity{}, ErrPartitionRecovering
		}
		p.reset(s.producer)
	}
	if p.rewrite {
		return 0, BatchIdentity{}, ErrPartitionRecovering
	}
	for _, b := range p.inflight {
		if b.disp != acked && !(b.disp == active && b.outstanding) {
			return 0, BatchIdentity{}, ErrPartitionRecovering
		}
	}
	if len(p.inflight) >= s.cfg.MaxInFlight || (len(p.inflight) > 0 && (p.solo || p.lastAckedSeq < 0)) {
		return 0, BatchIdentity{}, ErrInFlightLimit
	}
	if len(p.inflight) == 0 && s.cfg.SoloAfterIdle > 0 && !p.lastAppend.IsZero() && now.Sub(p.lastAppend) >= s.cfg.SoloAfterIdle {
		p.solo = true
		p.gen++
	}
	s.nextRef++
	s.sends++
	b := &batch{
		send:        s.sends,
		ref:         s.nextRef,
		part:        p,
		records:     records,
		id:          BatchIdentity{Producer: s.producer, BaseSequence: p.nextSeq},
		deadline:    deadline,
		disp:        active,
		outstanding: true,
		attempts:    1,
		assignedAt:  now,
		gen:         p.gen,
		inc:         p.inc,
		n:           s.assigned + 1,
	}
	p.nextSeq = NextSequence(p.nextSeq, records)
	p.inflight = append(p.inflight, b)
	s.batches[b.ref] = b
	s.assigned++
	return b.ref, b.id, nil
}

// LeaderChanged tells the Sequencer that tp's leader or leader epoch changed
// (call it when metadata shows it, before sending to the new leader): tp then
// sends one batch at a time until the new leader acknowledges one. After an
// unclean election the new leader may hold no state for this producer and
// accept any sequence, so pipelined batches could overtake a lost or refused
// one.
func (s *Sequencer) LeaderChanged(tp TopicPartition) {
	p := s.partition(tp)
	p.solo = true
	p.gen++
}

// NextResend returns the retry that tp must send before anything else, with
// the identity to stamp into it (it differs from the last send after a
// rewrite). Only the partition's first unacknowledged batch is ever resent,
// and only when no request for it is outstanding, so retries go out one at a
// time in sequence order (as Java's producer does): a retry never overtakes an
// earlier batch, and an OUT_OF_ORDER_SEQUENCE_NUMBER on the first batch means
// the leader really lacks what it acknowledged. Call Sent when the retry is
// written to a connection.
func (s *Sequencer) NextResend(tp TopicPartition) (BatchRef, BatchIdentity, bool) {
	p := s.parts[tp]
	if p == nil || s.fatal != nil || s.failing != nil || p.rewrite {
		return 0, BatchIdentity{}, false
	}
	b := p.front()
	if b == nil || b.disp != active || b.outstanding {
		return 0, BatchIdentity{}, false
	}
	return b.ref, b.id, true
}

// Sent records that the retry ref (from NextResend) was written to a
// connection.
func (s *Sequencer) Sent(ref BatchRef) error {
	b := s.batches[ref]
	if b == nil {
		return invalidArgument("Sequencer.Sent", "ref", fmt.Sprintf("%d is not a batch of the Sequencer", ref))
	}
	if rr, _, ok := s.NextResend(b.part.tp); !ok || rr != ref {
		return invalidArgument("Sequencer.Sent", "ref", fmt.Sprintf("%d is not %v's next resend", ref, b.part.tp))
	}
	b.outstanding = true
	b.attempts++
	s.sends++
	b.send = s.sends
	b.gen = b.part.gen
	b.inc = b.part.inc
	return nil
}

// Split replaces a batch the broker refused as too large (the Decision listed
// it in Split) by len(counts) batches of counts[i] records, in order, which
// take over its sequence range under the same identity: the refused batch was
// not appended, so its sequences are free. The new batches are sent as
// retries (NextResend).
func (s *Sequencer) Split(ref BatchRef, counts []int32) ([]BatchRef, error) {
	b := s.batches[ref]
	if b == nil || b.disp != splitting {
		return nil, invalidArgument("Sequencer.Split", "ref", fmt.Sprintf("%d is not a batch waiting to be split", ref))
	}
	var sum int64
	for _, c := range counts {
		if c <= 0 {
			return nil, invalidArgument("Sequencer.Split", "counts", fmt.Sprintf("%v holds %d, not positive", counts, c))
		}
		sum += int64(c)
	}
	if len(counts) < 2 || sum != int64(b.records) {
		return nil, invalidArgument("Sequencer.Split", "counts", fmt.Sprintf("%v is not a split of %d records into two batches or more", counts, b.records))
	}
	p := b.part
	at := -1
	for i, x := range p.inflight {
		if x == b {
			at = i
		}
	}
	parts := make([]*batch, len(counts))
	refs := make([]BatchRef, len(counts))
	seq := b.id.BaseSequence
	for i, c := range counts {
		s.nextRef++
		parts[i] = &batch{
			ref:        s.nextRef,
			part:       p,
			records:    c,
			id:         BatchIdentity{Producer: b.id.Producer, BaseSequence: seq},
			deadline:   b.deadline,
			disp:       active,
			attempts:   b.attempts,
			assignedAt: b.assignedAt,
			inc:        b.inc,
			n:          b.n,
		}
		seq = NextSequence(seq, c)
		s.batches[parts[i].ref] = parts[i]
		refs[i] = parts[i].ref
	}
	rest := append(parts, p.inflight[at+1:]...)
	p.inflight = append(p.inflight[:at], rest...)
	delete(s.batches, ref)
	return refs, nil
}

// Identity returns the current identity of a batch still tracked.
func (s *Sequencer) Identity(ref BatchRef) (BatchIdentity, bool) {
	b := s.batches[ref]
	if b == nil {
		return BatchIdentity{}, false
	}
	return b.id, true
}

// Outstanding returns how many batches have a request on the wire.
func (s *Sequencer) Outstanding() int {
	n := 0
	for _, p := range s.order {
		n += p.outstanding()
	}
	return n
}

// Pending returns how many batches are still to be delivered (in flight, to
// be resent, or waiting for a split). Abandoned and acknowledged batches are
// not counted.
func (s *Sequencer) Pending() int {
	n := 0
	for _, p := range s.order {
		for _, b := range p.inflight {
			if b.disp == active || b.disp == splitting {
				n++
			}
		}
	}
	return n
}

// Drained reports whether no batch is outstanding or pending: what a
// transactional producer waits for before EndTxn.
func (s *Sequencer) Drained() bool { return s.Outstanding() == 0 && s.Pending() == 0 }

// NeedsBump reports whether continuing needs a new producer identity: some
// partition has a batch that was failed while holding sequences that cannot
// be given back, or a pending rewrite. A transactional producer bumps the
// epoch after an abort when this is true.
func (s *Sequencer) NeedsBump() bool {
	for _, p := range s.order {
		if p.restart {
			// Its sequences start afresh in a new topic incarnation,
			// which holds no state for the producer.
			if p.needNewIdentity {
				return true
			}
			continue
		}
		if p.rewrite || p.hasAbandoned() {
			return true
		}
	}
	return false
}

// PartitionState is a snapshot of one partition's sequence state.
type PartitionState struct {
	Owner             ProducerID // identity the partition's sequences belong to
	NextSequence      int32
	LastAckedSequence int32 // -1: none under Owner
	LastAckedOffset   int64 // -1: none
	InFlight          []BatchIdentity
	Recovering        bool // a rewrite is pending, or Owner is older than the producer's identity
}

// Partition returns a snapshot of tp's sequence state.
func (s *Sequencer) Partition(tp TopicPartition) (PartitionState, bool) {
	p := s.parts[tp]
	if p == nil {
		return PartitionState{}, false
	}
	st := PartitionState{
		Owner:             p.owner,
		NextSequence:      p.nextSeq,
		LastAckedSequence: p.lastAckedSeq,
		LastAckedOffset:   p.lastAckedOffset,
		Recovering:        p.rewrite || (p.owner != s.producer && len(p.inflight) > 0),
	}
	for _, b := range p.inflight {
		if b.disp != acked {
			st.InFlight = append(st.InFlight, b.id)
		}
	}
	return st, true
}

// MaxForgottenPartitions bounds the partitions whose sequences a Sequencer
// keeps after Forget; beyond it the oldest forgotten are dropped for good.
const MaxForgottenPartitions = 1 << 16

// forgotten is what Forget keeps of a partition: enough to continue its
// sequences if its topic turns out not to be gone (Revive with the same
// topic ID), about a quarter of a partition's full state.
type forgotten struct {
	topicID         [16]byte
	owner           ProducerID
	nextSeq         int32
	lastAckedSeq    int32
	latestAckedSeq  int32
	lastAckedOffset int64
	lastAckedSend   uint64
	lastAppend      time.Time
	inc             uint64
	byTopicID       bool
}

// Forget drops the sequence state of the partitions tps of the topic whose
// ID is topicID, all of them or none: it reports false, and forgets
// nothing, while any of them has a batch in flight (on the wire, to be
// resent or failed holding sequences) or a rewrite or new identity pending.
// It is for partitions whose topic metadata says is gone. Their sequences
// are still remembered, compactly and up to MaxForgottenPartitions (the
// oldest dropped first): if the topic is used again, Revive with its topic
// ID continues them when the ID is the same (the topic was not gone after
// all: starting again at sequence 0 would be refused as out of order and
// read as a possible gap) and drops them when it differs (a new
// incarnation holds no producer state: it starts at 0). A forgotten
// partition assigned a batch without Revive starts at 0.
func (s *Sequencer) Forget(topicID [16]byte, tps ...TopicPartition) bool {
	for _, tp := range tps {
		if p := s.parts[tp]; p != nil && (len(p.inflight) > 0 || p.rewrite || p.needNewIdentity || p.newPID) {
			return false
		}
	}
	gone := make(map[*partition]bool, len(tps))
	for _, tp := range tps {
		p := s.parts[tp]
		if p == nil {
			continue
		}
		delete(s.parts, tp)
		gone[p] = true
		if s.forgot == nil {
			s.forgot = make(map[TopicPartition]forgotten)
		}
		if _, again := s.forgot[tp]; !again {
			s.forgotOrder = append(s.forgotOrder, tp)
		}
		s.forgot[tp] = forgotten{topicID: topicID, owner: p.owner, nextSeq: p.nextSeq, lastAckedSeq: p.lastAckedSeq,
			latestAckedSeq: p.latestAckedSeq, lastAckedOffset: p.lastAckedOffset, lastAckedSend: p.lastAckedSend,
			lastAppend: p.lastAppend, inc: p.inc, byTopicID: p.byTopicID}
	}
	if len(gone) > 0 {
		// One pass for all of them: a topic's partitions go together.
		s.order = slices.DeleteFunc(s.order, func(x *partition) bool { return gone[x] })
	}
	s.trimForgotten()
	return true
}

// trimForgotten drops the oldest forgotten partitions beyond the bound, and
// compacts the order list of entries Revive or partition already removed.
func (s *Sequencer) trimForgotten() {
	limit := s.maxForgotten
	if limit <= 0 {
		limit = MaxForgottenPartitions
	}
	for len(s.forgot) > limit && len(s.forgotOrder) > 0 {
		delete(s.forgot, s.forgotOrder[0])
		s.forgotOrder = s.forgotOrder[1:]
	}
	if len(s.forgotOrder) > 2*len(s.forgot)+64 {
		kept := s.forgotOrder[:0]
		for _, tp := range s.forgotOrder {
			if _, ok := s.forgot[tp]; ok {
				kept = append(kept, tp)
			}
		}
		s.forgotOrder = slices.Clip(kept)
	}
}

// Revive tells the Sequencer that tp is in use again, its topic with ID
// topicID. If tp was forgotten under the same topic ID, its sequences
// continue where they were; under another ID (the topic was recreated) they
// are dropped, and the partition starts at sequence 0. It does nothing for
// a partition that was not forgotten, or a zero topicID (not known).
func (s *Sequencer) Revive(tp TopicPartition, topicID [16]byte) {
	f, ok := s.forgot[tp]
	if !ok || topicID == ([16]byte{}) {
		return
	}
	delete(s.forgot, tp)
	if f.topicID != topicID || s.parts[tp] != nil {
		return
	}
	p := s.partition(tp)
	p.owner, p.nextSeq, p.lastAckedSeq, p.latestAckedSeq = f.owner, f.nextSeq, f.lastAckedSeq, f.latestAckedSeq
	p.lastAckedOffset, p.lastAckedSend, p.lastAppend, p.inc, p.byTopicID = f.lastAckedOffset, f.lastAckedSend, f.lastAppend, f.inc, f.byTopicID
}

// AwaitingProducerID reports whether the Sequencer asked for a new producer
// ID (Decision.NeedProducerID) and SetProducer has not been called yet.
func (s *Sequencer) AwaitingProducerID() bool { return s.awaitingID }
