package producer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	kerrors "github.com/kepoch/kepoch/errors"
)

// wantTyped fails unless err matches sentinel and its message holds every
// one of names (the call, the argument and the refused value).
func wantTyped(t *testing.T, what string, err, sentinel error, names ...string) {
	t.Helper()
	if !kerrors.Is(err, sentinel) {
		t.Errorf("%s: %v; want an error matching %v", what, err, sentinel)
		return
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s: %q does not name %q", what, err, n)
		}
	}
}

// TestMisuseTyped: the pure cores (Sequencer, AckLedger, TxnState) refuse
// an argument they cannot take with an error matching
// errors.ErrInvalidArgument (a Config field: errors.ErrInvalidOption) that
// names the call, the argument and the value, and change nothing; Resume
// refused matches ErrResumeRefused; a nil error given to fail batches
// still fails them, with a typed error.
func TestMisuseTyped(t *testing.T) {
	for _, n := range []int{-1, MaxInFlightPerPartition + 1} {
		_, err := NewSequencer(Config{MaxInFlight: n})
		wantTyped(t, "NewSequencer", err, kerrors.ErrInvalidOption, fmt.Sprintf("option Config.MaxInFlight: %d ", n))
	}

	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	for _, n := range []int32{0, -3} {
		_, _, err := h.s.Assign(tp0, n, time.Time{})
		wantTyped(t, "Assign", err, kerrors.ErrInvalidArgument, "Sequencer.AssignAt", fmt.Sprintf("argument records: %d ", n))
	}
	if got := h.s.Outstanding(); got != 0 {
		t.Fatalf("refused Assigns left %d batches outstanding", got)
	}
	wantTyped(t, "Sent unknown", h.s.Sent(9999), kerrors.ErrInvalidArgument, "Sequencer.Sent", "argument ref", "9999")
	r1, _ := h.assign(tp0, 5)
	wantTyped(t, "Sent on the wire", h.s.Sent(r1), kerrors.ErrInvalidArgument, "Sequencer.Sent", "not t[0]'s next resend")
	_, err := h.s.Split(r1, []int32{2, 3})
	wantTyped(t, "Split not refused", err, kerrors.ErrInvalidArgument, "Sequencer.Split", "argument ref", "not a batch waiting to be split")
	if d := h.s.Complete(r1, answered(kerr.MessageTooLarge.Code)); len(d.Split) != 1 {
		t.Fatalf("too large: %+v", d)
	}
	for _, counts := range [][]int32{{2, 2}, {5}, {6, -1}, {5, 0}} {
		_, err := h.s.Split(r1, counts)
		wantTyped(t, "Split counts", err, kerrors.ErrInvalidArgument, "Sequencer.Split", fmt.Sprintf("argument counts: %v ", counts))
	}
	if _, err := h.s.Split(r1, []int32{2, 3}); err != nil {
		t.Fatalf("valid split after refused ones: %v", err)
	}
	for _, id := range []ProducerID{NoProducerID, {ID: 5, Epoch: -1}, {ID: -2, Epoch: 0}} {
		_, err := h.s.SetProducer(id)
		wantTyped(t, "SetProducer", err, kerrors.ErrInvalidArgument, "Sequencer.SetProducer", "argument id", id.String())
	}
	if h.s.Producer() != pid {
		t.Fatalf("refused SetProducer changed the identity to %v", h.s.Producer())
	}

	// Abandon and FailPending with a nil error fail the batches all the
	// same, with a typed error; FailPending starts the failing period.
	h = newHarness(t, Config{}, pid)
	r, _ := h.assign(tp0, 1)
	if f := outcomes[Failed](h.s.Abandon(r, nil)); len(f) != 1 || !kerrors.Is(f[0].Err, kerrors.ErrInvalidArgument) || !strings.Contains(f[0].Err.Error(), "Sequencer.Abandon") {
		t.Fatalf("Abandon(nil): %+v", f)
	}
	h = newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	onWire, _ := h.assign(tp0, 1)
	h.s.Complete(onWire, ProduceResult{Delivery: NotSent}) // to be resent: not on the wire
	if f := outcomes[Failed](h.s.FailPending(nil)); len(f) != 1 || !kerrors.Is(f[0].Err, kerrors.ErrInvalidArgument) || !strings.Contains(f[0].Err.Error(), "Sequencer.FailPending") {
		t.Fatalf("FailPending(nil): %+v", f)
	}
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !kerrors.Is(err, ErrProducerFailing) {
		t.Fatalf("Assign after FailPending(nil): %v; want ErrProducerFailing", err)
	}

	// Resume refused: a batch on the wire, or sequences lost.
	h = newHarness(t, Config{}, pid)
	h.assign(tp0, 1)
	h.s.FailPending(ErrDeliveryTimeout)
	wantTyped(t, "Resume with a batch on the wire", h.s.Resume(), ErrResumeRefused, "1 batches still on the wire")
	ht := newHarness(t, Config{Transactional: true}, pid)
	r, _ = ht.assign(tp0, 1)
	ht.s.Abandon(r, ErrDeliveryTimeout)
	wantTyped(t, "Resume needing a bump", ht.s.Resume(), ErrResumeRefused, "new producer epoch")

	// AckLedger.Record.
	l := NewAckLedger(0)
	for _, tc := range []struct {
		r    AckedRange
		name string
	}{
		{AckedRange{From: -1, To: 3, LeaderEpoch: 0}, "[-1, 3)"},
		{AckedRange{From: 4, To: 4, LeaderEpoch: 0}, "[4, 4)"},
		{AckedRange{From: 5, To: 2, LeaderEpoch: 0}, "[5, 2)"},
		{AckedRange{From: 0, To: 2, LeaderEpoch: -1}, "epoch -1"},
		{AckedRange{From: 0, To: 2, LeaderEpoch: 0, Producer: NoProducerID, TailFrom: 2, HasTailCRC: true}, "tail batch offset 2"},
	} {
		_, err := l.Record(tp0, tc.r)
		wantTyped(t, "AckLedger.Record", err, kerrors.ErrInvalidArgument, "AckLedger.Record", "argument r", tc.name)
	}
	if got := l.Ranges(tp0); len(got) != 0 {
		t.Fatalf("refused ranges recorded: %v", got)
	}

	// NewTxnState.
	seq, _ := NewSequencer(Config{Transactional: true})
	idem, _ := NewSequencer(Config{})
	_, err = NewTxnState(TxnConfig{}, seq)
	wantTyped(t, "NewTxnState empty id", err, kerrors.ErrInvalidOption, "option TxnConfig.TransactionalID", `""`)
	_, err = NewTxnState(TxnConfig{TransactionalID: "x"}, nil)
	wantTyped(t, "NewTxnState nil", err, kerrors.ErrInvalidArgument, "NewTxnState", "argument seq", "nil")
	_, err = NewTxnState(TxnConfig{TransactionalID: "x"}, idem)
	wantTyped(t, "NewTxnState idempotent", err, kerrors.ErrInvalidArgument, "NewTxnState", "argument seq", "not Transactional")
}
