package producer

// recovery_outcome.go: what a Sequencer step reports. Outcomes are for the
// application (attach them to the records' results or an event stream);
// the other Decision fields are instructions for the I/O layer.

import (
	"fmt"
)

// Cause is why a recovery happened: the partition and the error that started
// it (a *kerr.Error for a broker error code, ErrDeliveryTimeout, or another
// producer error).
type Cause struct {
	TP  TopicPartition
	Err error
}

func (c Cause) String() string { return fmt.Sprintf("%v on %v", c.Err, c.TP) }

// Outcome is a KIP-360 outcome the application must see. Every batch touched
// by a recovery gets exactly one per recovery: ResequencedNoLoss,
// PossibleDuplicate or Failed; a partition whose acknowledged writes are gone
// or may be gone gets a ProvenGap or PossibleGap. The concrete types are
// listed in the sealed set below.
type Outcome interface {
	// Partition is the partition the outcome is about.
	Partition() TopicPartition
	isOutcome()
}

// ResequencedNoLoss: the batch was certainly not appended under its old
// identity (every attempt got a definite refusal), and is sent again under a
// new identity. Nothing is lost and nothing can be duplicated.
type ResequencedNoLoss struct {
	Batch    BatchRef
	TP       TopicPartition
	Records  int32
	From, To BatchIdentity
	Cause    Cause
}

// PossibleDuplicate: an earlier attempt of the batch ended without a definite
// answer (no response, or an error that can follow an append), and the batch
// is sent again under a new identity that the broker cannot match against the
// old one. Its records may appear twice in the log: once under From (if that
// attempt was appended) and once under To.
//
// A non-idempotent producer (DisableIdempotence) reports one for a batch
// acknowledged after an earlier attempt got no definite answer: From and
// To are then the zero identity of NoProducerID with BaseSequence -1, and
// Cause.Err is that attempt's error.
//
// When Cause.Err is errors.ErrTopicIDChanged, the attempt without a definite
// answer was sent to a topic incarnation that has since been deleted and
// the batch is sent to the new one (Sequencer.NewIncarnation): the topic
// now holds it at most once, since the deleted log is gone, but a consumer
// that read the deleted incarnation before the deletion may have seen it
// there too. For anything downstream of such a consumer it may be
// delivered twice.
type PossibleDuplicate struct {
	Batch    BatchRef
	TP       TopicPartition
	Records  int32
	From, To BatchIdentity
	Cause    Cause
}

// ProvenGap: the partition leader refused the next expected sequence
// (OUT_OF_ORDER_SEQUENCE_NUMBER on the first unacknowledged batch) although it
// had acknowledged everything before it under the same identity: its producer
// state no longer holds the acknowledged writes, so at least the write
// acknowledged at LastAckedOffset (sequence LastAckedSequence of Producer) is
// gone, typically truncated by an unclean leader election. (A topic deleted
// and created again is not a gap: once metadata names the new incarnation,
// the partition's sequences start afresh there, Sequencer.NewIncarnation.
// Only if requests name no topic IDs, so that a request built for the old
// incarnation can reach the new one, does the new log's refusal show up
// here.) The sequence state cannot tell how many earlier
// acknowledged writes went with it: CheckAckedWrites in the same Decision asks
// the I/O layer to run the AckLedger check, which reports exact offsets
// (AckedWritesLost).
type ProvenGap struct {
	TP       TopicPartition
	Producer ProducerID
	// LastAckedSequence is the last sequence of the latest batch (in
	// sequence order) acknowledged under Producer: it can be beyond
	// RejectedSequence when that batch was acknowledged before an earlier
	// one's retry, whose refusal shows it is gone.
	LastAckedSequence int32
	LastAckedOffset   int64
	// RejectedSequence is the base sequence the leader refused.
	RejectedSequence int32
	Cause            Cause
}

// PossibleGap: the leader lost the producer's state and nothing proves that
// only retention removed it (UNKNOWN_PRODUCER_ID with a log start offset at
// or below the last acknowledged offset, or unknown; or
// OUT_OF_ORDER_SEQUENCE_NUMBER with nothing acknowledged under the identity).
// Acknowledged writes up to LastAckedOffset may be gone; the AckLedger check
// requested in the same Decision settles it.
type PossibleGap struct {
	TP                TopicPartition
	Producer          ProducerID
	LastAckedSequence int32 // -1: nothing acknowledged under Producer
	LastAckedOffset   int64
	LogStartOffset    int64 // from the response; -1 unknown
	Cause             Cause
}

// Failed: the batch will not be delivered. Final for the batch.
//
// MaybeWritten tells whether it may nevertheless be in the log: some attempt
// ended without a definite answer (for a delivery timeout, typically a
// request still on the wire). When false, the broker certainly did not append
// it.
type Failed struct {
	Batch        BatchRef
	TP           TopicPartition
	Records      int32
	Identity     BatchIdentity
	Err          error
	MaybeWritten bool
}

func (o ResequencedNoLoss) Partition() TopicPartition { return o.TP }
func (o PossibleDuplicate) Partition() TopicPartition { return o.TP }
func (o ProvenGap) Partition() TopicPartition         { return o.TP }
func (o PossibleGap) Partition() TopicPartition       { return o.TP }
func (o Failed) Partition() TopicPartition            { return o.TP }

func (ResequencedNoLoss) isOutcome() {}
func (PossibleDuplicate) isOutcome() {}
func (ProvenGap) isOutcome()         {}
func (PossibleGap) isOutcome()       {}
func (Failed) isOutcome()            {}

// Ack is a batch the leader acknowledged. Final for the batch.
type Ack struct {
	Batch    BatchRef
	TP       TopicPartition
	Records  int32
	Identity BatchIdentity
	// BaseOffset is the offset of the first record; -1 when the broker
	// answered DUPLICATE_SEQUENCE_NUMBER (brokers before 1.1), which says
	// the batch is in the log but not where.
	BaseOffset     int64
	LogStartOffset int64
	// AfterFailure: the batch had already been reported Failed (its
	// delivery deadline passed while a request was on the wire) and the
	// late answer says it was appended after all.
	AfterFailure bool
}

// EpochBump is an epoch bump the idempotent Sequencer made on its own (a
// transactional one never bumps itself; its coordinator does).
type EpochBump struct {
	From ProducerID
	// To is the new identity, or NoProducerID when NewProducerID is set.
	To ProducerID
	// NewProducerID: the epoch cannot simply be incremented (it was
	// math.MaxInt16, or the broker refused the producer ID); the I/O layer
	// must send InitProducerId (Decision.NeedProducerID) and call
	// SetProducer with the answer.
	NewProducerID bool
	Cause         Cause
}

// AbortableError tells a transactional producer that the current transaction
// cannot commit and must be aborted (TxnState.HandleProduce does this).
type AbortableError struct {
	Err error
	// BumpEpoch: after the abort, the producer must take a new epoch
	// (InitProducerId with its current ID and epoch, KIP-360) before the
	// next transaction: sequences were disturbed.
	BumpEpoch bool
	// SkipEndTxn: the coordinator no longer maps the transactional ID to
	// this producer ID (INVALID_PRODUCER_ID_MAPPING); EndTxn would be
	// refused, so the abort goes straight to InitProducerId.
	SkipEndTxn bool
}

// Decision is the result of one Sequencer step.
type Decision struct {
	// Acks are batches now acknowledged.
	Acks []Ack

	// Outcomes are for the application, in the order they happened.
	Outcomes []Outcome

	// Split lists batches the broker refused as too large: re-encode each
	// as smaller batches and call Split.
	Split []BatchRef

	// Bump is set when this step bumped the epoch (idempotent only). At
	// most one per step, and at most one per incident: batches under an
	// older identity that fail later join the bump that already happened.
	Bump *EpochBump

	// NeedProducerID: send InitProducerId for a brand-new producer ID
	// (idempotent: transactionalId null, producer ID and epoch -1) and
	// call SetProducer with the answer.
	NeedProducerID bool

	// Abortable is set for a transactional producer when the current
	// transaction must abort.
	Abortable *AbortableError

	// Fatal is set when the producer cannot continue.
	Fatal error

	// CheckAckedWrites lists partitions whose acknowledged writes may be
	// gone: run an AckLedger check for them now (AckLedger.Recheck).
	CheckAckedWrites []TopicPartition
}

// Empty reports whether d holds nothing.
func (d *Decision) Empty() bool {
	return len(d.Acks) == 0 && len(d.Outcomes) == 0 && len(d.Split) == 0 && d.Bump == nil &&
		!d.NeedProducerID && d.Abortable == nil && d.Fatal == nil && len(d.CheckAckedWrites) == 0
}

// Merge appends o's contents to d (for callers that combine steps).
func (d *Decision) Merge(o Decision) {
	d.Acks = append(d.Acks, o.Acks...)
	d.Outcomes = append(d.Outcomes, o.Outcomes...)
	d.Split = append(d.Split, o.Split...)
	if d.Bump == nil {
		d.Bump = o.Bump
	}
	d.NeedProducerID = d.NeedProducerID || o.NeedProducerID
	if o.Abortable != nil {
		d.abortable(o.Abortable.Err, o.Abortable.BumpEpoch, o.Abortable.SkipEndTxn)
	}
	if d.Fatal == nil {
		d.Fatal = o.Fatal
	}
	for _, tp := range o.CheckAckedWrites {
		d.checkAcked(tp)
	}
}

func (d *Decision) abortable(err error, bump, skipEndTxn bool) {
	if d.Abortable == nil {
		d.Abortable = &AbortableError{Err: err}
	}
	d.Abortable.BumpEpoch = d.Abortable.BumpEpoch || bump
	d.Abortable.SkipEndTxn = d.Abortable.SkipEndTxn || skipEndTxn
}

func (d *Decision) checkAcked(tp TopicPartition) {
	for _, x := range d.CheckAckedWrites {
		if x == tp {
			return
		}
	}
	d.CheckAckedWrites = append(d.CheckAckedWrites, tp)
}
