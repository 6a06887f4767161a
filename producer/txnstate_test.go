package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	kepocherrors "github.com/kepoch/kepoch/errors"
)

const txnID = "txn-1"

type txnHarness struct {
	t   *testing.T
	seq *Sequencer
	tx  *TxnState
}

// newTxn returns a TxnState initialized to pid and in TxnReady.
func newTxn(t *testing.T, cfg TxnConfig) *txnHarness {
	t.Helper()
	seq, err := NewSequencer(Config{Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.TransactionalID = txnID
	tx, err := NewTxnState(cfg, seq)
	if err != nil {
		t.Fatal(err)
	}
	h := &txnHarness{t, seq, tx}
	step, err := tx.InitTransactions()
	if err != nil {
		t.Fatal(err)
	}
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: NoProducerID})
	step = h.init(InitProducerIDResult{Producer: pid})
	if !step.Done || step.Err != nil || tx.State() != TxnReady || seq.Producer() != pid {
		t.Fatalf("init: %+v, state %v", step, tx.State())
	}
	return h
}

func (h *txnHarness) wantSend(step TxnStep, want TxnRequest) {
	h.t.Helper()
	switch w := want.(type) {
	case *InitProducerIDRequest:
		if g, ok := step.Send.(*InitProducerIDRequest); !ok || *g != *w {
			h.t.Fatalf("send %#v, want %#v", step.Send, want)
		}
	case *EndTxnRequest:
		if g, ok := step.Send.(*EndTxnRequest); !ok || *g != *w {
			h.t.Fatalf("send %#v, want %#v", step.Send, want)
		}
	case *AddPartitionsRequest:
		g, ok := step.Send.(*AddPartitionsRequest)
		if !ok || g.Producer != w.Producer || len(g.Partitions) != len(w.Partitions) {
			h.t.Fatalf("send %#v, want %#v", step.Send, want)
		}
		for i := range g.Partitions {
			if g.Partitions[i] != w.Partitions[i] {
				h.t.Fatalf("send %#v, want %#v", step.Send, want)
			}
		}
	case nil:
		if step.Send != nil {
			h.t.Fatalf("send %#v, want nothing", step.Send)
		}
	}
}

func (h *txnHarness) init(r InitProducerIDResult) TxnStep {
	h.t.Helper()
	step, err := h.tx.HandleInitProducerID(r)
	if err != nil {
		h.t.Fatal(err)
	}
	return step
}

// bumpDone expects step to send the epoch bump's InitProducerId for pid,
// answers it with the next epoch, and fails unless that ends the operation
// without error in TxnReady under the bumped identity, which it returns.
func (h *txnHarness) bumpDone(step TxnStep, what string) ProducerID {
	h.t.Helper()
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
	bumped := ProducerID{pid.ID, pid.Epoch + 1}
	step = h.init(InitProducerIDResult{Producer: bumped})
	if !step.Done || step.Err != nil || h.tx.State() != TxnReady || h.seq.Producer() != bumped {
		h.t.Fatalf("%s: step %+v, state %v, producer %v", what, step, h.tx.State(), h.seq.Producer())
	}
	return bumped
}

// commitAfterLostAnswer begins a transaction on tp0 and commits it: its
// EndTxn's first answer is lost, the resent one is answered NONE (it
// committed), and the commit must then bump the epoch (KAFKA-17754). It
// returns the step that sends the bump's InitProducerId.
func (h *txnHarness) commitAfterLostAnswer() TxnStep {
	h.t.Helper()
	h.begin(tp0)
	step, _ := h.tx.Commit()
	want := &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true}
	h.wantSend(step, want)
	step = h.endTxn(EndTxnResult{Delivery: NoResponse})
	h.wantSend(step, want)
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
	return step
}

func (h *txnHarness) endTxn(r EndTxnResult) TxnStep {
	h.t.Helper()
	step, err := h.tx.HandleEndTxn(r)
	if err != nil {
		h.t.Fatal(err)
	}
	return step
}

// begin opens a transaction with tps added (AddPartitionsToTxn answered
// NONE, one request at a time).
func (h *txnHarness) begin(tps ...TopicPartition) {
	h.t.Helper()
	if err := h.tx.Begin(); err != nil {
		h.t.Fatal(err)
	}
	var sends []TxnRequest
	for _, tp := range tps {
		step, err := h.tx.AddPartition(tp)
		if err != nil {
			h.t.Fatal(err)
		}
		if step.Send != nil {
			sends = append(sends, step.Send)
		}
	}
	if h.tx.cfg.ImplicitAddPartitions && len(sends) > 0 {
		h.t.Fatalf("AddPartitionsToTxn with transactions V2: %#v", sends)
	}
	for len(sends) > 0 {
		req := sends[0].(*AddPartitionsRequest)
		sends = sends[1:]
		var res []AddPartitionResult
		for _, tp := range req.Partitions {
			res = append(res, AddPartitionResult{TP: tp})
		}
		step, err := h.tx.HandleAddPartitions(Answered, res, false)
		if err != nil {
			h.t.Fatal(err)
		}
		if step.Send != nil {
			sends = append(sends, step.Send)
		}
	}
	for _, tp := range tps {
		if err := h.tx.CanProduce(tp); err != nil {
			h.t.Fatal(err)
		}
	}
	if h.tx.outstanding != nil {
		h.t.Fatalf("request left outstanding: %#v", h.tx.outstanding)
	}
}

func (h *txnHarness) assign(tp TopicPartition, n int32) BatchRef {
	h.t.Helper()
	if err := h.tx.CanProduce(tp); err != nil {
		h.t.Fatal(err)
	}
	ref, _, err := h.seq.Assign(tp, n, time.Time{})
	if err != nil {
		h.t.Fatal(err)
	}
	return ref
}

func (h *txnHarness) produce(ref BatchRef, r ProduceResult) (Decision, TxnStep) {
	h.t.Helper()
	d := h.seq.Complete(ref, r)
	return d, h.tx.HandleProduce(d)
}

func TestTxnCommit(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0, tp1)
	r1 := h.assign(tp0, 2)
	r2 := h.assign(tp1, 1)
	if _, err := h.tx.AddPartition(tp2); err != nil {
		t.Fatal(err)
	}
	if err := h.tx.CanProduce(tp2); err == nil {
		t.Fatal("produce to a partition not yet added")
	}
	h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp2}}, false)
	step, err := h.tx.Commit()
	if err != nil || !step.WaitDrain || step.Send != nil {
		t.Fatalf("commit with batches in flight: %+v %v", step, err)
	}
	h.produce(r1, okAt(0))
	_, step = h.produce(r2, okAt(0))
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	step = h.endTxn(EndTxnResult{Code: kerr.ConcurrentTransactions.Code, Producer: NoProducerID})
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	if !step.Done || step.Err != nil || h.tx.State() != TxnReady || h.seq.Producer() != pid {
		t.Fatalf("commit done %+v, state %v", step, h.tx.State())
	}
	// Same epoch (transactions V1): sequences continue.
	h.begin(tp0)
	if _, got, _ := h.seq.Assign(tp0, 1, time.Time{}); got != id(pid, 2) {
		t.Fatalf("next transaction's first batch %v", got)
	}
}

// TestTxnAbortableProduceErrors: produce errors that need a new epoch make
// the transaction abortable (INVALID_PRODUCER_EPOCH is not fencing on
// Produce), fail the batches not on the wire, and the abort ends with
// InitProducerId(current ID, epoch); sequences restart at 0.
func TestTxnAbortableProduceErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		res  ProduceResult
		skip bool
	}{
		{"OUT_OF_ORDER_SEQUENCE_NUMBER", oosn, false},
		{"UNKNOWN_PRODUCER_ID", ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: 0}, false},
		{"INVALID_PRODUCER_EPOCH", answered(kerr.InvalidProducerEpoch.Code), false},
		{"TRANSACTION_ABORTABLE", answered(kerr.TransactionAbortable.Code), false},
		{"INVALID_RECORD", answered(kerr.InvalidRecord.Code), false},
		{"INVALID_PRODUCER_ID_MAPPING", answered(kerr.InvalidProducerIDMapping.Code), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0, tp1)
			r0 := h.assign(tp0, 1)
			h.produce(r0, okAt(7))
			r1 := h.assign(tp0, 1)
			r2 := h.assign(tp0, 1)
			r3 := h.assign(tp1, 1)
			h.produce(r3, answered(kerr.NotLeaderForPartition.Code)) // waiting for a resend
			d, step := h.produce(r1, c.res)
			if d.Abortable == nil || !d.Abortable.BumpEpoch || d.Abortable.SkipEndTxn != c.skip || d.Fatal != nil {
				t.Fatalf("decision %+v", d)
			}
			if got := kinds(d, map[BatchRef]string{r1: "r1", r3: "r3"}); got != "Failed(r1) Failed(r3)" &&
				got != "PossibleGap Failed(r1) Failed(r3)" && got != "ProvenGap Failed(r1) Failed(r3)" {
				t.Fatalf("outcomes %s", got)
			}
			if h.tx.State() != TxnAbortableError || step.Send != nil {
				t.Fatalf("state %v, step %+v", h.tx.State(), step)
			}
			if _, err := h.tx.Commit(); !errors.Is(err, ErrAbortRequired) {
				t.Fatalf("commit in abortable state: %v", err)
			}
			if err := h.tx.CanProduce(tp0); !errors.Is(err, ErrAbortRequired) {
				t.Fatalf("CanProduce: %v", err)
			}
			step, err := h.tx.Abort(false)
			if err != nil || !step.WaitDrain {
				t.Fatalf("abort: %+v %v", step, err)
			}
			_, step = h.produce(r2, oosn)
			if c.skip {
				h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
			} else {
				h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: false})
				step = h.endTxn(EndTxnResult{Producer: NoProducerID})
				h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
			}
			if h.tx.State() != TxnBumpingEpoch {
				t.Fatalf("state %v", h.tx.State())
			}
			bumped := ProducerID{pid.ID, pid.Epoch + 1}
			// A lost answer is retried with the same identity.
			step = h.init(InitProducerIDResult{Delivery: NoResponse})
			h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
			step = h.init(InitProducerIDResult{Producer: bumped})
			if !step.Done || step.Err != nil || h.tx.State() != TxnReady {
				t.Fatalf("bump done %+v, state %v", step, h.tx.State())
			}
			h.begin(tp0)
			if _, got, _ := h.seq.Assign(tp0, 1, time.Time{}); got != id(bumped, 0) {
				t.Fatalf("after bump %v", got)
			}
		})
	}
}

// TestTxnUnknownProducerIDRetentionNoAbort: UNKNOWN_PRODUCER_ID with a log
// start offset past everything acknowledged restarts the partition at
// sequence 0 under the same epoch, without aborting.
func TestTxnUnknownProducerIDRetentionNoAbort(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	r0 := h.assign(tp0, 2)
	h.produce(r0, okAt(10))
	r1 := h.assign(tp0, 1)
	d, _ := h.produce(r1, ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: 12})
	if d.Abortable != nil || h.tx.State() != TxnInTransaction {
		t.Fatalf("decision %+v, state %v", d, h.tx.State())
	}
	rs := outcomes[ResequencedNoLoss](d)
	if len(rs) != 1 || rs[0].From != id(pid, 2) || rs[0].To != id(pid, 0) {
		t.Fatalf("outcomes %+v", d.Outcomes)
	}
	if ref, got, ok := h.seq.NextResend(tp0); !ok || ref != r1 || got != id(pid, 0) {
		t.Fatalf("resend %v %v", got, ok)
	}
}

func TestTxnFatal(t *testing.T) {
	t.Run("PRODUCER_FENCED on produce", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		r := h.assign(tp0, 1)
		d, _ := h.produce(r, answered(kerr.ProducerFenced.Code))
		if !errors.Is(d.Fatal, kerr.ProducerFenced) || h.tx.State() != TxnFatalError {
			t.Fatalf("%+v %v", d, h.tx.State())
		}
		if _, err := h.tx.Abort(false); err == nil {
			t.Fatal("abort after fatal accepted")
		}
	})
	for _, code := range []int16{kerr.InvalidProducerEpoch.Code, kerr.ProducerFenced.Code, kerr.TransactionalIDAuthorizationFailed.Code} {
		t.Run("InitProducerId "+codeError(code).Error(), func(t *testing.T) {
			seq, _ := NewSequencer(Config{Transactional: true})
			tx, _ := NewTxnState(TxnConfig{TransactionalID: txnID}, seq)
			tx.InitTransactions()
			step, err := tx.HandleInitProducerID(InitProducerIDResult{Code: code})
			if err != nil || !step.Done || !errors.Is(step.Err, codeError(code)) || tx.State() != TxnFatalError {
				t.Fatalf("%+v %v %v", step, err, tx.State())
			}
		})
	}
	for _, code := range []int16{kerr.InvalidProducerEpoch.Code, kerr.ProducerFenced.Code, kerr.InvalidTxnState.Code} {
		t.Run("EndTxn "+codeError(code).Error(), func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			step, _ := h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
			step = h.endTxn(EndTxnResult{Code: code})
			if !step.Done || !errors.Is(step.Err, ErrProducerFatal) || h.tx.State() != TxnFatalError {
				t.Fatalf("%+v %v", step, h.tx.State())
			}
		})
	}
}

// TestTxnEndTxnUnknownIdentity: an EndTxn answered UNKNOWN_PRODUCER_ID or
// INVALID_PRODUCER_ID_MAPPING (the coordinator does not hold the
// producer's identity) did not end the transaction: a commit is abortable,
// and the abort is the epoch bump alone (no EndTxn); an abort goes straight
// to the bump. Java treats both codes so; UNKNOWN_PRODUCER_ID was fatal.
func TestTxnEndTxnUnknownIdentity(t *testing.T) {
	for _, code := range []int16{kerr.UnknownProducerID.Code, kerr.InvalidProducerIDMapping.Code} {
		name := kerr.ErrorForCode(code).(*kerr.Error).Message
		t.Run("commit "+name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			step, _ := h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
			step = h.endTxn(EndTxnResult{Code: code})
			if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) || h.tx.State() != TxnAbortableError {
				t.Fatalf("commit: step %+v, state %v", step, h.tx.State())
			}
			step, err := h.tx.Abort(false)
			if err != nil {
				t.Fatal(err)
			}
			h.bumpDone(step, "abort")
		})
		t.Run("abort "+name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			step, _ := h.tx.Abort(false)
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: false})
			h.bumpDone(h.endTxn(EndTxnResult{Code: code}), "abort")
		})
	}
}

func TestTxnInitProducerIDRetries(t *testing.T) {
	seq, _ := NewSequencer(Config{Transactional: true})
	tx, _ := NewTxnState(TxnConfig{TransactionalID: txnID}, seq)
	h := &txnHarness{t, seq, tx}
	step, _ := tx.InitTransactions()
	want := &InitProducerIDRequest{TransactionalID: txnID, Producer: NoProducerID}
	h.wantSend(step, want)
	step = h.init(InitProducerIDResult{Code: kerr.ConcurrentTransactions.Code})
	h.wantSend(step, want)
	step = h.init(InitProducerIDResult{Code: kerr.NotCoordinator.Code})
	h.wantSend(step, want)
	if !step.FindCoordinator {
		t.Fatal("NOT_COORDINATOR without coordinator lookup")
	}
	step = h.init(InitProducerIDResult{Delivery: NotSent})
	h.wantSend(step, want)
	if p := tx.Poll(); p.Send != nil {
		t.Fatal("second request while one is outstanding")
	}
	step = h.init(InitProducerIDResult{Producer: pid})
	if !step.Done || tx.State() != TxnReady {
		t.Fatalf("%+v", step)
	}
}

// TestTxnEndTxnV5AdoptsNextEpoch: transactions V2 bump on every EndTxn; the
// answer's identity is adopted and sequences restart, including a new
// producer ID when the epoch overflows (KAFKA-18660).
func TestTxnEndTxnV5AdoptsNextEpoch(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true, ImplicitAddPartitions: true})
	h.begin(tp0)
	r := h.assign(tp0, 3)
	h.produce(r, okAt(0))
	step, _ := h.tx.Commit()
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	next := ProducerID{pid.ID, pid.Epoch + 1}
	step = h.endTxn(EndTxnResult{Producer: next})
	if !step.Done || h.seq.Producer() != next || h.tx.State() != TxnReady {
		t.Fatalf("%+v", step)
	}
	h.begin(tp0)
	r = h.assign(tp0, 1)
	if got, _ := h.seq.Identity(r); got != id(next, 0) {
		t.Fatalf("after TV2 commit %v", got)
	}
	h.produce(r, okAt(3))
	// Overflow: the coordinator rotates the producer ID.
	step, _ = h.tx.Abort(false)
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: next, Commit: false})
	rotated := ProducerID{ID: 4242, Epoch: 0}
	step = h.endTxn(EndTxnResult{Producer: rotated})
	if !step.Done || h.seq.Producer() != rotated {
		t.Fatalf("%+v %v", step, h.seq.Producer())
	}
	h.begin(tp0)
	if _, got, _ := h.seq.Assign(tp0, 1, time.Time{}); got != id(rotated, 0) {
		t.Fatalf("after rotation %v", got)
	}
}

// TestTxnEndTxnLostAnswer: an EndTxn resent after a lost answer must not
// leave the same epoch for the next transaction, or a delayed duplicate
// could end it (KAFKA-17754): bump first.
func TestTxnEndTxnLostAnswer(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	step := h.commitAfterLostAnswer()
	step = h.init(InitProducerIDResult{Producer: ProducerID{pid.ID, pid.Epoch + 1}})
	if !step.Done || h.tx.State() != TxnReady || h.seq.Producer().Epoch != pid.Epoch+1 {
		t.Fatalf("%+v", step)
	}
}

// TestTxnAbortWithoutDisturbanceNoBump: aborting a transaction whose batches
// were all acknowledged needs no new epoch.
func TestTxnAbortWithoutDisturbanceNoBump(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, okAt(0))
	step, _ := h.tx.Abort(false)
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	if !step.Done || h.tx.State() != TxnReady || h.seq.Producer() != pid {
		t.Fatalf("%+v %v", step, h.tx.State())
	}
	h.begin(tp0)
	if _, got, _ := h.seq.Assign(tp0, 1, time.Time{}); got != id(pid, 1) {
		t.Fatalf("%v", got)
	}
}

// TestTxnBumpWithoutKIP360Coordinator: a coordinator older than
// InitProducerId v3 cannot bump a given epoch; the bump re-initializes.
func TestTxnBumpWithoutKIP360Coordinator(t *testing.T) {
	h := newTxn(t, TxnConfig{})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, oosn)
	step, _ := h.tx.Abort(false)
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: NoProducerID})
}

// TestTxnExpiryIsAbortable: a delivery timeout in a transaction makes it
// abortable with a bump (KAFKA-18579).
func TestTxnExpiryIsAbortable(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	t0 := time.Unix(100, 0)
	if _, _, err := h.seq.Assign(tp0, 1, t0); err != nil {
		t.Fatal(err)
	}
	d := h.seq.Expire(t0)
	h.tx.HandleProduce(d)
	if d.Abortable == nil || !d.Abortable.BumpEpoch || !errors.Is(d.Abortable.Err, ErrDeliveryTimeout) || h.tx.State() != TxnAbortableError {
		t.Fatalf("%+v %v", d, h.tx.State())
	}
}

// TestTxnAbortableDuringCommit: a produce error while committing fails the
// commit (Done with ErrAbortRequired).
func TestTxnAbortableDuringCommit(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.tx.Commit()
	_, step := h.produce(r, answered(kerr.InvalidProducerEpoch.Code))
	if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || h.tx.State() != TxnAbortableError {
		t.Fatalf("%+v %v", step, h.tx.State())
	}
}

// TestTxnNewIncarnation: tp0's topic is deleted and created again. A batch
// of the open transaction that tp0 acknowledged went with the deleted log:
// the transaction becomes abortable with ErrTopicIDChanged (a commit
// waiting for its batches ends with ErrAbortRequired), and the abort needs
// no new epoch. Batches acknowledged in an earlier transaction, on another
// partition, or not yet acknowledged (they are resequenced to the new
// incarnation) do not; nor does a recreation learned once EndTxn is sent.
func TestTxnNewIncarnation(t *testing.T) {
	for _, c := range []struct {
		name      string
		setup     func(h *txnHarness) // ends in the state the recreation is learned in
		abortable bool
	}{
		{"acked in the open transaction", func(h *txnHarness) {
			h.begin(tp0)
			h.produce(h.assign(tp0, 1), okAt(0))
		}, true},
		{"acked, then in flight", func(h *txnHarness) {
			h.begin(tp0)
			h.produce(h.assign(tp0, 1), okAt(0))
			h.assign(tp0, 1)
		}, true},
		{"acked while committing", func(h *txnHarness) {
			h.begin(tp0, tp1)
			h.produce(h.assign(tp0, 1), okAt(0))
			h.assign(tp1, 1)
			if step, err := h.tx.Commit(); err != nil || !step.WaitDrain {
				h.t.Fatalf("commit: %+v %v", step, err)
			}
		}, true},
		{"acked in an earlier transaction", func(h *txnHarness) {
			h.begin(tp0)
			h.produce(h.assign(tp0, 1), okAt(0))
			h.tx.Commit()
			h.endTxn(EndTxnResult{Producer: NoProducerID})
			h.begin(tp0)
		}, false},
		{"acked on another partition", func(h *txnHarness) {
			h.begin(tp0, tp1)
			h.produce(h.assign(tp1, 1), okAt(0))
			h.assign(tp0, 1)
		}, false},
		{"in flight only", func(h *txnHarness) {
			h.begin(tp0)
			h.assign(tp0, 1)
		}, false},
		{"EndTxn sent", func(h *txnHarness) {
			h.begin(tp0)
			h.produce(h.assign(tp0, 1), okAt(0))
			step, _ := h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			c.setup(h)
			before := h.tx.State()
			step := h.tx.NewIncarnation(tp0)
			if !c.abortable {
				if h.tx.State() != before || step.Decision.Abortable != nil || step.Done {
					t.Fatalf("state %v → %v, step %+v; want unchanged", before, h.tx.State(), step)
				}
				return
			}
			if h.tx.State() != TxnAbortableError || !errors.Is(h.tx.Err(), kepocherrors.ErrTopicIDChanged) || h.tx.BumpRequired() {
				t.Fatalf("state %v, err %v, bump %v; want abortable with ErrTopicIDChanged, no bump", h.tx.State(), h.tx.Err(), h.tx.BumpRequired())
			}
			if a := step.Decision.Abortable; a == nil || !errors.Is(a.Err, kepocherrors.ErrTopicIDChanged) {
				t.Fatalf("decision %+v; want Abortable ErrTopicIDChanged", step.Decision)
			}
			if before == TxnCommitting {
				if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || !errors.Is(step.Err, kepocherrors.ErrTopicIDChanged) {
					t.Fatalf("commit step %+v; want Done with ErrAbortRequired wrapping ErrTopicIDChanged", step)
				}
			}
			if _, err := h.tx.Commit(); !errors.Is(err, ErrAbortRequired) || !errors.Is(err, kepocherrors.ErrTopicIDChanged) {
				t.Fatalf("Commit: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
			}
		})
	}
}

// TestTxnNewIncarnationAbortThenCommit: after the abort the recreation
// called for (EndTxn abort, no bump), the next transaction's batch to tp0
// starts its sequences afresh and commits.
func TestTxnNewIncarnationAbortThenCommit(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	h.produce(h.assign(tp0, 2), okAt(0))
	h.tx.NewIncarnation(tp0)
	step, err := h.tx.Abort(false)
	if err != nil {
		t.Fatal(err)
	}
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: false})
	if step = h.endTxn(EndTxnResult{Producer: NoProducerID}); !step.Done || step.Err != nil || h.tx.State() != TxnReady || h.seq.Producer() != pid {
		t.Fatalf("abort: %+v, state %v", step, h.tx.State())
	}
	h.begin(tp0)
	r := h.assign(tp0, 1)
	if got := h.seq.batches[r].id; got != id(pid, 0) {
		t.Fatalf("first batch of the new incarnation: %v; want sequence 0 under %v", got, pid)
	}
	h.produce(r, okAt(0))
	step, _ = h.tx.Commit()
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	if step = h.endTxn(EndTxnResult{Producer: NoProducerID}); !step.Done || step.Err != nil {
		t.Fatalf("commit: %+v", step)
	}
}

func TestTxnAddPartitionsErrors(t *testing.T) {
	cases := []struct {
		code  int16
		state TxnStateKind
		bump  bool
		skip  bool
		retry bool
	}{
		{kerr.ConcurrentTransactions.Code, TxnInTransaction, false, false, true},
		{kerr.CoordinatorLoadInProgress.Code, TxnInTransaction, false, false, true},
		{kerr.UnknownTopicOrPartition.Code, TxnInTransaction, false, false, true},
		{kerr.OperationNotAttempted.Code, TxnInTransaction, false, false, true},
		{kerr.UnknownProducerID.Code, TxnAbortableError, true, false, false},
		{kerr.InvalidProducerIDMapping.Code, TxnAbortableError, true, true, false},
		{kerr.TopicAuthorizationFailed.Code, TxnAbortableError, false, false, false},
		{kerr.TransactionAbortable.Code, TxnAbortableError, false, false, false},
		{kerr.InvalidProducerEpoch.Code, TxnFatalError, false, false, false},
		{kerr.ProducerFenced.Code, TxnFatalError, false, false, false},
		{kerr.InvalidTxnState.Code, TxnFatalError, false, false, false},
		{kerr.TransactionalIDAuthorizationFailed.Code, TxnFatalError, false, false, false},
	}
	for _, c := range cases {
		t.Run(codeError(c.code).Error(), func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.tx.Begin()
			step, _ := h.tx.AddPartition(tp0)
			h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
			step, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp0, Code: c.code}}, false)
			if err != nil || h.tx.State() != c.state || h.tx.bumpRequired != c.bump || h.tx.skipEndTxn != c.skip {
				t.Fatalf("step %+v %v: state %v bump %v skip %v", step, err, h.tx.State(), h.tx.bumpRequired, h.tx.skipEndTxn)
			}
			if c.retry {
				h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
			}
		})
	}
}

func TestTxnTransitions(t *testing.T) {
	seq, _ := NewSequencer(Config{Transactional: true})
	if _, err := NewTxnState(TxnConfig{}, seq); err == nil {
		t.Fatal("empty transactional ID accepted")
	}
	idem, _ := NewSequencer(Config{})
	if _, err := NewTxnState(TxnConfig{TransactionalID: "x"}, idem); err == nil {
		t.Fatal("idempotent Sequencer accepted")
	}
	tx, _ := NewTxnState(TxnConfig{TransactionalID: "x"}, seq)
	if err := tx.Begin(); !errors.Is(err, ErrTxnState) {
		t.Fatalf("Begin before init: %v", err)
	}
	if _, err := tx.Commit(); !errors.Is(err, ErrTxnState) {
		t.Fatalf("Commit before init: %v", err)
	}
	h := newTxn(t, TxnConfig{})
	if _, err := h.tx.InitTransactions(); !errors.Is(err, ErrTxnState) {
		t.Fatalf("init twice: %v", err)
	}
	if _, err := h.tx.Abort(false); err == nil {
		t.Fatal("abort without a transaction accepted")
	}
	h.begin(tp0)
	if err := h.tx.Begin(); !errors.Is(err, ErrTxnState) {
		t.Fatalf("nested Begin: %v", err)
	}
	if _, err := h.tx.HandleEndTxn(EndTxnResult{}); !errors.Is(err, ErrTxnState) {
		t.Fatalf("EndTxn answer without request: %v", err)
	}
	// Every allowed edge is exercised by the tests above; the table
	// itself must not allow leaving FatalError.
	for to, from := range txnAllowedFrom {
		for _, f := range from {
			if f == TxnFatalError {
				t.Fatalf("%v reachable from FatalError", to)
			}
		}
	}
	if TxnBumpingEpoch.String() != "BumpingEpoch" || TxnStateKind(math.MaxUint8).String() == "" {
		t.Fatal("state names")
	}
}

// TestTxnEmptyTransactionEndsLocally: a transaction that never reached the
// coordinator is ended without EndTxn (which would be refused in state
// Empty).
func TestTxnEmptyTransactionEndsLocally(t *testing.T) {
	for _, commit := range []bool{true, false} {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		if err := h.tx.Begin(); err != nil {
			t.Fatal(err)
		}
		var step TxnStep
		var err error
		if commit {
			step, err = h.tx.Commit()
		} else {
			step, err = h.tx.Abort(false)
		}
		if err != nil || !step.Done || step.Err != nil || step.Send != nil || h.tx.State() != TxnReady {
			t.Fatalf("commit=%v: %+v %v %v", commit, step, err, h.tx.State())
		}
	}
}

// TestTxnUncertainStart: an AddPartitionsToTxn without an answer may have
// started the transaction, so the abort sends EndTxn; INVALID_TXN_STATE then
// means it never started: ended, with a bump to leave no doubt.
func TestTxnUncertainStart(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.tx.Begin()
	step, _ := h.tx.AddPartition(tp0)
	h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
	step, _ = h.tx.HandleAddPartitions(NoResponse, nil, false)
	h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
	step, err := h.tx.Abort(false)
	if err != nil || step.Send != nil {
		t.Fatalf("abort with an add on the wire: %+v %v", step, err)
	}
	step, _ = h.tx.HandleAddPartitions(NoResponse, nil, false)
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	step = h.endTxn(EndTxnResult{Code: kerr.InvalidTxnState.Code})
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
	step = h.init(InitProducerIDResult{Producer: ProducerID{pid.ID, pid.Epoch + 1}})
	if !step.Done || h.tx.State() != TxnReady {
		t.Fatalf("%+v %v", step, h.tx.State())
	}
}

// TestTxnRefusedResendMayHaveStarted: an AddPartitionsToTxn whose first
// attempt was written and got no answer, resent by the transport and
// refused, may still have been applied by that first attempt: the
// transaction may have started, so the abort sends EndTxn (judged by the
// refusal alone, the abort ended it locally and left the coordinator's
// transaction open until its timeout). The same refusal of a request sent
// once leaves nothing to end.
func TestTxnRefusedResendMayHaveStarted(t *testing.T) {
	for _, code := range []int16{kerr.TransactionAbortable.Code, kerr.TopicAuthorizationFailed.Code} {
		for _, resent := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, resent %v", kerr.ErrorForCode(code).(*kerr.Error).Message, resent), func(t *testing.T) {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				h.tx.Begin()
				step, _ := h.tx.AddPartition(tp0)
				h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
				if _, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp0, Code: code}}, resent); err != nil {
					t.Fatal(err)
				}
				if h.tx.State() != TxnAbortableError {
					t.Fatalf("state %v after a refused add", h.tx.State())
				}
				step, err := h.tx.Abort(false)
				if err != nil {
					t.Fatal(err)
				}
				if !resent {
					if !step.Done || step.Err != nil || step.Send != nil || h.tx.State() != TxnReady {
						t.Fatalf("abort of a transaction no add reached: %+v, state %v; want ended locally", step, h.tx.State())
					}
					return
				}
				abort := &EndTxnRequest{TransactionalID: txnID, Producer: pid}
				if step.Done || step.Send == nil {
					t.Fatalf("abort after a refused resend: %+v; want EndTxn(abort) sent", step)
				}
				h.wantSend(step, abort)
				step = h.endTxn(EndTxnResult{Producer: NoProducerID})
				if !step.Done || step.Err != nil || h.tx.State() != TxnReady {
					t.Fatalf("EndTxn(abort) answered NONE: %+v, state %v", step, h.tx.State())
				}
			})
		}
	}
}

// TestTxnV2AbortAfterUnconfirmedProduce: with implicit adds, a batch sent
// may have started the transaction, so the abort sends EndTxn (a V2
// coordinator accepts aborting an empty transaction) and adopts the next
// epoch it returns.
func TestTxnV2AbortAfterUnconfirmedProduce(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true, ImplicitAddPartitions: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, ProduceResult{Delivery: NoResponse})
	step, _ := h.tx.Abort(false)
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	next := ProducerID{pid.ID, pid.Epoch + 1}
	step = h.endTxn(EndTxnResult{Producer: next})
	if !step.Done || h.seq.Producer() != next || h.tx.State() != TxnReady {
		t.Fatalf("%+v %v", step, h.tx.State())
	}
}

// TRANSACTION_ABORTABLE answering the abort's epoch bump asks for the abort
// again (ErrAbortRequired): the state is AbortableError, and the second
// abort ends the transaction and bumps the epoch (it stayed in
// BumpingEpoch, refusing every call, for good).
func TestTxnBumpAnsweredTransactionAbortable(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, oosn) // abortable, bump after the abort
	step, err := h.tx.Abort(false)
	if err != nil {
		t.Fatal(err)
	}
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
	step = h.init(InitProducerIDResult{Code: kerr.TransactionAbortable.Code, Producer: NoProducerID})
	if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || h.tx.State() != TxnAbortableError {
		t.Fatalf("TRANSACTION_ABORTABLE on the bump: step %+v, state %v; want ErrAbortRequired in AbortableError", step, h.tx.State())
	}
	if step, err = h.tx.Abort(false); err != nil {
		t.Fatalf("Abort after ErrAbortRequired: %v (state %v)", err, h.tx.State())
	}
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	step = h.endTxn(EndTxnResult{Producer: NoProducerID})
	h.bumpDone(step, "second abort")
}

// TestTxnV2CommitRefusedAfterAckedProduce: with implicit adds, an
// acknowledged batch means the coordinator had the transaction, so
// INVALID_TXN_STATE answering its commit is a failure, never "the
// transaction never started" (which reported the commit successful
// although its records may have been aborted).
func TestTxnV2CommitRefusedAfterAckedProduce(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true, ImplicitAddPartitions: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, okAt(0))
	step, _ := h.tx.Commit()
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	step = h.endTxn(EndTxnResult{Code: kerr.InvalidTxnState.Code})
	if _, ok := step.Send.(*InitProducerIDRequest); ok {
		step = h.init(InitProducerIDResult{Producer: ProducerID{pid.ID, pid.Epoch + 1}})
	}
	if !step.Done || step.Err == nil {
		t.Fatalf("commit refused with INVALID_TXN_STATE: %+v, state %v", step, h.tx.State())
	}
}

// TestOffsetsCode: the verdict on each AddOffsetsToTxn/TxnOffsetCommit
// error code (Java's TransactionManager; a code it does not expect is
// abortable here, not fatal).
func TestOffsetsCode(t *testing.T) {
	for _, c := range []struct {
		code  *kerr.Error // nil: NONE
		want  offsetsVerdict
		maybe bool // may have been applied all the same
	}{
		{nil, offsetsOK, false},
		// Each may come after the coordinator's log append
		// (answeredAfterAppend); HandleOffsets counts it unless the
		// lookup refused.
		{kerr.NotCoordinator, offsetsRetry, true},
		{kerr.CoordinatorNotAvailable, offsetsRetry, true},
		{kerr.CoordinatorLoadInProgress, offsetsRetry, true},
		{kerr.ConcurrentTransactions, offsetsRetry, false},
		{kerr.UnknownTopicOrPartition, offsetsRetry, false},
		{kerr.RequestTimedOut, offsetsRetry, true},
		{kerr.NetworkException, offsetsRetry, true},
		{kerr.UnknownProducerID, offsetsAbortableBump, false},
		{kerr.InvalidProducerIDMapping, offsetsAbortableRemap, false},
		{kerr.ProducerFenced, offsetsFatal, false},
		{kerr.InvalidProducerEpoch, offsetsFatal, false},
		{kerr.TransactionalIDAuthorizationFailed, offsetsFatal, false},
		{kerr.UnsupportedForMessageFormat, offsetsFatal, false},
		{kerr.InvalidTxnState, offsetsFatal, false},
		{kerr.GroupAuthorizationFailed, offsetsAbortable, false},
		{kerr.TransactionAbortable, offsetsAbortable, false},
		{kerr.UnknownMemberID, offsetsAbortable, false},
		{kerr.IllegalGeneration, offsetsAbortable, false},
		{kerr.FencedInstanceID, offsetsAbortable, false},
		{kerr.StaleMemberEpoch, offsetsAbortable, false},
		{kerr.UnknownServerError, offsetsAbortable, false},
	} {
		var code int16
		if c.code != nil {
			code = c.code.Code
		}
		if v, maybe := offsetsCode(code); v != c.want || maybe != c.maybe {
			t.Errorf("offsetsCode(%v) = %v, %v; want %v, %v", c.code, v, maybe, c.want, c.maybe)
		}
	}
}

// offsets feeds HandleOffsets one attempt.
func (h *txnHarness) offsets(r OffsetsResult) OffsetsStep {
	h.t.Helper()
	return h.tx.HandleOffsets(r)
}

func codes(cs ...*kerr.Error) []int16 {
	out := make([]int16, len(cs))
	for i, c := range cs {
		if c != nil {
			out[i] = c.Code
		}
	}
	return out
}

// TestTxnOffsetsAbortable: an offsets request refused with an abortable
// code makes the transaction abortable; the abort ends as the code asks
// (UNKNOWN_PRODUCER_ID: EndTxn, then a new epoch; INVALID_PRODUCER_ID_MAPPING:
// InitProducerId alone), including when nothing else started the
// transaction. A TxnOffsetCommit answer is judged by its worst partition.
func TestTxnOffsetsAbortable(t *testing.T) {
	for _, c := range []struct {
		name    string
		res     OffsetsResult
		started bool // partitions were added before
		endTxn  bool // the abort sends EndTxn
		bump    bool // and ends with a new epoch
	}{
		{"AddOffsetsToTxn GROUP_AUTHORIZATION_FAILED", OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.GroupAuthorizationFailed)}, true, true, false},
		{"AddOffsetsToTxn GROUP_AUTHORIZATION_FAILED, offsets only", OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.GroupAuthorizationFailed)}, false, false, false},
		{"AddOffsetsToTxn UNKNOWN_PRODUCER_ID", OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.UnknownProducerID)}, true, true, true},
		{"AddOffsetsToTxn UNKNOWN_PRODUCER_ID, offsets only", OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.UnknownProducerID)}, false, false, true},
		{"AddOffsetsToTxn INVALID_PRODUCER_ID_MAPPING", OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.InvalidProducerIDMapping)}, true, false, true},
		{"AddOffsetsToTxn lost answer", OffsetsResult{Request: OffsetsAdd, Delivery: NoResponse, Err: ErrDeliveryTimeout}, false, true, true},
		{"AddOffsetsToTxn not sent", OffsetsResult{Request: OffsetsAdd, Delivery: NotSent, Err: ErrDeliveryTimeout}, false, false, false},
		{"TxnOffsetCommit ILLEGAL_GENERATION", OffsetsResult{Request: OffsetsCommit, Codes: codes(nil, kerr.IllegalGeneration)}, true, true, false},
		{"TxnOffsetCommit worst partition", OffsetsResult{Request: OffsetsCommit, Codes: codes(kerr.CoordinatorLoadInProgress, kerr.UnknownProducerID, kerr.GroupAuthorizationFailed)}, true, true, true},
		{"TxnOffsetCommit INVALID_PRODUCER_ID_MAPPING", OffsetsResult{Request: OffsetsCommit, Codes: codes(kerr.InvalidProducerIDMapping)}, true, false, true},
		{"TxnOffsetCommit lost answer", OffsetsResult{Request: OffsetsCommit, Delivery: NoResponse, Err: ErrDeliveryTimeout}, true, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			if c.started {
				h.begin(tp0)
			} else {
				h.begin()
			}
			if c.res.Request == OffsetsCommit {
				if st := h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(nil)}); st.Retry || st.Err != nil {
					t.Fatalf("AddOffsetsToTxn NONE: %+v", st)
				}
			}
			st := h.offsets(c.res)
			if st.Retry || !errors.Is(st.Err, ErrAbortRequired) || h.tx.State() != TxnAbortableError {
				t.Fatalf("step %+v, state %v", st, h.tx.State())
			}
			step, err := h.tx.Abort(false)
			if err != nil {
				t.Fatal(err)
			}
			if c.endTxn {
				h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: false})
				step = h.endTxn(EndTxnResult{Producer: NoProducerID})
			}
			if c.bump {
				h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
				step = h.init(InitProducerIDResult{Producer: ProducerID{pid.ID, pid.Epoch + 1}})
			}
			if !step.Done || step.Err != nil || h.tx.State() != TxnReady {
				t.Fatalf("abort: %+v, state %v", step, h.tx.State())
			}
		})
	}
}

// TestTxnOffsetsFatalAndRetried: fencing codes are fatal; transient ones
// are retried while the transaction is open, but not once it is abortable.
func TestTxnOffsetsFatalAndRetried(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.TransactionalIDAuthorizationFailed} {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		st := h.offsets(OffsetsResult{Request: OffsetsCommit, Codes: codes(nil, code)})
		if !errors.Is(st.Err, ErrProducerFatal) || !errors.Is(st.Err, code) || h.tx.State() != TxnFatalError {
			t.Fatalf("%s: %+v, state %v", code.Message, st, h.tx.State())
		}
	}
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	for _, code := range []*kerr.Error{kerr.ConcurrentTransactions, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress} {
		if st := h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(code)}); !st.Retry || st.Err != nil {
			t.Fatalf("%s: %+v", code.Message, st)
		}
	}
	r := h.assign(tp0, 1)
	h.produce(r, answered(kerr.TransactionAbortable.Code))
	if st := h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(kerr.ConcurrentTransactions)}); st.Retry || !errors.Is(st.Err, ErrAbortRequired) {
		t.Fatalf("retriable answer in an abortable transaction: %+v", st)
	}
}

// TestTxnOffsetsAddedWhileAbortable: AddOffsetsToTxn answered NONE after the
// transaction turned abortable (a record expired unsent, before any
// partition joined): the coordinator has the transaction, so the abort
// must end it with EndTxn, and the call fails rather than go on to stage
// offsets.
func TestTxnOffsetsAddedWhileAbortable(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin()
	h.tx.HandleProduce(Decision{Abortable: &AbortableError{Err: ErrDeliveryTimeout}})
	st := h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(nil)})
	if st.Retry || !errors.Is(st.Err, ErrAbortRequired) {
		t.Fatalf("AddOffsetsToTxn NONE in an abortable transaction: %+v", st)
	}
	step, err := h.tx.Abort(false)
	if err != nil {
		t.Fatal(err)
	}
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: false})
}

// TestTxnOffsetsMaybeAppliedBump: an offsets request that may have been
// applied without an answer (no answer, resent by the transport,
// REQUEST_TIMED_OUT) may still be applied late: the transaction, committed
// or aborted, ends with a new epoch, so that the late copy is fenced rather
// than staged in the next transaction. Under transactions V2 the EndTxn
// answer's new epoch is that bump.
func TestTxnOffsetsMaybeAppliedBump(t *testing.T) {
	for _, c := range []struct {
		name   string
		res    OffsetsResult
		commit bool
	}{
		{"resent TxnOffsetCommit, commit", OffsetsResult{Request: OffsetsCommit, Codes: codes(nil), Resent: true}, true},
		{"resent AddOffsetsToTxn, commit", OffsetsResult{Request: OffsetsAdd, Codes: codes(nil), Resent: true}, true},
		{"REQUEST_TIMED_OUT then NONE, commit", OffsetsResult{Request: OffsetsCommit, Codes: codes(kerr.RequestTimedOut)}, true},
		{"resent TxnOffsetCommit, abort", OffsetsResult{Request: OffsetsCommit, Codes: codes(nil), Resent: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			if c.res.Request == OffsetsCommit {
				h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(nil)})
			}
			if st := h.offsets(c.res); st.Err != nil {
				t.Fatalf("%+v", st)
			}
			if c.res.Codes[0] != 0 { // retried, then answered
				if st := h.offsets(OffsetsResult{Request: c.res.Request, Codes: codes(nil)}); st.Retry || st.Err != nil {
					t.Fatalf("%+v", st)
				}
			}
			var step TxnStep
			var err error
			if c.commit {
				step, err = h.tx.Commit()
			} else {
				step, err = h.tx.Abort(false)
			}
			if err != nil {
				t.Fatal(err)
			}
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: c.commit})
			step = h.endTxn(EndTxnResult{Producer: NoProducerID})
			bumped := h.bumpDone(step, "end")
			// The next transaction, with nothing uncertain, ends without a bump.
			h.begin(tp0)
			step, _ = h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: bumped, Commit: true})
			if step = h.endTxn(EndTxnResult{Producer: NoProducerID}); !step.Done || step.Err != nil {
				t.Fatalf("next commit: %+v", step)
			}
		})
	}
	t.Run("transactions V2: the EndTxn answer's epoch", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(nil)})
		h.offsets(OffsetsResult{Request: OffsetsCommit, Codes: codes(nil), Resent: true})
		step, _ := h.tx.Commit()
		h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
		bumped := ProducerID{pid.ID, pid.Epoch + 1}
		step = h.endTxn(EndTxnResult{Producer: bumped})
		if !step.Done || step.Err != nil || step.Send != nil || h.seq.Producer() != bumped {
			t.Fatalf("%+v", step)
		}
	})
}

// TestTxnCommitStandsWhenItsBumpFails: EndTxn(commit) answered NONE after
// an attempt without an answer commits the transaction; the epoch bump
// that follows (KAFKA-17754) is not part of it. When the bump is refused
// (fenced by a new instance, or TRANSACTION_ABORTABLE), the commit still
// reports success: it reported the refusal, so the application believed
// a committed transaction failed (and, told ErrAbortRequired, aborted it:
// EndTxn(abort) of a committed transaction, refused, made it fatal).
func TestTxnCommitStandsWhenItsBumpFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		code  *kerr.Error
		state TxnStateKind
	}{
		{"fenced", kerr.ProducerFenced, TxnFatalError},
		{"abortable", kerr.TransactionAbortable, TxnAbortableError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			step := h.commitAfterLostAnswer()
			step = h.init(InitProducerIDResult{Code: tc.code.Code, Producer: NoProducerID})
			if !step.Done || step.Err != nil {
				t.Fatalf("bump answered %v after the commit: the commit reports %+v; want success (it committed)", tc.code, step)
			}
			if h.tx.State() != tc.state {
				t.Fatalf("state %v, want %v", h.tx.State(), tc.state)
			}
			if tc.state != TxnAbortableError {
				if err := h.tx.Begin(); !errors.Is(err, ErrProducerFatal) {
					t.Fatalf("Begin after the fenced bump: %v; want ErrProducerFatal", err)
				}
				return
			}
			// The abort is the bump alone: the transaction is over.
			step, err := h.tx.Abort(false)
			if err != nil {
				t.Fatal(err)
			}
			h.bumpDone(step, "abort after the failed bump")
		})
	}
}

// TestTxnCallsAfterFatalSayFatal: once the producer is fatal, every
// operation refuses with ErrProducerFatal wrapping the cause (as Java's
// maybeFailWithError). InitTransactions said only "not allowed in state
// FatalError" (ErrTxnState), so an application that recreates its
// producer on ErrProducerFatal kept a fenced one.
func TestTxnCallsAfterFatalSayFatal(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	h.begin(tp0)
	r := h.assign(tp0, 1)
	h.produce(r, answered(kerr.ProducerFenced.Code))
	if h.tx.State() != TxnFatalError {
		t.Fatalf("state %v", h.tx.State())
	}
	calls := map[string]func() error{
		"InitTransactions": func() error { _, err := h.tx.InitTransactions(); return err },
		"Begin":            h.tx.Begin,
		"Commit":           func() error { _, err := h.tx.Commit(); return err },
		"Abort":            func() error { _, err := h.tx.Abort(false); return err },
		"AddPartition":     func() error { _, err := h.tx.AddPartition(tp0); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrProducerFatal) || !errors.Is(err, kerr.ProducerFenced) {
			t.Errorf("%s after PRODUCER_FENCED: %v; want ErrProducerFatal wrapping it", name, err)
		}
	}
}

// TestTxnStopDuringCommit: the I/O layer stops (Close) while a commit is
// under way. A commit no EndTxn(commit) of which can have reached the
// coordinator did not commit: ErrAbortRequired and ErrClosed, StoppedCommit.
// One whose EndTxn is on the wire, or an attempt of which got no answer,
// has an unknown outcome; one answered NONE with only its bump left
// committed.
func TestTxnStopDuringCommit(t *testing.T) {
	notCommitted := func(t *testing.T, h *txnHarness, step TxnStep) {
		t.Helper()
		if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || !errors.Is(step.Err, kepocherrors.ErrClosed) ||
			errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) || !h.tx.StoppedCommit() || h.tx.State() != TxnAbortableError {
			t.Fatalf("stopped commit: %+v (StoppedCommit %v, state %v); want not committed", step, h.tx.StoppedCommit(), h.tx.State())
		}
	}
	unknown := func(t *testing.T, h *txnHarness, step TxnStep) {
		t.Helper()
		if !step.Done || !errors.Is(step.Err, kepocherrors.ErrClosed) || !errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) ||
			errors.Is(step.Err, ErrAbortRequired) || h.tx.StoppedCommit() {
			t.Fatalf("stopped commit: %+v (StoppedCommit %v); want an unknown outcome", step, h.tx.StoppedCommit())
		}
	}
	commitReq := &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true}
	t.Run("waiting for its batches", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		h.assign(tp0, 1)
		if step, _ := h.tx.Commit(); !step.WaitDrain {
			t.Fatalf("commit with a batch in flight: %+v", step)
		}
		notCommitted(t, h, h.tx.Stop(false, nil))
	})
	t.Run("EndTxn refused, resend not sent", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		step, _ := h.tx.Commit()
		h.wantSend(step, commitReq)
		step = h.endTxn(EndTxnResult{Code: kerr.ConcurrentTransactions.Code})
		h.wantSend(step, commitReq)
		notCommitted(t, h, h.tx.Stop(true, nil))
	})
	t.Run("EndTxn refused, resend sent", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		step, _ := h.tx.Commit()
		h.wantSend(step, commitReq)
		h.endTxn(EndTxnResult{Code: kerr.ConcurrentTransactions.Code})
		unknown(t, h, h.tx.Stop(false, nil))
	})
	// Kafka's coordinator answers COORDINATOR_NOT_AVAILABLE when the
	// append of PrepareCommit to its log timed out or failed after the
	// append: a coordinator that loads the log completes the commit. It
	// was taken for a refusal before anything was applied: not committed.
	t.Run("EndTxn answered COORDINATOR_NOT_AVAILABLE, resend not sent", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		step, _ := h.tx.Commit()
		h.wantSend(step, commitReq)
		step = h.endTxn(EndTxnResult{Code: kerr.CoordinatorNotAvailable.Code})
		h.wantSend(step, commitReq)
		unknown(t, h, h.tx.Stop(true, nil))
	})
	t.Run("EndTxn's coordinator lookup refused COORDINATOR_NOT_AVAILABLE, resend not sent", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		step, _ := h.tx.Commit()
		h.wantSend(step, commitReq)
		step = h.endTxn(EndTxnResult{Code: kerr.CoordinatorNotAvailable.Code, Lookup: true})
		h.wantSend(step, commitReq)
		notCommitted(t, h, h.tx.Stop(true, nil))
	})
	t.Run("EndTxn answer lost, resend not sent", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.begin(tp0)
		step, _ := h.tx.Commit()
		h.wantSend(step, commitReq)
		h.endTxn(EndTxnResult{Delivery: NoResponse})
		unknown(t, h, h.tx.Stop(true, nil))
	})
	t.Run("committed, bump left", func(t *testing.T) {
		h := newTxn(t, TxnConfig{CoordinatorBumps: true})
		h.commitAfterLostAnswer()
		if step := h.tx.Stop(false, nil); !step.Done || step.Err != nil {
			t.Fatalf("stopped bump after a committed EndTxn: %+v; want success", step)
		}
	})
}

// TestTxnStopCarriesCause: the operation Stop ends reports why the I/O
// layer stopped (a shared metadata refresher closed under the producer,
// say), not a bare ErrClosed: its error matches errors.ErrClosed and the
// cause, whether or not the cause matches ErrClosed itself.
func TestTxnStopCarriesCause(t *testing.T) {
	ops := []struct {
		name  string
		start func(t *testing.T) *txnHarness
		want  []error // besides ErrClosed and the cause
	}{
		{"InitTransactions", func(t *testing.T) *txnHarness {
			seq, err := NewSequencer(Config{Transactional: true})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := NewTxnState(TxnConfig{TransactionalID: txnID}, seq)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.InitTransactions(); err != nil {
				t.Fatal(err)
			}
			return &txnHarness{t, seq, tx}
		}, nil},
		{"Abort waiting for its batches", func(t *testing.T) *txnHarness {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			h.assign(tp0, 1)
			if step, err := h.tx.Abort(false); err != nil || !step.WaitDrain {
				t.Fatalf("abort: %+v, %v", step, err)
			}
			return h
		}, nil},
		{"Abort bumping the epoch", func(t *testing.T) *txnHarness {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			step, _ := h.tx.Abort(false)
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
			step = h.endTxn(EndTxnResult{Delivery: NoResponse})
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
			step = h.endTxn(EndTxnResult{Producer: NoProducerID})
			h.wantSend(step, &InitProducerIDRequest{TransactionalID: txnID, Producer: pid})
			return h
		}, nil},
		{"Commit waiting for its batches", func(t *testing.T) *txnHarness {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			h.assign(tp0, 1)
			if step, err := h.tx.Commit(); err != nil || !step.WaitDrain {
				t.Fatalf("commit: %+v, %v", step, err)
			}
			return h
		}, []error{ErrAbortRequired}},
		{"Commit with its EndTxn sent", func(t *testing.T) *txnHarness {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			step, _ := h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
			return h
		}, []error{kepocherrors.ErrUnknownOutcome}},
	}
	causes := map[string]error{
		"cause not matching ErrClosed": errors.New("refresher gone"),
		"cause matching ErrClosed":     fmt.Errorf("refresher closed: %w", kepocherrors.ErrClosed),
		"no cause":                     nil,
	}
	for _, op := range ops {
		for cname, cause := range causes {
			t.Run(op.name+", "+cname, func(t *testing.T) {
				h := op.start(t)
				step := h.tx.Stop(false, cause)
				want := append([]error{kepocherrors.ErrClosed}, op.want...)
				if cause != nil {
					want = append(want, cause)
				}
				if !step.Done {
					t.Fatalf("Stop: %+v; want the operation done", step)
				}
				for _, w := range want {
					if !errors.Is(step.Err, w) {
						t.Errorf("Stop: %v; want it to match %v", step.Err, w)
					}
				}
				if h.tx.State() == TxnAbortableError && (cause != nil && !errors.Is(h.tx.Err(), cause)) {
					t.Errorf("state error after a stopped commit: %v; want it to match %v", h.tx.Err(), cause)
				}
			})
		}
	}
}

// TestTxnAddPartitionsAnswerOutsideRequest: an AddPartitionsToTxn answer
// is read only for the partitions its request named: a result for another
// partition (a broker's mistake, or a stale answer) neither adds it, nor
// starts the transaction, nor decides anything, and a requested partition
// the answer leaves out is added again.
func TestTxnAddPartitionsAnswerOutsideRequest(t *testing.T) {
	cases := []struct {
		name    string
		results []AddPartitionResult
		added   bool // tp0 added
		resend  bool // tp0 asked for again
	}{
		{"only another partition NONE", []AddPartitionResult{{TP: tp1}}, false, true},
		{"requested and another NONE", []AddPartitionResult{{TP: tp0}, {TP: tp1}}, true, false},
		{"another partition fatal", []AddPartitionResult{{TP: tp1, Code: kerr.InvalidTxnState.Code}}, false, true},
		{"another partition abortable", []AddPartitionResult{{TP: tp1, Code: kerr.TransactionAbortable.Code}, {TP: tp0}}, true, false},
		{"another partition retriable", []AddPartitionResult{{TP: tp1, Code: kerr.ConcurrentTransactions.Code}, {TP: tp0}}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			if err := h.tx.Begin(); err != nil {
				t.Fatal(err)
			}
			step, _ := h.tx.AddPartition(tp0)
			h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
			step, err := h.tx.HandleAddPartitions(Answered, c.results, false)
			if err != nil || h.tx.State() != TxnInTransaction {
				t.Fatalf("step %+v %v: state %v", step, err, h.tx.State())
			}
			if err := h.tx.CanProduce(tp1); err == nil {
				t.Fatal("a partition never requested was added")
			}
			if got := h.tx.CanProduce(tp0) == nil; got != c.added {
				t.Fatalf("tp0 added %v, want %v", got, c.added)
			}
			if c.resend {
				h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}})
			} else {
				h.wantSend(step, nil)
			}
			if h.tx.started != c.added {
				t.Fatalf("started %v, want %v", h.tx.started, c.added)
			}
		})
	}
}

// TestTxnHolds: the open transaction holds a partition added to it or
// being added, until it can no longer commit (EndTxn sent, aborting,
// abortable) or ends; another partition it never holds.
func TestTxnHolds(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	if h.tx.Holds(tp0) {
		t.Fatal("held before any transaction")
	}
	h.begin(tp0)
	step, _ := h.tx.AddPartition(tp1)
	h.wantSend(step, &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp1}})
	if !h.tx.Holds(tp0) || !h.tx.Holds(tp1) || h.tx.Holds(tp2) {
		t.Fatalf("in transaction: holds tp0 %v tp1 %v tp2 %v", h.tx.Holds(tp0), h.tx.Holds(tp1), h.tx.Holds(tp2))
	}
	if _, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp1}}, false); err != nil {
		t.Fatal(err)
	}
	ref := h.assign(tp0, 1)
	if _, err := h.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !h.tx.Holds(tp0) {
		t.Fatal("committing, EndTxn not sent: tp0 not held")
	}
	_, step = h.produce(ref, ProduceResult{Code: 0, BaseOffset: 0})
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
	if h.tx.Holds(tp0) {
		t.Fatal("EndTxn sent: tp0 still held")
	}
	h.endTxn(EndTxnResult{Producer: NoProducerID})
	if h.tx.State() != TxnReady || h.tx.Holds(tp0) {
		t.Fatalf("after the commit (%v): tp0 still held", h.tx.State())
	}
	h.begin(tp2)
	if h.tx.Holds(tp0) || !h.tx.Holds(tp2) {
		t.Fatal("next transaction: holds the last one's partition, or not its own")
	}
	h.tx.HandleProduce(Decision{Abortable: &AbortableError{Err: ErrDeliveryTimeout}})
	if h.tx.Holds(tp2) {
		t.Fatalf("abortable (%v): tp2 still held", h.tx.State())
	}
}

// TestTxnRecordRefused: a record the I/O layer refuses (Produce returned
// an error) while a transaction is open makes it abortable with the
// refusal as the cause, so Commit cannot commit it without the record;
// Abort then ends it as usual, and needs no bump (nothing of the record was
// sent). A refusal by the transaction's or the producer's state, one
// outside an open transaction, and one while the I/O layer's commit runs
// change nothing.
func TestTxnRecordRefused(t *testing.T) {
	tooLarge := &kepocherrors.PartitionError{Op: "produce", Topic: "t", Partition: 0, Offset: -1, LeaderEpoch: -1,
		Err: fmt.Errorf("%w: a batch larger than MaxRequestBytes", kepocherrors.ErrMessageTooLarge)}
	metaTimeout := &kepocherrors.PartitionError{Op: "produce", Topic: "t", Partition: -1, Offset: -1, LeaderEpoch: -1,
		Err: fmt.Errorf("%w after 1s: %w", kepocherrors.ErrMetadataTimeout, kerr.UnknownTopicOrPartition)}
	outOfRange := &kepocherrors.PartitionError{Op: "produce", Topic: "t", Partition: 7, Offset: -1, LeaderEpoch: -1,
		Err: fmt.Errorf("%w: it returned 7 for a topic of 3 partitions", ErrPartitionerOutOfRange)}
	noPartition := &kepocherrors.PartitionError{Op: "produce", Topic: "t", Partition: 7, Offset: -1, LeaderEpoch: -1,
		Err: errors.New("no such partition (topic has 3)")}
	for _, c := range []struct {
		name       string
		setup      func(h *txnHarness) // leaves the state the refusal comes in
		err        error
		committing bool
		abortable  bool
	}{
		{"too large", func(h *txnHarness) { h.begin(tp0) }, tooLarge, false, true},
		{"too large, nothing added yet", func(h *txnHarness) { h.tx.Begin() }, tooLarge, false, true},
		{"metadata wait timed out", func(h *txnHarness) { h.begin(tp0) }, metaTimeout, false, true},
		{"context ended waiting", func(h *txnHarness) { h.begin(tp0) }, context.DeadlineExceeded, false, true},
		{"partitioner out of range", func(h *txnHarness) { h.begin(tp0) }, outOfRange, false, true},
		{"no such partition", func(h *txnHarness) { h.begin(tp0) }, noPartition, false, true},
		{"invalid argument", func(h *txnHarness) { h.begin(tp0) }, invalidArgument("Produce", "r", "nil"), false, true},
		{"no transaction begun", func(*txnHarness) {}, tooLarge, false, false},
		{"ErrTxnState", func(h *txnHarness) { h.begin(tp0) },
			fmt.Errorf("producer: %w: CommitTransaction is under way", ErrTxnState), false, false},
		{"commit under way", func(h *txnHarness) { h.begin(tp0) }, tooLarge, true, false},
		{"closed", func(h *txnHarness) { h.begin(tp0) }, kepocherrors.ErrClosed, false, false},
		{"fatal", func(h *txnHarness) { h.begin(tp0) }, fmt.Errorf("%w: %w", ErrProducerFatal, kerr.ProducerFenced), false, false},
		{"already abortable", func(h *txnHarness) {
			h.begin(tp0)
			h.tx.RecordRefused(metaTimeout, false)
		}, tooLarge, false, false},
		{"committing", func(h *txnHarness) {
			h.begin(tp0)
			h.assign(tp0, 1)
			h.tx.Commit()
		}, tooLarge, false, false},
		{"aborting", func(h *txnHarness) {
			h.begin(tp0)
			h.assign(tp0, 1)
			h.tx.Abort(false)
		}, tooLarge, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			c.setup(h)
			before, beforeErr := h.tx.State(), h.tx.Err()
			step := h.tx.RecordRefused(c.err, c.committing)
			if step.Done || step.Send != nil {
				t.Fatalf("step %+v", step)
			}
			if !c.abortable {
				if h.tx.State() != before || h.tx.Err() != beforeErr {
					t.Fatalf("state %v (%v) → %v (%v); want unchanged", before, beforeErr, h.tx.State(), h.tx.Err())
				}
				return
			}
			if h.tx.State() != TxnAbortableError || h.tx.BumpRequired() {
				t.Fatalf("state %v, bump %v; want AbortableError without a bump", h.tx.State(), h.tx.BumpRequired())
			}
			if _, err := h.tx.Commit(); !errors.Is(err, ErrAbortRequired) || !errors.Is(err, c.err) {
				t.Fatalf("Commit: %v; want ErrAbortRequired wrapping %v", err, c.err)
			}
			if _, err := h.tx.AddPartition(tp1); !errors.Is(err, ErrAbortRequired) {
				t.Fatalf("AddPartition after the refusal: %v; want ErrAbortRequired", err)
			}
			step, err := h.tx.Abort(false)
			if err != nil {
				t.Fatal(err)
			}
			if h.tx.started {
				step = h.endTxn(EndTxnResult{Producer: NoProducerID})
			}
			if !step.Done || step.Err != nil || h.tx.State() != TxnReady || h.seq.Producer() != pid {
				t.Fatalf("abort: %+v, state %v, producer %v", step, h.tx.State(), h.seq.Producer())
			}
			h.begin(tp1)
			step, _ = h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
			if step = h.endTxn(EndTxnResult{Producer: NoProducerID}); !step.Done || step.Err != nil {
				t.Fatalf("next transaction's commit: %+v", step)
			}
		})
	}
}

// TestTxnAbortDropsUnsentAddPartitions: an abort while an AddPartitionsToTxn
// waits to be sent (handed out, the I/O layer sleeping the retry backoff:
// outstandingUnsent) does not send it: the abort needs no partition added.
// If no attempt sent may have started the transaction (none sent, or each
// refused before being applied), the abort ends it locally, without
// EndTxn; if one may have (answered NONE for another partition, its answer
// lost, resent by the transport, answered REQUEST_TIMED_OUT), it sends
// EndTxn(abort) at once. An add on the wire (outstandingUnsent false) is
// waited for. Before, every abort waited for the add to be sent and
// answered.
func TestTxnAbortDropsUnsentAddPartitions(t *testing.T) {
	add0 := &AddPartitionsRequest{Producer: pid, Partitions: []TopicPartition{tp0}}
	answer := func(h *txnHarness, d Delivery, code int16, resent bool) TxnStep {
		h.t.Helper()
		var res []AddPartitionResult
		if d == Answered {
			res = []AddPartitionResult{{TP: tp0, Code: code}}
		}
		step, err := h.tx.HandleAddPartitions(d, res, resent)
		if err != nil {
			h.t.Fatal(err)
		}
		return step
	}
	for _, c := range []struct {
		name    string
		setup   func(h *txnHarness) TxnStep // returns the step that handed out the add waiting to be sent
		state   TxnStateKind                // the state the abort comes in
		started bool                        // the abort sends EndTxn
	}{
		{"never sent", func(h *txnHarness) TxnStep {
			step, _ := h.tx.AddPartition(tp0)
			return step
		}, TxnInTransaction, false},
		{"refused CONCURRENT_TRANSACTIONS", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.ConcurrentTransactions.Code, false)
		}, TxnInTransaction, false},
		{"refused twice", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			answer(h, Answered, kerr.ConcurrentTransactions.Code, false)
			return answer(h, Answered, kerr.OperationNotAttempted.Code, false)
		}, TxnInTransaction, false},
		// Kafka's coordinator answers NOT_COORDINATOR when its log
		// append failed NOT_LEADER_OR_FOLLOWER, or succeeded while the
		// log partition moved (its coordinator epoch changed), and
		// COORDINATOR_LOAD_IN_PROGRESS when it succeeded while the
		// partition was being loaded again: the next coordinator has the
		// partition added. Both were taken for refusals before anything
		// was applied, and the abort ended the transaction locally.
		{"NOT_COORDINATOR", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.NotCoordinator.Code, false)
		}, TxnInTransaction, true},
		{"COORDINATOR_LOAD_IN_PROGRESS", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.CoordinatorLoadInProgress.Code, false)
		}, TxnInTransaction, true},
		{"coordinator lookup refused NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			var step TxnStep
			for _, code := range []int16{kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code} {
				var err error
				if step, err = h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp0, Code: code, Lookup: true}}, false); err != nil {
					h.t.Fatal(err)
				}
			}
			return step
		}, TxnInTransaction, false},
		{"not sent by the transport", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, NotSent, 0, false)
		}, TxnInTransaction, false},
		{"abortable meanwhile", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			step := answer(h, Answered, kerr.ConcurrentTransactions.Code, false)
			h.tx.RecordRefused(kepocherrors.ErrMetadataTimeout, false)
			return step
		}, TxnAbortableError, false},
		{"answer lost", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, NoResponse, 0, false)
		}, TxnInTransaction, true},
		{"resent by the transport, refused", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.ConcurrentTransactions.Code, true)
		}, TxnInTransaction, true},
		{"REQUEST_TIMED_OUT", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.RequestTimedOut.Code, false)
		}, TxnInTransaction, true},
		// The coordinator's log append timed out or failed after the
		// append: the next coordinator may load the partition added.
		{"COORDINATOR_NOT_AVAILABLE", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.CoordinatorNotAvailable.Code, false)
		}, TxnInTransaction, true},
		{"coordinator lookup refused COORDINATOR_NOT_AVAILABLE", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp0)
			step, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp0, Code: kerr.CoordinatorNotAvailable.Code, Lookup: true}}, false)
			if err != nil {
				h.t.Fatal(err)
			}
			return step
		}, TxnInTransaction, false},
		{"another partition added", func(h *txnHarness) TxnStep {
			h.tx.AddPartition(tp1)
			if _, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp1}}, false); err != nil {
				h.t.Fatal(err)
			}
			h.tx.AddPartition(tp0)
			return answer(h, Answered, kerr.ConcurrentTransactions.Code, false)
		}, TxnInTransaction, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, unsent := range []bool{true, false} {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				if err := h.tx.Begin(); err != nil {
					t.Fatal(err)
				}
				h.wantSend(c.setup(h), add0)
				if h.tx.State() != c.state {
					t.Fatalf("state %v; want %v", h.tx.State(), c.state)
				}
				step, err := h.tx.Abort(unsent)
				if err != nil {
					t.Fatal(err)
				}
				if !unsent {
					// On the wire: the abort waits for its answer.
					if step.Send != nil || step.Done {
						t.Fatalf("abort with the add on the wire: %+v; want it waiting", step)
					}
					step = answer(h, Answered, kerr.ConcurrentTransactions.Code, false)
				}
				if _, ok := step.Send.(*AddPartitionsRequest); ok {
					t.Fatalf("unsent %v: the abort sends %#v", unsent, step.Send)
				}
				if c.started {
					h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
					if step.Done {
						t.Fatalf("unsent %v: %+v; want EndTxn(abort) sent", unsent, step)
					}
					step = h.endTxn(EndTxnResult{Producer: NoProducerID})
				}
				if !step.Done || step.Err != nil || h.tx.State() != TxnReady || step.Send != nil || h.tx.outstanding != nil {
					t.Fatalf("unsent %v: %+v, state %v, outstanding %#v; want the abort ended", unsent, step, h.tx.State(), h.tx.outstanding)
				}
				// The next transaction adds its partitions afresh.
				h.begin(tp0)
			}
		})
	}
}

// An AddPartitionsToTxn answered COORDINATOR_NOT_AVAILABLE may have been
// applied (the coordinator's log append timed out, and the next
// coordinator may load it), so the abort dropping its resend sends
// EndTxn(abort). If it was not applied after all, the coordinator refuses
// the EndTxn with INVALID_TXN_STATE (state Empty, or the previous
// transaction's Complete state): the transaction never started, and the
// abort ends it with an epoch bump, not fatally. Before, the add was taken
// as refused unapplied and the abort ended the transaction locally,
// leaving one the coordinator may come to hold open.
func TestTxnAddCoordinatorNotAvailableNeverStarted(t *testing.T) {
	h := newTxn(t, TxnConfig{CoordinatorBumps: true})
	if err := h.tx.Begin(); err != nil {
		t.Fatal(err)
	}
	h.tx.AddPartition(tp0)
	step, err := h.tx.HandleAddPartitions(Answered, []AddPartitionResult{{TP: tp0, Code: kerr.CoordinatorNotAvailable.Code}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !step.FindCoordinator {
		t.Fatalf("resend %+v; want the coordinator rediscovered", step)
	}
	step, err = h.tx.Abort(true)
	if err != nil {
		t.Fatal(err)
	}
	h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
	h.bumpDone(h.endTxn(EndTxnResult{Code: kerr.InvalidTxnState.Code, Producer: NoProducerID}), "abort of a transaction that never started")
}

// An AddOffsetsToTxn answered NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
// COORDINATOR_LOAD_IN_PROGRESS by the transaction coordinator may have been
// applied (answeredAfterAppend: its log append failed or went unconfirmed,
// and the next coordinator loads it): the group's offsets partition may be
// in the transaction, so an abort with nothing else sent still sends
// EndTxn, and the transaction ends with a new epoch (HandleOffsets). The
// same code refusing the coordinator's lookup was not sent: the abort ends
// the transaction locally. Before, the answer was taken as a refusal
// before anything was applied, and the abort ended locally a transaction
// the coordinator may hold open.
func TestTxnOffsetsAnsweredAfterAppend(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.NotCoordinator, kerr.CoordinatorNotAvailable, kerr.CoordinatorLoadInProgress} {
		for _, lookup := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s lookup=%v", code.Message, lookup), func(t *testing.T) {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				if err := h.tx.Begin(); err != nil {
					t.Fatal(err)
				}
				if st := h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(code), Lookup: lookup}); !st.Retry || st.Err != nil {
					t.Fatalf("%+v; want it sent again", st)
				}
				// The application gives up (its context ends).
				if st := h.offsets(OffsetsResult{Request: OffsetsAdd, Delivery: NotSent, Err: context.Canceled}); !errors.Is(st.Err, ErrAbortRequired) {
					t.Fatalf("%+v; want abortable", st)
				}
				step, err := h.tx.Abort(false)
				if err != nil {
					t.Fatal(err)
				}
				if lookup {
					if !step.Done || step.Err != nil || step.Send != nil || h.tx.State() != TxnReady {
						t.Fatalf("%+v, state %v; want the abort ended locally", step, h.tx.State())
					}
					return
				}
				h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid})
				h.bumpDone(h.endTxn(EndTxnResult{Producer: NoProducerID}), "abort")
			})
		}
	}
	// A TxnOffsetCommit so answered by the group coordinator may have been
	// staged: the transaction ends with a new epoch, as after
	// REQUEST_TIMED_OUT; refused by the lookup, without one.
	for _, lookup := range []bool{false, true} {
		t.Run(fmt.Sprintf("TxnOffsetCommit NOT_COORDINATOR lookup=%v", lookup), func(t *testing.T) {
			h := newTxn(t, TxnConfig{CoordinatorBumps: true})
			h.begin(tp0)
			h.offsets(OffsetsResult{Request: OffsetsAdd, Codes: codes(nil)})
			if st := h.offsets(OffsetsResult{Request: OffsetsCommit, Codes: codes(kerr.NotCoordinator), Lookup: lookup}); !st.Retry || st.Err != nil {
				t.Fatalf("%+v; want it sent again", st)
			}
			if st := h.offsets(OffsetsResult{Request: OffsetsCommit, Codes: codes(nil)}); st.Retry || st.Err != nil {
				t.Fatalf("%+v", st)
			}
			step, _ := h.tx.Commit()
			h.wantSend(step, &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true})
			step = h.endTxn(EndTxnResult{Producer: NoProducerID})
			if lookup {
				if !step.Done || step.Err != nil || step.Send != nil {
					t.Fatalf("%+v; want the commit done without a bump", step)
				}
				return
			}
			h.bumpDone(step, "commit")
		})
	}
}

// An EndTxn answered NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
// COORDINATOR_LOAD_IN_PROGRESS by the coordinator, or so answered and
// retried by the transport (RetriedAnswered), may have been applied
// (answeredAfterAppend): a commit stopped before its resend is sent has an
// unknown outcome, and one the retry refuses fails with
// errors.ErrUnknownOutcome too. An answer came, so no copy of the attempt
// is on its way: a commit the retry completes needs no epoch bump (the
// coordinator answered a repeat of the commit it completed with NONE).
func TestTxnEndTxnAnsweredAfterAppend(t *testing.T) {
	commitReq := &EndTxnRequest{TransactionalID: txnID, Producer: pid, Commit: true}
	for _, c := range []struct {
		name string
		res  EndTxnResult
	}{
		{"NOT_COORDINATOR", EndTxnResult{Code: kerr.NotCoordinator.Code}},
		{"COORDINATOR_NOT_AVAILABLE", EndTxnResult{Code: kerr.CoordinatorNotAvailable.Code}},
		{"COORDINATOR_LOAD_IN_PROGRESS", EndTxnResult{Code: kerr.CoordinatorLoadInProgress.Code}},
		{"CONCURRENT_TRANSACTIONS after a retried answer", EndTxnResult{Code: kerr.ConcurrentTransactions.Code, RetriedAnswered: true}},
		// The request timeout ended the transport's retry before it
		// was sent.
		{"not sent after a retried answer", EndTxnResult{Delivery: NotSent, RetriedAnswered: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("stopped", func(t *testing.T) {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				h.begin(tp0)
				step, _ := h.tx.Commit()
				h.wantSend(step, commitReq)
				h.wantSend(h.endTxn(c.res), commitReq)
				step = h.tx.Stop(true, nil)
				if !step.Done || !errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) || h.tx.StoppedCommit() {
					t.Fatalf("%+v (StoppedCommit %v); want an unknown outcome", step, h.tx.StoppedCommit())
				}
			})
			t.Run("refused", func(t *testing.T) {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				h.begin(tp0)
				step, _ := h.tx.Commit()
				h.wantSend(step, commitReq)
				h.wantSend(h.endTxn(c.res), commitReq)
				step = h.endTxn(EndTxnResult{Code: kerr.TransactionAbortable.Code, Producer: NoProducerID})
				if !step.Done || !errors.Is(step.Err, ErrAbortRequired) || !errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) {
					t.Fatalf("%+v; want ErrAbortRequired and an unknown outcome", step)
				}
			})
			t.Run("completed", func(t *testing.T) {
				h := newTxn(t, TxnConfig{CoordinatorBumps: true})
				h.begin(tp0)
				step, _ := h.tx.Commit()
				h.wantSend(step, commitReq)
				h.wantSend(h.endTxn(c.res), commitReq)
				step = h.endTxn(EndTxnResult{Producer: NoProducerID})
				if !step.Done || step.Err != nil || step.Send != nil || h.tx.State() != TxnReady {
					t.Fatalf("%+v, state %v; want committed, no bump", step, h.tx.State())
				}
				// The next transaction starts afresh: stopped before
				// any EndTxn, it did not commit.
				h.begin(tp0)
				h.assign(tp0, 1)
				h.tx.Commit()
				if step := h.tx.Stop(false, nil); !h.tx.StoppedCommit() || errors.Is(step.Err, kepocherrors.ErrUnknownOutcome) {
					t.Fatalf("next transaction's commit stopped: %+v; want not committed", step)
				}
			})
		})
	}
}
