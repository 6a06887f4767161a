package producer

// txnstate.go: the transactional producer's state machine (Java's
// TransactionManager states, plus an explicit epoch-bump state), driving a
// transactional Sequencer. Pure: it returns the coordinator requests to send
// and consumes their answers.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kepoch/kepoch/errors"
)

// TxnStateKind is a transactional producer state.
type TxnStateKind uint8

const (
	// TxnUninitialized: InitTransactions has not been called.
	TxnUninitialized TxnStateKind = iota
	// TxnInitializing: InitProducerId (transactional ID, -1, -1) in progress.
	TxnInitializing
	// TxnReady: no transaction open; Begin may start one.
	TxnReady
	// TxnInTransaction: a transaction is open; produce, add partitions.
	TxnInTransaction
	// TxnCommitting: waiting for in-flight batches, then EndTxn(commit).
	TxnCommitting
	// TxnAborting: waiting for in-flight batches, then EndTxn(abort).
	TxnAborting
	// TxnBumpingEpoch: after an abort that disturbed sequences (or lost an
	// EndTxn answer, or INVALID_PRODUCER_ID_MAPPING), InitProducerId with
	// the current producer ID and epoch (KIP-360) for a new epoch.
	TxnBumpingEpoch
	// TxnAbortableError: the transaction cannot commit; Abort is the only
	// way on.
	TxnAbortableError
	// TxnFatalError: the producer is fenced or not authorized; it cannot
	// continue.
	TxnFatalError
)

var txnStateNames = [...]string{"Uninitialized", "Initializing", "Ready", "InTransaction", "Committing",
	"Aborting", "BumpingEpoch", "AbortableError", "FatalError"}

func (k TxnStateKind) String() string {
	if int(k) < len(txnStateNames) {
		return txnStateNames[k]
	}
	return fmt.Sprintf("TxnStateKind(%d)", k)
}

// txnAllowedFrom lists, for each target state, the states it may be entered
// from (Java's TransactionManager.State.isTransitionValid, with Java's
// "INITIALIZING after ABORTING" bump named BumpingEpoch).
var txnAllowedFrom = map[TxnStateKind][]TxnStateKind{
	TxnInitializing:   {TxnUninitialized},
	TxnReady:          {TxnInitializing, TxnBumpingEpoch, TxnCommitting, TxnAborting},
	TxnInTransaction:  {TxnReady},
	TxnCommitting:     {TxnInTransaction},
	TxnAborting:       {TxnInTransaction, TxnAbortableError},
	TxnBumpingEpoch:   {TxnAborting, TxnCommitting},
	TxnAbortableError: {TxnInTransaction, TxnCommitting, TxnAbortableError, TxnInitializing, TxnBumpingEpoch},
}

// Errors of the transactional state machine.
var (
	// ErrTxnState: the call is not allowed in the current state.
	ErrTxnState = errors.New("kepoch: operation not allowed in this transaction state")
	// ErrAbortRequired: the transaction hit an abortable error; it cannot
	// commit. Errors wrapping it also wrap the cause.
	ErrAbortRequired = errors.New("kepoch: transaction must be aborted")
	// ErrTransactionAborted: pending batches failed because the
	// application aborted the transaction.
	ErrTransactionAborted = errors.New("kepoch: transaction aborted")
)

// TxnRequest is a coordinator request the state machine wants sent:
// *InitProducerIDRequest, *AddPartitionsRequest or *EndTxnRequest.
type TxnRequest interface{ isTxnRequest() }

// InitProducerIDRequest: InitProducerId for TransactionalID. Producer is
// NoProducerID for a new producer (initialization) and the current identity
// for a KIP-360 epoch bump (InitProducerId v3+); a lost answer is retried
// with the same identity, which the coordinator answers with the epoch it
// already gave.
type InitProducerIDRequest struct {
	TransactionalID string
	Producer        ProducerID
}

// AddPartitionsRequest: AddPartitionsToTxn for Partitions.
type AddPartitionsRequest struct {
	TransactionalID string
	Producer        ProducerID
	Partitions      []TopicPartition
}

// EndTxnRequest: EndTxn with Commit true (commit) or false (abort).
type EndTxnRequest struct {
	TransactionalID string
	Producer        ProducerID
	Commit          bool
}

func (*InitProducerIDRequest) isTxnRequest() {}
func (*AddPartitionsRequest) isTxnRequest()  {}
func (*EndTxnRequest) isTxnRequest()         {}

// TxnStep is what the I/O layer must do after a TxnState call.
type TxnStep struct {
	// Send is the coordinator request to send now (nil: none). At most one
	// coordinator request is outstanding at a time.
	Send TxnRequest
	// FindCoordinator: rediscover the transaction coordinator before
	// sending Send.
	FindCoordinator bool
	// WaitDrain: EndTxn waits until the Sequencer is Drained (no batch on
	// the wire or pending); call Poll when that changes. (Records buffered
	// outside the Sequencer are the I/O layer's: see Commit.)
	WaitDrain bool
	// Decision carries Sequencer outcomes caused by this step (batches
	// failed by an abort, rewrites after a new identity).
	Decision Decision
	// Done: the operation in progress (InitTransactions, Commit, Abort)
	// finished; Err is its result.
	Done bool
	Err  error
}

// TxnConfig configures a TxnState.
type TxnConfig struct {
	TransactionalID string
	// CoordinatorBumps: the coordinator supports InitProducerId v3+
	// (KIP-360), so a bump sends the current producer ID and epoch. Without
	// it the bump re-initializes with NoProducerID, which the coordinator
	// of this transactional ID also answers with the same producer ID and
	// the next epoch.
	CoordinatorBumps bool
	// ImplicitAddPartitions: transactions V2 (KIP-890, Produce v12+): the
	// broker adds partitions to the transaction itself; no
	// AddPartitionsToTxn is sent.
	ImplicitAddPartitions bool
}

// TxnState is the state machine of a transactional producer. It owns the
// transactional Sequencer it drives (its Config.Transactional must be true)
// and is not safe for concurrent use.
//
// The I/O layer's loop:
//
//	step := InitTransactions()           send step.Send, then Handle… its answer
//	Begin()
//	AddPartition(tp) / CanProduce(tp)    before producing to tp (TV1: AddPartitionsToTxn)
//	HandleProduce(seq.Complete(…))       for every Produce decision
//	NewIncarnation(tp)                   instead of seq.NewIncarnation(tp)
//	HandleOffsets(…)                     for every AddOffsetsToTxn/TxnOffsetCommit attempt
//	Commit() / Abort(outstandingUnsent)  then Poll() whenever the Sequencer drains
//	HandleEndTxn(…), HandleInitProducerID(…)
type TxnState struct {
	cfg   TxnConfig
	seq   *Sequencer
	state TxnStateKind
	err   error // the abortable or fatal error

	bumpRequired    bool // the next abort must end with a new epoch
	skipEndTxn      bool // INVALID_PRODUCER_ID_MAPPING: abort via InitProducerId only
	endTxnUncertain bool // an EndTxn attempt got no answer (KAFKA-17754)
	// endTxnApplied: an EndTxn attempt of the open transaction was
	// answered with a code the coordinator may give after appending the
	// transaction's end to its log (answeredAfterAppend): the transaction
	// may be ending as that attempt asked, until an answer settles it. An
	// answer came, so no copy of the attempt is still on its way: unlike
	// endTxnUncertain, it asks for no epoch bump.
	endTxnApplied bool
	// offsetsUncertain: an AddOffsetsToTxn or TxnOffsetCommit of the open
	// transaction may have been applied without an answer, so a copy of it
	// may still arrive: the transaction ends with a new epoch, whatever
	// its outcome, so that the copy cannot join the next one.
	offsetsUncertain bool
	// committed: EndTxn(commit) was answered NONE and the epoch bump that
	// follows it (BumpingEpoch) is under way: the transaction committed,
	// whatever the bump's answer, and the commit reports so.
	committed bool
	// stoppedCommit: Stop ended a commit before any EndTxn(commit) of it
	// could have reached the coordinator: it did not commit.
	stoppedCommit bool

	// started: the coordinator knows the open transaction (an
	// AddPartitionsToTxn succeeded). maybeStarted: an AddPartitionsToTxn
	// got no answer, so it may. With implicit adds (transactions V2) a
	// batch sent since Begin (assignedAtBegin) may have started it. EndTxn
	// for a transaction that never started is refused
	// (INVALID_TXN_STATE, state Empty), except an abort under V2.
	started         bool
	maybeStarted    bool
	assignedAtBegin uint64

	added       map[TopicPartition]bool // partitions in the open transaction
	pendingAdd  []TopicPartition        // to add, not yet sent
	outstanding TxnRequest              // coordinator request on the wire
	resend      TxnRequest              // request to send again
	findCoord   bool
}

// NewTxnState returns a TxnState in TxnUninitialized driving seq.
func NewTxnState(cfg TxnConfig, seq *Sequencer) (*TxnState, error) {
	if cfg.TransactionalID == "" {
		return nil, invalidOption("TxnConfig.TransactionalID", `"" is empty`)
	}
	if seq == nil {
		return nil, invalidArgument("NewTxnState", "seq", "nil")
	}
	if !seq.cfg.Transactional {
		return nil, invalidArgument("NewTxnState", "seq", "a Sequencer whose Config is not Transactional")
	}
	return &TxnState{cfg: cfg, seq: seq, added: make(map[TopicPartition]bool)}, nil
}

// State returns the current state.
func (t *TxnState) State() TxnStateKind { return t.state }

// Err returns the abortable or fatal error that put the producer in its
// current error state (nil otherwise).
func (t *TxnState) Err() error { return t.err }

// Committed reports whether the epoch bump under way follows an EndTxn(commit)
// answered NONE: the transaction committed, only the bump is left.
func (t *TxnState) Committed() bool { return t.committed && t.state == TxnBumpingEpoch }

// StoppedCommit reports whether Stop ended a commit that no EndTxn(commit)
// of could have reached the coordinator: the transaction did not commit
// (until the next Begin).
func (t *TxnState) StoppedCommit() bool { return t.stoppedCommit }

// Stop tells the TxnState that the I/O layer stopped for good (the producer
// closed): no request is sent or answered any more. outstandingUnsent says
// that the request the last step handed out (Send) never left the I/O
// layer; cause is why it stopped (nil: errors.ErrClosed). The operation
// under way ends with what is known of it (its Done step; none if nothing
// is under way), closed below being cause, made to match errors.ErrClosed
// if it does not already:
//
//	InitTransactions, Abort                 closed
//	Commit: EndTxn(commit) answered NONE,   success (it committed)
//	  only the epoch bump after it left
//	Commit: an EndTxn(commit) may have      closed and errors.ErrUnknownOutcome
//	  reached the coordinator (sent and
//	  unanswered, or an attempt's answer
//	  lost)
//	Commit: none can have (waiting for      ErrAbortRequired and closed, StoppedCommit: it
//	  batches, or every attempt refused     did not commit (the state is TxnAbortableError)
//	  unapplied)
func (t *TxnState) Stop(outstandingUnsent bool, cause error) TxnStep {
	if outstandingUnsent && t.outstanding != nil {
		t.resend, t.outstanding = t.outstanding, nil
	}
	closed := stopError(cause)
	var step TxnStep
	switch t.state {
	case TxnInitializing, TxnAborting:
		step = TxnStep{Done: true, Err: closed}
	case TxnBumpingEpoch:
		step = TxnStep{Done: true, Err: closed}
		if t.committed {
			step.Err = nil
		}
	case TxnCommitting:
		if _, sent := t.outstanding.(*EndTxnRequest); sent || t.endTxnUncertain || t.endTxnApplied {
			step = TxnStep{Done: true, Err: errors.Join(closed, errors.ErrUnknownOutcome)}
			break
		}
		_ = t.transition(TxnAbortableError)
		t.err, t.stoppedCommit = closed, true
		step = TxnStep{Done: true, Err: fmt.Errorf("%w: %w", ErrAbortRequired, closed)}
	}
	t.outstanding, t.resend = nil, nil
	return step
}

// stopError is the error of an operation ended by Stop(…, cause): cause
// when it matches errors.ErrClosed, else errors.ErrClosed wrapping it.
func stopError(cause error) error {
	switch {
	case cause == nil:
		return errors.ErrClosed
	case errors.Is(cause, errors.ErrClosed):
		return cause
	}
	return fmt.Errorf("%w: %w", errors.ErrClosed, cause)
}

// BumpRequired reports whether the next abort will end with an epoch bump.
func (t *TxnState) BumpRequired() bool { return t.bumpRequired }

func (t *TxnState) transition(to TxnStateKind) error {
	if to == TxnFatalError || slices.Contains(txnAllowedFrom[to], t.state) {
		t.state = to
		return nil
	}
	return fmt.Errorf("%w: %v → %v", ErrTxnState, t.state, to)
}

// InitTransactions starts initialization: InitProducerId(transactional ID,
// -1, -1).
func (t *TxnState) InitTransactions() (TxnStep, error) {
	if err := t.transition(TxnInitializing); err != nil {
		if t.state == TxnFatalError || t.state == TxnAbortableError {
			return TxnStep{}, t.stateErr() // the error that stopped it, as every other call
		}
		return TxnStep{}, err
	}
	t.resend = &InitProducerIDRequest{TransactionalID: t.cfg.TransactionalID, Producer: NoProducerID}
	return t.Poll(), nil
}

// Begin opens a transaction.
func (t *TxnState) Begin() error {
	if err := t.transition(TxnInTransaction); err != nil {
		return t.stateErr()
	}
	clear(t.added)
	t.pendingAdd = t.pendingAdd[:0]
	t.started, t.maybeStarted, t.committed, t.stoppedCommit, t.endTxnApplied = false, false, false, false, false
	t.assignedAtBegin = t.seq.assigned
	return nil
}

// OffsetsRequestKind names the two requests of SendOffsetsToTransaction.
type OffsetsRequestKind uint8

const (
	// OffsetsAdd: AddOffsetsToTxn, which makes the transaction
	// coordinator add the group's offsets partition to the transaction
	// (and so start the transaction, if nothing else did).
	OffsetsAdd OffsetsRequestKind = iota
	// OffsetsCommit: TxnOffsetCommit, which makes the group coordinator
	// stage the offsets in the transaction.
	OffsetsCommit
)

// OffsetsResult is how one attempt of an offsets request ended.
type OffsetsResult struct {
	Request  OffsetsRequestKind
	Delivery Delivery
	// Err: why no answer came (NoResponse), or why the request was not
	// sent or sent again (NotSent: a local failure, the caller's context
	// ending).
	Err error
	// Codes: the answer's error codes: AddOffsetsToTxn's one,
	// TxnOffsetCommit's one per partition.
	Codes []int16
	// Resent: the transport wrote an earlier attempt of this request that
	// got no answer, or that was answered with a code it retries by itself
	// (answeredAfterAppend), and sent it again (it may have been applied).
	Resent bool
	// Lookup: Codes hold the refusal of the coordinator's lookup, not the
	// coordinator's answer: the request was not sent.
	Lookup bool
}

// OffsetsStep is what the I/O layer does after HandleOffsets.
type OffsetsStep struct {
	// Retry: send the same request again, after the retry backoff.
	Retry bool
	// Err: the SendOffsetsToTransaction call fails with it (it matches
	// ErrAbortRequired, ErrProducerFatal or ErrTxnState and wraps the
	// cause). Nil with Retry false: the request succeeded.
	Err error
	// Txn is carried out as any TxnStep (the batches an abortable or
	// fatal error failed).
	Txn TxnStep
}

// offsetsVerdict classifies one error code of an offsets answer, from the
// mildest to the worst (a TxnOffsetCommit answer's partitions are judged by
// their worst).
type offsetsVerdict uint8

const (
	offsetsOK offsetsVerdict = iota
	offsetsRetry
	offsetsAbortable
	offsetsAbortableBump  // abortable; the abort ends with a new epoch
	offsetsAbortableRemap // abortable; the abort is InitProducerId alone
	offsetsFatal
)

// offsetsCode is the verdict on one AddOffsetsToTxn or TxnOffsetCommit
// error code (Java's TransactionManager, except that a code it does not
// expect is abortable rather than fatal: aborting is always safe; a code
// no later transaction can fare better with is fatal, as in Java), and
// whether an answer with it may have been applied all the same.
func offsetsCode(code int16) (v offsetsVerdict, maybeApplied bool) {
	switch code {
	case 0:
		return offsetsOK, false
	case kerr.RequestTimedOut.Code, kerr.NetworkException.Code,
		kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code:
		return offsetsRetry, appliedUnanswered(code)
	case kerr.ConcurrentTransactions.Code, kerr.UnknownTopicOrPartition.Code:
		return offsetsRetry, false
	case kerr.UnknownProducerID.Code:
		return offsetsAbortableBump, false
	case kerr.InvalidProducerIDMapping.Code:
		return offsetsAbortableRemap, false
	case kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code, kerr.TransactionalIDAuthorizationFailed.Code,
		kerr.UnsupportedForMessageFormat.Code, // the offsets topic cannot hold transactional offsets
		kerr.InvalidTxnState.Code:             // the coordinator's transaction is not the producer's (fatal on AddPartitionsToTxn too)
		return offsetsFatal, false
	}
	return offsetsAbortable, false
}

// HandleOffsets applies how one attempt of an AddOffsetsToTxn or a
// TxnOffsetCommit of the open transaction ended (SendOffsetsToTransaction
// sends them itself, one after the other, and at most until its context
// ends: they are not the TxnState's requests).
//
//	NONE                                    done; AddOffsetsToTxn: the coordinator has the transaction,
//	                                        EndTxn must end it
//	NOT_COORDINATOR, COORDINATOR_NOT_       send again (the transport finds the coordinator again)
//	  AVAILABLE, COORDINATOR_LOAD_IN_
//	  PROGRESS, CONCURRENT_TRANSACTIONS,
//	  UNKNOWN_TOPIC_OR_PARTITION,
//	  REQUEST_TIMED_OUT, NETWORK_EXCEPTION
//	UNKNOWN_PRODUCER_ID                     abortable, bump after the abort
//	INVALID_PRODUCER_ID_MAPPING             abortable, bump, skip EndTxn
//	PRODUCER_FENCED, INVALID_PRODUCER_      fatal
//	  EPOCH, TRANSACTIONAL_ID_AUTHORIZA-
//	  TION_FAILED, UNSUPPORTED_FOR_MESSAGE_
//	  FORMAT (no transaction can commit
//	  offsets there: abortable, each one
//	  aborted on it in turn), INVALID_TXN_
//	  STATE (the coordinator's transaction
//	  is not the producer's, as on Add-
//	  PartitionsToTxn and EndTxn)
//	anything else (GROUP_AUTHORIZATION_     abortable
//	  FAILED, TRANSACTION_ABORTABLE, KIP-447
//	  fencing of the group member: UNKNOWN_
//	  MEMBER_ID, ILLEGAL_GENERATION,
//	  FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH)
//	NotSent, NoResponse                     abortable (the transport has retried already)
//
// An attempt that may have been applied without its answer (NoResponse,
// Resent, REQUEST_TIMED_OUT, NETWORK_EXCEPTION; and, answered by the
// coordinator rather than refused by its lookup, NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS, which may
// come after its log append: answeredAfterAppend) may have been applied,
// or be applied late by a copy still on its way: the transaction then ends
// with a new epoch
// whatever its outcome (EndTxn NONE, commit or abort, is followed by
// InitProducerId with the current identity), so that a late TxnOffsetCommit
// cannot be staged in the next transaction, and a late AddOffsetsToTxn
// cannot start one; a lost AddOffsetsToTxn answer also means EndTxn must be
// sent. An answer that comes once the transaction is abortable still tells
// the coordinator's state (NONE to AddOffsetsToTxn: EndTxn must end it),
// and the call then fails with ErrAbortRequired rather than go on or retry.
func (t *TxnState) HandleOffsets(r OffsetsResult) OffsetsStep {
	open := t.state == TxnInTransaction || t.state == TxnAbortableError
	worst, cause := offsetsOK, error(nil)
	uncertain := r.Resent || r.Delivery == NoResponse
	if r.Delivery != Answered {
		worst, cause = offsetsAbortable, r.Err
		if cause == nil {
			cause = errors.ErrUnknownOutcome
		}
	} else {
		for _, code := range r.Codes {
			v, maybe := offsetsCode(code)
			uncertain = uncertain || (maybe && !r.Lookup)
			if v > worst {
				worst, cause = v, codeError(code)
			}
		}
	}
	if open && uncertain {
		t.offsetsUncertain = true
		if r.Request == OffsetsAdd {
			t.maybeStarted = true
		}
	}
	switch worst {
	case offsetsOK, offsetsRetry:
		if open && worst == offsetsOK && r.Request == OffsetsAdd {
			t.started = true
		}
		if t.state != TxnInTransaction {
			return OffsetsStep{Err: t.stateErr()}
		}
		return OffsetsStep{Retry: worst == offsetsRetry}
	case offsetsFatal:
		return OffsetsStep{Err: fmt.Errorf("%w: %w", ErrProducerFatal, cause), Txn: t.fatal(cause)}
	}
	if !open {
		return OffsetsStep{Err: t.stateErr()}
	}
	step := t.abortable(cause, worst >= offsetsAbortableBump, worst == offsetsAbortableRemap)
	return OffsetsStep{Err: fmt.Errorf("%w: %w", ErrAbortRequired, cause), Txn: step}
}

// mayHaveStarted reports whether the coordinator may know the open
// transaction.
func (t *TxnState) mayHaveStarted() bool {
	return t.started || t.maybeStarted || (t.cfg.ImplicitAddPartitions && t.seq.assigned != t.assignedAtBegin)
}

// AddPartition makes tp part of the open transaction. With transactions V1
// it queues an AddPartitionsToTxn (sent by this or a later step); produce to
// tp only once CanProduce(tp) is nil.
func (t *TxnState) AddPartition(tp TopicPartition) (TxnStep, error) {
	if t.state != TxnInTransaction {
		return TxnStep{}, t.stateErr()
	}
	if !t.added[tp] && !slices.Contains(t.pendingAdd, tp) && !t.adding(tp) {
		if t.cfg.ImplicitAddPartitions {
			t.added[tp] = true
		} else {
			t.pendingAdd = append(t.pendingAdd, tp)
		}
	}
	return t.Poll(), nil
}

// Holds reports whether the open transaction, while it may still commit
// (InTransaction, or Committing before EndTxn is sent), includes tp or is
// adding it. The I/O layer keeps such a partition's state (its Sequencer
// state above all) even when its topic is gone: NewIncarnation judges a
// recreation of the topic by what the partition acknowledged in the
// transaction.
func (t *TxnState) Holds(tp TopicPartition) bool {
	if t.state != TxnInTransaction && (t.state != TxnCommitting || t.endTxnSent()) {
		return false
	}
	return t.added[tp] || slices.Contains(t.pendingAdd, tp) || t.adding(tp)
}

// adding reports whether tp is in an AddPartitionsToTxn on the wire or
// queued for resending.
func (t *TxnState) adding(tp TopicPartition) bool {
	for _, r := range []TxnRequest{t.outstanding, t.resend} {
		if a, ok := r.(*AddPartitionsRequest); ok && slices.Contains(a.Partitions, tp) {
			return true
		}
	}
	return false
}

// CanProduce returns nil when batches for tp may be assigned now.
func (t *TxnState) CanProduce(tp TopicPartition) error {
	if t.state != TxnInTransaction {
		return t.stateErr()
	}
	if !t.added[tp] {
		return fmt.Errorf("%w: %v not yet added to the transaction", ErrTxnState, tp)
	}
	return nil
}

func (t *TxnState) stateErr() error {
	switch t.state {
	case TxnAbortableError:
		return fmt.Errorf("%w: %w", ErrAbortRequired, t.err)
	case TxnFatalError:
		return fmt.Errorf("%w: %w", ErrProducerFatal, t.err)
	}
	return fmt.Errorf("%w: %v", ErrTxnState, t.state)
}

// Commit starts committing the open transaction: once every batch is
// acknowledged, EndTxn(commit). The Done step reports the result.
//
// Contract: call it only once every record of the transaction buffered by
// the I/O layer has been assigned to a batch (flush first): the TxnState sees
// only the Sequencer's batches, and sends EndTxn as soon as they are all
// acknowledged; a record still buffered then would not be part of the
// transaction. Records produced after Commit must be refused (CanProduce).
func (t *TxnState) Commit() (TxnStep, error) {
	if t.state != TxnInTransaction {
		return TxnStep{}, t.stateErr()
	}
	if err := t.transition(TxnCommitting); err != nil {
		return TxnStep{}, err
	}
	t.pendingAdd = t.pendingAdd[:0]
	return t.Poll(), nil
}

// Abort starts aborting the open transaction (or recovering from an abortable
// error): batches not on the wire fail (the I/O layer fails the records it
// still buffers for the transaction itself), the rest are waited for, then
// EndTxn(abort) (skipped after INVALID_PRODUCER_ID_MAPPING), then, if
// sequences were disturbed or an EndTxn answer was lost, InitProducerId for a
// new epoch. The Done step reports the result.
//
// outstandingUnsent says that the request the last step handed out (Send)
// has not left the I/O layer (it waits out the retry backoff), which gives
// it back: the I/O layer drops it, and sends what the returned step hands
// out instead. An AddPartitionsToTxn not sent is not sent at all: the
// abort needs no partition added. Whether the coordinator may know the
// transaction is what the attempts that were sent left (mayHaveStarted: one
// answered NONE, one whose answer was lost or that may have been applied
// all the same); if none may have started it, the abort ends it locally,
// without EndTxn. An AddPartitionsToTxn on the wire is waited for: it may
// start the transaction.
func (t *TxnState) Abort(outstandingUnsent bool) (TxnStep, error) {
	if err := t.transition(TxnAborting); err != nil {
		return TxnStep{}, t.stateErr()
	}
	t.pendingAdd = t.pendingAdd[:0]
	if outstandingUnsent && t.outstanding != nil {
		t.resend, t.outstanding = t.outstanding, nil
	}
	if _, ok := t.resend.(*AddPartitionsRequest); ok {
		t.resend = nil
	}
	d := t.seq.FailPending(ErrTransactionAborted)
	step := t.Poll()
	step.Decision = d
	return step, nil
}

// HandleProduce applies a Sequencer decision (from Complete or Expire) to the
// transaction: abortable errors make it abortable, fatal ones fatal.
func (t *TxnState) HandleProduce(d Decision) TxnStep {
	var step TxnStep
	switch {
	case d.Fatal != nil:
		step = t.fatal(d.Fatal)
	case d.Abortable != nil:
		step = t.abortable(d.Abortable.Err, d.Abortable.BumpEpoch, d.Abortable.SkipEndTxn)
	default:
		step = t.Poll()
	}
	return step
}

// RecordRefused tells the TxnState that the I/O layer refused a record the
// application produced (Produce returned err; no batch holds the record).
// The application meant the record to be in the open transaction, which
// must not then commit without it: an application that logs the error and
// goes on would commit a transaction silently missing a write (Java's
// producer makes the transaction abortable when send refuses a record with
// an API error). commitUnderWay: the I/O layer's CommitTransaction runs (it
// flushes before Commit, the state still InTransaction), and refuses every
// record meanwhile: none could have joined the transaction it commits.
//
//	InTransaction, the refusal is about the      abortable with err (no bump: nothing of the
//	  record or its delivery (too large, topic     record was sent)
//	  or partition lookup failed or its wait
//	  ended, partitioner out of range, no such
//	  partition, invalid argument)
//	err matches ErrTxnState, ErrAbortRequired,   nothing: a refusal by the transaction's state or
//	  ErrProducerFatal or errors.ErrClosed         the producer's, about no record of the transaction
//	commitUnderWay; any other state (no         nothing
//	  transaction open, committing, aborting,
//	  already abortable, fatal)
func (t *TxnState) RecordRefused(err error, commitUnderWay bool) TxnStep {
	if err == nil || commitUnderWay || t.state != TxnInTransaction ||
		errors.Is(err, ErrTxnState) || errors.Is(err, ErrAbortRequired) || errors.Is(err, ErrProducerFatal) ||
		errors.Is(err, errors.ErrClosed) {
		return TxnStep{}
	}
	return t.abortable(err, false, false)
}

// NewIncarnation tells the transaction that tp's topic was deleted and
// created again, and its Sequencer (Sequencer.NewIncarnation): call it
// instead of that. A batch of the open transaction that tp acknowledged
// before went with the deleted log, so the transaction cannot commit it:
// it becomes abortable with errors.ErrTopicIDChanged (as for an
// acknowledgement of the deleted incarnation handled after the switch),
// unless EndTxn is already on its way (a commit then ends as the
// coordinator decides). The step's Decision includes the Sequencer's.
func (t *TxnState) NewIncarnation(tp TopicPartition) TxnStep {
	acked := t.seq.ackedSince(tp, t.assignedAtBegin)
	d := t.seq.NewIncarnation(tp)
	if acked && (t.state == TxnInTransaction || (t.state == TxnCommitting && !t.endTxnSent())) {
		d.abortable(errors.ErrTopicIDChanged, false, false)
	}
	step := t.HandleProduce(d)
	d.Merge(step.Decision)
	step.Decision = d
	return step
}

// endTxnSent reports whether an EndTxn is on the wire or queued to be sent
// again.
func (t *TxnState) endTxnSent() bool {
	_, out := t.outstanding.(*EndTxnRequest)
	_, again := t.resend.(*EndTxnRequest)
	return out || again
}

func (t *TxnState) fatal(err error) TxnStep {
	wasBusy := t.state == TxnCommitting || t.state == TxnAborting || t.state == TxnInitializing || t.state == TxnBumpingEpoch
	if t.state != TxnFatalError {
		t.err = err
	}
	_ = t.transition(TxnFatalError)
	t.resend, t.outstanding = nil, nil
	step := TxnStep{Decision: t.seq.FailPending(fmt.Errorf("%w: %w", ErrProducerFatal, err))}
	if wasBusy {
		step.Done, step.Err = true, fmt.Errorf("%w: %w", ErrProducerFatal, err)
	}
	return step
}

func (t *TxnState) abortable(err error, bump, skipEndTxn bool) TxnStep {
	t.bumpRequired = t.bumpRequired || bump
	t.skipEndTxn = t.skipEndTxn || skipEndTxn
	switch t.state {
	case TxnAborting, TxnBumpingEpoch, TxnFatalError:
		// Already on the way out (Java skips this transition while
		// aborting); the flags above still apply to the abort.
		return t.Poll()
	}
	wasCommitting := t.state == TxnCommitting
	if t.transition(TxnAbortableError) != nil {
		return t.Poll()
	}
	t.err = err
	t.pendingAdd = t.pendingAdd[:0]
	d := t.seq.FailPending(fmt.Errorf("%w: %w", ErrAbortRequired, err))
	step := t.Poll()
	step.Decision = d
	if wasCommitting {
		step.Done, step.Err = true, fmt.Errorf("%w: %w", ErrAbortRequired, err)
	}
	return step
}

// Poll returns what to do now: a coordinator request to send, or whether
// EndTxn is waiting for the Sequencer to drain.
func (t *TxnState) Poll() TxnStep {
	var step TxnStep
	if t.outstanding != nil {
		return step
	}
	producer := t.seq.Producer()
	switch t.state {
	case TxnInTransaction:
		if t.resend == nil && len(t.pendingAdd) > 0 {
			t.resend = &AddPartitionsRequest{TransactionalID: t.cfg.TransactionalID, Producer: producer,
				Partitions: slices.Clone(t.pendingAdd)}
			t.pendingAdd = t.pendingAdd[:0]
		}
	case TxnCommitting, TxnAborting:
		if !t.seq.Drained() {
			step.WaitDrain = true
			return step
		}
		if t.resend == nil {
			commit := t.state == TxnCommitting
			switch {
			case !commit && (t.skipEndTxn || !producer.Valid()):
				// INVALID_PRODUCER_ID_MAPPING: the coordinator would
				// refuse EndTxn; go straight to InitProducerId.
				t.startBump()
			case !t.mayHaveStarted():
				// Nothing reached the coordinator: nothing to end.
				return t.endedLocally(commit)
			default:
				t.resend = &EndTxnRequest{TransactionalID: t.cfg.TransactionalID, Producer: producer, Commit: commit}
			}
		}
	}
	if t.resend != nil {
		step.Send, t.outstanding, t.resend = t.resend, t.resend, nil
		step.FindCoordinator, t.findCoord = t.findCoord, false
	}
	return step
}

// endedLocally completes a transaction the coordinator never knew.
func (t *TxnState) endedLocally(commit bool) TxnStep {
	if t.offsetsUncertain || (!commit && (t.bumpRequired || t.seq.NeedsBump())) {
		t.startBump()
		return t.Poll()
	}
	if err := t.seq.Resume(); err != nil {
		t.startBump()
		return t.Poll()
	}
	_ = t.transition(TxnReady)
	t.err = nil
	return TxnStep{Done: true}
}

// clearRecovery forgets the error and what it asked of the abort: a new
// identity was adopted.
func (t *TxnState) clearRecovery() {
	t.err, t.bumpRequired, t.skipEndTxn, t.endTxnUncertain, t.offsetsUncertain = nil, false, false, false, false
	t.committed, t.endTxnApplied = false, false
}

// startBump moves to TxnBumpingEpoch with its InitProducerId queued.
func (t *TxnState) startBump() {
	_ = t.transition(TxnBumpingEpoch)
	id := t.seq.Producer()
	if !t.cfg.CoordinatorBumps || !id.Valid() {
		id = NoProducerID
	}
	t.resend = &InitProducerIDRequest{TransactionalID: t.cfg.TransactionalID, Producer: id}
}

// coordinatorRetry reports whether code means "send the same request again",
// and whether the coordinator must be rediscovered first.
func coordinatorRetry(code int16) (retry, find bool) {
	switch code {
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code:
		return true, true
	case kerr.CoordinatorLoadInProgress.Code, kerr.ConcurrentTransactions.Code,
		kerr.RequestTimedOut.Code, kerr.NetworkException.Code:
		return true, false
	}
	return false, false
}

// appliedUnanswered reports whether a coordinator's answer code to
// AddPartitionsToTxn, EndTxn, AddOffsetsToTxn or TxnOffsetCommit may come
// after the request was applied, as no answer at all may:
// REQUEST_TIMED_OUT and NETWORK_EXCEPTION, and the answeredAfterAppend
// codes. The other retriable codes (CONCURRENT_TRANSACTIONS) are answered
// before anything is appended.
func appliedUnanswered(code int16) bool {
	switch code {
	case kerr.RequestTimedOut.Code, kerr.NetworkException.Code:
		return true
	}
	return answeredAfterAppend(code)
}

// answeredAfterAppend reports whether code is one a coordinator answers
// also after appending the request's effect to its log, so that a
// coordinator that loads the log has it (the partitions or the offsets
// added, the transaction's end under way, the offsets staged), although
// the answer says to send the request again. Kafka's transaction
// coordinator answers COORDINATOR_NOT_AVAILABLE when the append failed
// NOT_ENOUGH_REPLICAS_AFTER_APPEND or timed out waiting for the replicas,
// NOT_COORDINATOR when it failed NOT_LEADER_OR_FOLLOWER or
// KAFKA_STORAGE_ERROR, and NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
// after an append that succeeded while its log partition moved (the
// coordinator epoch changed, or the partition is being loaded again: the
// new load reads the record). The group coordinator answers a
// TxnOffsetCommit COORDINATOR_NOT_AVAILABLE (its append timed out, or
// NOT_ENOUGH_REPLICAS_AFTER_APPEND) or NOT_COORDINATOR
// (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR) alike. Each is also the
// answer of a coordinator that applied nothing: the client cannot tell.
// The transport refusing the coordinator's lookup with one of them is no
// answer of a coordinator (the request was not sent): callers check
// Lookup first.
func answeredAfterAppend(code int16) bool {
	switch code {
	case kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code:
		return true
	}
	return false
}

// retryOutstanding queues the outstanding request to be sent again.
func (t *TxnState) retryOutstanding(find bool) TxnStep {
	t.resend, t.outstanding = t.outstanding, nil
	t.findCoord = t.findCoord || find
	return t.Poll()
}

// InitProducerIDResult is an InitProducerId answer.
type InitProducerIDResult struct {
	Delivery Delivery
	Code     int16
	Producer ProducerID
}

// HandleInitProducerID applies the answer to the outstanding InitProducerId.
//
//	NONE                                    adopt the identity (SetProducer: sequences restart at 0) → Ready
//	NONE without an identity (ID or epoch   send the same request again: a broker's fault, not the
//	  negative)                             producer's (SetProducer refused it: fatal, as a misuse)
//	NotSent, NoResponse,                    send the same request again (a lost answer is safe to
//	  CONCURRENT_TRANSACTIONS, COORDINATOR_   retry: the coordinator returns the epoch it already gave)
//	  LOAD_IN_PROGRESS, REQUEST_TIMED_OUT
//	NOT_COORDINATOR, COORDINATOR_NOT_       rediscover the coordinator, then the same
//	  AVAILABLE
//	TRANSACTION_ABORTABLE                   abortable error
//	PRODUCER_FENCED, INVALID_PRODUCER_      fatal (fenced; < v4 coordinators say 47 for fenced)
//	  EPOCH
//	anything else (authorization, …)        fatal
//
// The bump that follows a committed EndTxn (BumpingEpoch after EndTxn(commit)
// answered NONE) completes a commit that happened: whatever its answer, the
// commit's Done step reports success. Refused as fatal, the producer is
// fatal for what follows; answered TRANSACTION_ABORTABLE, the abort that
// must follow is the bump alone (EndTxn(abort) of the committed transaction
// would be refused).
func (t *TxnState) HandleInitProducerID(r InitProducerIDResult) (TxnStep, error) {
	if _, ok := t.outstanding.(*InitProducerIDRequest); !ok || (t.state != TxnInitializing && t.state != TxnBumpingEpoch) {
		return TxnStep{}, fmt.Errorf("%w: no InitProducerId outstanding", ErrTxnState)
	}
	if r.Delivery != Answered {
		return t.retryOutstanding(false), nil
	}
	if retry, find := coordinatorRetry(r.Code); retry {
		return t.retryOutstanding(find), nil
	}
	if r.Code == 0 && !r.Producer.Valid() {
		return t.retryOutstanding(false), nil
	}
	t.outstanding = nil
	committed := t.committed && t.state == TxnBumpingEpoch
	switch r.Code {
	case 0:
		d, err := t.seq.SetProducer(r.Producer)
		if err != nil {
			return t.fatalAfterCommit(err, committed), nil
		}
		_ = t.transition(TxnReady)
		t.clearRecovery()
		return TxnStep{Decision: d, Done: true}, nil
	case kerr.TransactionAbortable.Code:
		if committed {
			// The transaction committed; only its bump failed. The
			// commit reports so, and the abort that must follow is the
			// bump alone: EndTxn(abort) would be refused (the
			// coordinator completed the commit) and made it fatal.
			_ = t.transition(TxnAbortableError)
			t.err, t.bumpRequired, t.committed = kerr.TransactionAbortable, true, false
			t.started, t.maybeStarted, t.assignedAtBegin = false, false, t.seq.assigned
			return TxnStep{Done: true}, nil
		}
		if t.state == TxnBumpingEpoch {
			// The abort's bump failed: the abort must be run again
			// (abortable() leaves BumpingEpoch alone).
			_ = t.transition(TxnAbortableError)
			t.err, t.bumpRequired = kerr.TransactionAbortable, true
			return TxnStep{Done: true, Err: fmt.Errorf("%w: %w", ErrAbortRequired, kerr.TransactionAbortable)}, nil
		}
		step := t.abortable(kerr.TransactionAbortable, true, false)
		step.Done, step.Err = true, fmt.Errorf("%w: %w", ErrAbortRequired, kerr.TransactionAbortable)
		return step, nil
	default:
		return t.fatalAfterCommit(codeError(r.Code), committed), nil
	}
}

// fatalAfterCommit is fatal(err) for the end of an InitProducerId; when it
// bumped after a committed EndTxn, the commit it completes succeeded (the
// producer is fatal from now on: later calls say so).
func (t *TxnState) fatalAfterCommit(err error, committed bool) TxnStep {
	step := t.fatal(err)
	if committed {
		step.Err = nil
	}
	return step
}

// AddPartitionResult is one partition's AddPartitionsToTxn answer.
type AddPartitionResult struct {
	TP   TopicPartition
	Code int16
	// Lookup: Code is the refusal of the coordinator's lookup, not the
	// coordinator's answer: the request was not sent.
	Lookup bool
}

// HandleAddPartitions applies the answer to the outstanding
// AddPartitionsToTxn (results per partition; delivery for the request).
// resent: the transport wrote an earlier attempt of the request that got
// no answer, and sent it again (the answer is the resend's). That attempt
// may have been applied, starting the transaction, whatever the resend's
// answer (a refusal of the resend, even a final one, does not undo it): the
// transaction may have started, as after NoResponse, and Commit and Abort
// send EndTxn (INVALID_TXN_STATE then tells that it had not).
//
//	NONE                                    partition added: CanProduce(tp) is nil
//	NotSent, NoResponse; CONCURRENT_        add again
//	  TRANSACTIONS, UNKNOWN_TOPIC_OR_PAR-
//	  TITION, OPERATION_NOT_ATTEMPTED
//	REQUEST_TIMED_OUT, NETWORK_EXCEPTION    add again; the transaction may have started (as after
//	                                        NoResponse: the request may have been applied)
//	COORDINATOR_NOT_AVAILABLE, NOT_CO-      (COORDINATOR_LOAD_IN_PROGRESS: without) rediscovering the
//	  ORDINATOR, COORDINATOR_LOAD_IN_       coordinator, add again; answered by the coordinator (not
//	  PROGRESS                              Lookup), the transaction may have started: each may come
//	                                        after the coordinator's log append (answeredAfterAppend)
//	UNKNOWN_PRODUCER_ID                     abortable, bump after the abort
//	INVALID_PRODUCER_ID_MAPPING             abortable, bump, skip EndTxn
//	TOPIC_AUTHORIZATION_FAILED,             abortable
//	  TRANSACTION_ABORTABLE
//	PRODUCER_FENCED, INVALID_PRODUCER_      fatal
//	  EPOCH, INVALID_TXN_STATE, TRANSAC-
//	  TIONAL_ID_AUTHORIZATION_FAILED, other
//
// A result for a partition the request did not name is ignored, whatever
// its code; a partition the request named that the answer leaves out is
// added again.
func (t *TxnState) HandleAddPartitions(delivery Delivery, results []AddPartitionResult, resent bool) (TxnStep, error) {
	req, ok := t.outstanding.(*AddPartitionsRequest)
	if !ok {
		return TxnStep{}, fmt.Errorf("%w: no AddPartitionsToTxn outstanding", ErrTxnState)
	}
	t.outstanding = nil
	if resent || delivery == NoResponse {
		t.maybeStarted = true
	}
	requeue := func(tp TopicPartition) {
		if t.state == TxnInTransaction && !slices.Contains(t.pendingAdd, tp) {
			t.pendingAdd = append(t.pendingAdd, tp)
		}
	}
	if delivery != Answered {
		for _, tp := range req.Partitions {
			requeue(tp)
		}
		return t.Poll(), nil
	}
	var worst TxnStep
	decided := false
	answered := make(map[TopicPartition]bool, len(results))
	for _, r := range results {
		if !slices.Contains(req.Partitions, r.TP) {
			// Not asked for (a broker's mistake): it says nothing
			// of this request's partitions, nor of the transaction.
			continue
		}
		answered[r.TP] = true
		if retry, find := coordinatorRetry(r.Code); retry {
			if !r.Lookup && appliedUnanswered(r.Code) {
				// Not a refusal before applying it (as the other
				// retriable codes are): it may have started the
				// transaction, and an abort that drops the resend
				// must still send EndTxn.
				t.maybeStarted = true
			}
			t.findCoord = t.findCoord || find
			requeue(r.TP)
			continue
		}
		switch r.Code {
		case 0:
			t.started = true // the coordinator has the transaction now
			if t.state == TxnInTransaction {
				t.added[r.TP] = true
			}
		case kerr.UnknownTopicOrPartition.Code, kerr.OperationNotAttempted.Code:
			requeue(r.TP)
		case kerr.UnknownProducerID.Code:
			if !decided {
				worst, decided = t.abortable(codeError(r.Code), true, false), true
			}
		case kerr.InvalidProducerIDMapping.Code:
			if !decided {
				worst, decided = t.abortable(codeError(r.Code), true, true), true
			}
		case kerr.TopicAuthorizationFailed.Code, kerr.TransactionAbortable.Code:
			if !decided {
				worst, decided = t.abortable(codeError(r.Code), false, false), true
			}
		default:
			return t.fatal(codeError(r.Code)), nil
		}
	}
	for _, tp := range req.Partitions {
		if !answered[tp] {
			requeue(tp)
		}
	}
	if decided {
		return worst, nil
	}
	return t.Poll(), nil
}

// EndTxnResult is an EndTxn answer. Producer is the identity for the next
// transaction from EndTxn v5+ (transactions V2, KIP-890), or NoProducerID.
type EndTxnResult struct {
	Delivery Delivery
	Code     int16
	Producer ProducerID
	// Lookup: Code is the refusal of the coordinator's lookup, not the
	// coordinator's answer: the request was not sent.
	Lookup bool
	// Resent: an earlier attempt of this request was written but got no
	// answer, and the transport sent it again (it may have been applied).
	Resent bool
	// RetriedAnswered: an earlier attempt of this request was answered
	// with a code the transport retries by itself (NOT_COORDINATOR,
	// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), and it
	// sent the request again: that attempt may have been applied
	// (answeredAfterAppend).
	RetriedAnswered bool
}

// HandleEndTxn applies the answer to the outstanding EndTxn.
//
//	NONE, v5+ identity                      adopt it (SetProducer) → Ready (TV2 bumps on every EndTxn;
//	                                        a new producer ID after epoch exhaustion is adopted too)
//	NONE, abort, bump required or an        InitProducerId(current ID, epoch) → BumpingEpoch
//	  EndTxn answer was lost
//	NONE, commit after a lost answer        InitProducerId(current ID, epoch) → BumpingEpoch: a delayed
//	                                        duplicate of this EndTxn must not end the next transaction
//	                                        (KAFKA-17754)
//	NONE, an offsets request of the         InitProducerId(current ID, epoch) → BumpingEpoch: a delayed
//	  transaction may have been applied     TxnOffsetCommit must not be staged in the next transaction
//	  without an answer                     (HandleOffsets)
//	NONE, otherwise                         → Ready
//	NotSent, NoResponse; CONCURRENT_        send the same EndTxn again (the coordinator answers a repeat
//	  TRANSACTIONS, REQUEST_TIMED_OUT,      of a completed one with NONE); after NoResponse, Resent,
//	  NETWORK_EXCEPTION                     REQUEST_TIMED_OUT or NETWORK_EXCEPTION the attempt may have
//	                                        been applied, and a copy may still arrive (bump, as above)
//	NOT_COORDINATOR, COORDINATOR_NOT_       (COORDINATOR_LOAD_IN_PROGRESS: without) rediscovering the
//	  AVAILABLE, COORDINATOR_LOAD_IN_       coordinator, same EndTxn; answered by the coordinator (not
//	  PROGRESS; RetriedAnswered             Lookup), or so answered and retried by the transport
//	                                        (RetriedAnswered), the attempt may have been applied
//	                                        (answeredAfterAppend): the commit's outcome is unknown until
//	                                        an answer settles it, but no copy is on its way (no bump)
//	INVALID_PRODUCER_ID_MAPPING             commit: abortable (skip EndTxn); abort: InitProducerId
//	TRANSACTION_ABORTABLE (commit)          abortable, bump
//	INVALID_TXN_STATE, start uncertain      the transaction never started: ended, then bump
//	  (not a commit with batches)
//	PRODUCER_FENCED, INVALID_PRODUCER_      fatal
//	  EPOCH, INVALID_TXN_STATE, other
//
// A commit refused after an attempt that got no answer or may have been
// applied all the same (which may have committed) fails with an error that
// also wraps errors.ErrUnknownOutcome.
//
// EndTxn is sent only if the transaction may have reached the coordinator
// (an AddPartitionsToTxn succeeded or got no answer; with implicit adds, a
// batch was sent); otherwise Commit and Abort end it locally.
func (t *TxnState) HandleEndTxn(r EndTxnResult) (TxnStep, error) {
	req, ok := t.outstanding.(*EndTxnRequest)
	if !ok || (t.state != TxnCommitting && t.state != TxnAborting) {
		return TxnStep{}, fmt.Errorf("%w: no EndTxn outstanding", ErrTxnState)
	}
	if r.Delivery == NoResponse || r.Resent {
		t.endTxnUncertain = true
	}
	if r.RetriedAnswered {
		// Whatever ended the transport's retry (even before it was
		// sent: NotSent), the attempt answered before may be applied.
		t.endTxnApplied = true
	}
	if r.Delivery != Answered {
		return t.retryOutstanding(false), nil
	}
	if retry, find := coordinatorRetry(r.Code); retry {
		switch {
		case r.Lookup:
			// Not sent: nothing of it was applied.
		case answeredAfterAppend(r.Code):
			t.endTxnApplied = true
		case appliedUnanswered(r.Code):
			t.endTxnUncertain = true
		}
		return t.retryOutstanding(find), nil
	}
	t.outstanding = nil
	step := t.endTxnAnswered(req, r)
	if req.Commit && r.Code != 0 && (t.endTxnUncertain || t.endTxnApplied) && step.Done && step.Err != nil {
		// An earlier attempt of this commit got no answer: it may have
		// committed before the coordinator refused the retry.
		step.Err = fmt.Errorf("%w: %w", step.Err, errors.ErrUnknownOutcome)
	}
	return step, nil
}

// endTxnAnswered applies an EndTxn answer that settles the request.
func (t *TxnState) endTxnAnswered(req *EndTxnRequest, r EndTxnResult) TxnStep {
	switch r.Code {
	case 0:
		if r.Producer.Valid() {
			d, err := t.seq.SetProducer(r.Producer)
			if err != nil {
				return t.fatal(err)
			}
			_ = t.transition(TxnReady)
			t.clearRecovery()
			return TxnStep{Decision: d, Done: true}
		}
		t.committed = req.Commit
		if t.endTxnUncertain || t.offsetsUncertain || (!req.Commit && (t.bumpRequired || t.seq.NeedsBump())) {
			t.startBump()
			return t.Poll()
		}
		if err := t.seq.Resume(); err != nil {
			t.startBump()
			return t.Poll()
		}
		t.committed = false
		_ = t.transition(TxnReady)
		t.err = nil
		return TxnStep{Done: true}
	case kerr.InvalidProducerIDMapping.Code, kerr.UnknownProducerID.Code:
		// The coordinator does not hold the producer's identity (as
		// Java, abortable with a bump where KIP-360 allows one): the
		// transaction did not end here; the abort is the bump alone.
		t.skipEndTxn = true
		if req.Commit {
			return t.abortable(codeError(r.Code), true, true)
		}
		t.startBump()
		return t.Poll()
	case kerr.TransactionAbortable.Code:
		if req.Commit {
			return t.abortable(codeError(r.Code), true, false)
		}
		return t.fatal(codeError(r.Code))
	case kerr.InvalidTxnState.Code:
		if !t.started && (!req.Commit || t.seq.assigned == t.assignedAtBegin) {
			// The transaction never started after all (an add or a
			// produce whose outcome was unknown did not reach the
			// coordinator): nothing to end. Bump to leave no doubt.
			// Not for a commit with batches (implicit adds): they
			// were acknowledged, so it had started.
			t.bumpRequired = true
			return t.endedLocally(false)
		}
		return t.fatal(codeError(r.Code))
	default:
		return t.fatal(codeError(r.Code))
	}
}
