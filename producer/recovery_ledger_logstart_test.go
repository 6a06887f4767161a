package producer

import (
	"reflect"
	"testing"
)

// TestLedgerLogStartPassed: offsets of a suspect range that the log start
// has passed are dropped in silence only when the range was proven present
// before (retention removed them). A range never found in the log since it
// was acknowledged (inexact: produce answers carry no epoch) may have been
// cut by an unclean election before retention or DeleteRecords moved the log
// start past it: those offsets are reported Unconfirmed (they were dropped
// without a report, a silent loss when the election had cut them).
func TestLedgerLogStartPassed(t *testing.T) {
	ours := func(base, last int64, epoch int32) ProbedBatch {
		return ProbedBatch{BaseOffset: base, LastOffset: last, LeaderEpoch: epoch,
			ProducerID: pid.ID, ProducerEpoch: pid.Epoch, BaseSequence: int32(base)}
	}
	// walk: [0, 10) and [12, 20) acknowledged under the client's epoch 3
	// (inexact), a leader change to 4, and the walk that follows a tail
	// probe that found nothing.
	walk := func(t *testing.T) (*AckLedger, Probe) {
		l := NewAckLedger(0)
		rec(t, l, 0, 10, 3, false)
		rec(t, l, 12, 20, 3, false)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 20})
		skipTail(t, l, &r)
		if r.Probe == nil || r.Probe.Offset != 0 {
			t.Fatalf("no walk: %+v", r)
		}
		return l, *r.Probe
	}
	t.Run("inexact wholly passed", func(t *testing.T) {
		l, pr := walk(t)
		// Kafka's answer to a fetch below the log start: no batches.
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 20, LogEndOffset: 30})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("result %+v", r)
		}
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {12, 20}}) {
			t.Fatalf("unconfirmed %v; want [0, 10) and [12, 20)", got)
		}
		for _, u := range r.Unconfirmed {
			if !u.Unconfirmed || u.Untracked || u.Err != nil || u.Producer != pid || u.FirstSequence != int32(u.From) || u.LeaderEpoch != 3 || u.CurrentLeaderEpoch != 4 {
				t.Fatalf("report %+v", u)
			}
		}
		if got := l.Ranges(tp0); len(got) != 0 {
			t.Fatalf("ranges %+v still tracked", got)
		}
	})
	t.Run("inexact partly passed, rest found", func(t *testing.T) {
		l, pr := walk(t)
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 14, LogEndOffset: 30, Batches: []ProbedBatch{ours(14, 19, 4)}})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("result %+v", r)
		}
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {12, 14}}) {
			t.Fatalf("unconfirmed %v; want [0, 10) and [12, 14), the offsets below the log start", got)
		}
		if u := r.Unconfirmed[1]; u.FirstSequence != 12 {
			t.Fatalf("report %+v", u)
		}
		got := l.Ranges(tp0)
		if len(got) != 1 || got[0].From != 14 || got[0].To != 20 || !got[0].EpochExact || got[0].LeaderEpoch != 4 || got[0].FirstSequence != 14 {
			t.Fatalf("ranges %+v; want [14, 20) confirmed under 4", got)
		}
	})
	t.Run("inexact partly passed, rest lost", func(t *testing.T) {
		l, pr := walk(t)
		// An empty log (start = end = 14): the rest is past its end.
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 14, LogEndOffset: 14})
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {12, 14}}) {
			t.Fatalf("unconfirmed %v", got)
		}
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{14, 20}}) || r.Lost[0].FirstSequence != 14 {
			t.Fatalf("lost %+v; want [14, 20)", r.Lost)
		}
	})
	t.Run("confirmed, then passed after a leader change", func(t *testing.T) {
		// The tail probe finds [12, 20)'s last batch under the epoch
		// both were recorded under: both are proven present (exact)
		// in the log of epoch 4's leader.
		l := NewAckLedger(0)
		rec(t, l, 0, 10, 3, false)
		rec(t, l, 12, 20, 3, false)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 20})
		if r.Probe == nil || !r.Probe.Tail {
			t.Fatalf("no tail probe: %+v", r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: -1, Batches: []ProbedBatch{ours(15, 19, 3)}})
		if len(r.Lost)+len(r.Unconfirmed) != 0 || r.Probe != nil {
			t.Fatalf("tail result %+v", r)
		}
		// Epoch 5's leader cannot place them (-1/-1: kfake answers so
		// while epoch 5 is empty, as after an unclean election of a
		// replica that never had them), and its log start has passed
		// them. Proven in epoch 4's log is not proven in epoch 5's:
		// the election may have cut them before DeleteRecords moved
		// the log start (dropped in silence before).
		q, _ = l.ObserveLeaderEpoch(tp0, 5)
		r = l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
		skipTail(t, l, &r)
		if r.Probe == nil {
			t.Fatalf("no walk: %+v", r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 20, LogEndOffset: 30})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("result %+v", r)
		}
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {12, 20}}) {
			t.Fatalf("unconfirmed %v; want [0, 10) and [12, 20)", got)
		}
		for _, u := range r.Unconfirmed {
			if u.Untracked || u.Err != nil || u.LeaderEpoch != 3 || u.CurrentLeaderEpoch != 5 {
				t.Fatalf("report %+v", u)
			}
		}
		if got := l.Ranges(tp0); len(got) != 0 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("exact partly passed", func(t *testing.T) {
		// Recorded exact under 3: proven in epoch 3's log, not in
		// epoch 4's, whose answer places nothing.
		l := NewAckLedger(0)
		rec(t, l, 0, 10, 3, true)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
		skipTail(t, l, &r)
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 6, LogEndOffset: 30, Batches: []ProbedBatch{ours(6, 9, 3)}})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("result %+v", r)
		}
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 6}}) || r.Unconfirmed[0].FirstSequence != 0 {
			t.Fatalf("unconfirmed %+v; want [0, 6), the offsets below the log start", r.Unconfirmed)
		}
		if got := l.Ranges(tp0); len(got) != 1 || got[0].From != 6 || got[0].To != 10 || !got[0].EpochExact || got[0].FirstSequence != 6 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("proven in the current leader's log", func(t *testing.T) {
		// Recorded exact under 4 and rechecked against epoch 4's
		// leader (the producer's sequences said something is gone):
		// it was in this leader's log, so the log start passed it by
		// retention, and nothing is reported.
		l := NewAckLedger(0)
		rec(t, l, 0, 10, 4, true)
		if _, ok := l.ObserveLeaderEpoch(tp0, 4); ok {
			t.Fatal("a question for a range recorded under the current epoch")
		}
		q, ok := l.Recheck(tp0, 4)
		q = mustQuery(t, q, ok, 4, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
		skipTail(t, l, &r)
		if r.Probe == nil {
			t.Fatalf("no walk: %+v", r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 20, LogEndOffset: 30})
		if len(r.Lost)+len(r.Unconfirmed) != 0 || r.Probe != nil {
			t.Fatalf("retention of a range proven in this log reported: %+v", r)
		}
		if got := l.Ranges(tp0); len(got) != 0 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("no producer identity", func(t *testing.T) {
		l := NewAckLedger(0)
		recNoID(t, l, 0, 10, 3, 0xa)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 10}); r.Probe == nil {
			t.Fatalf("no probe: %+v", r)
		} else {
			skipTail(t, l, &r)
			r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 10, LogEndOffset: 10})
			if got := unconfirmedRanges(r); len(r.Lost) != 0 || !reflect.DeepEqual(got, [][2]int64{{0, 10}}) {
				t.Fatalf("result %+v; want [0, 10) Unconfirmed", r)
			}
		}
	})
}
