package producer

import (
	"errors"
	"reflect"
	"testing"
)

// rec records [from, to) at epoch (exact) for pid, with sequences equal to
// offset minus seqBase.
func rec(t *testing.T, l *AckLedger, from, to int64, epoch int32, exact bool) {
	t.Helper()
	if _, err := l.Record(tp0, AckedRange{From: from, To: to, LeaderEpoch: epoch, EpochExact: exact,
		Producer: pid, FirstSequence: int32(from)}); err != nil {
		t.Fatal(err)
	}
}

func mustQuery(t *testing.T, q EpochQuery, ok bool, epoch, current int32) EpochQuery {
	t.Helper()
	if !ok || q.Epoch != epoch || q.CurrentLeaderEpoch != current || q.TP != tp0 {
		t.Fatalf("query %+v %v, want epoch %d current %d", q, ok, epoch, current)
	}
	return q
}

func lostRanges(r CheckResult) [][2]int64 {
	var out [][2]int64
	for _, x := range r.Lost {
		out = append(out, [2]int64{x.From, x.To})
	}
	return out
}

func TestLedgerRecordCoalescesAndBounds(t *testing.T) {
	l := NewAckLedger(2)
	rec(t, l, 0, 5, 3, true)
	rec(t, l, 5, 7, 3, true) // contiguous, same producer and epoch: merged
	if got := l.Ranges(tp0); len(got) != 1 || got[0].From != 0 || got[0].To != 7 {
		t.Fatalf("ranges %+v", got)
	}
	rec(t, l, 10, 12, 3, true) // another producer wrote 7..9
	rec(t, l, 12, 13, 4, true) // new epoch
	if got := l.Ranges(tp0); len(got) != 2 || got[0].From != 10 || l.Forgotten(tp0) != 7 {
		t.Fatalf("bounded ranges %+v, forgotten %d", got, l.Forgotten(tp0))
	}
	if _, err := l.Record(tp0, AckedRange{From: 5, To: 5, LeaderEpoch: 1}); err == nil {
		t.Fatal("empty range accepted")
	}
}

// TestLedgerCleanLeaderChange: nothing lost, one question per leader change,
// none for a repeated observation.
func TestLedgerCleanLeaderChange(t *testing.T) {
	l := NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 3)
	rec(t, l, 0, 10, 3, true)
	rec(t, l, 20, 30, 3, true)
	if _, ok := l.ObserveLeaderEpoch(tp0, 3); ok {
		t.Fatal("question without a leader change")
	}
	q, ok := l.ObserveLeaderEpoch(tp0, 4)
	q = mustQuery(t, q, ok, 3, 4)
	if _, ok := l.ObserveLeaderEpoch(tp0, 4); ok {
		t.Fatal("second question for the same change")
	}
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 30})
	skipTail(t, l, &r)
	if len(r.Lost) != 0 || r.Next != nil || r.Probe != nil || r.Unknown || r.Stale {
		t.Fatalf("result %+v", r)
	}
	// Writes under 4, then a change to 5: one question (epoch 4); the
	// epoch-3 ranges follow from log matching.
	rec(t, l, 30, 40, 4, true)
	q, ok = l.ObserveLeaderEpoch(tp0, 5)
	q = mustQuery(t, q, ok, 4, 5)
	r = l.ApplyEpochEnd(q, EpochEnd{Epoch: 4, EndOffset: 45})
	skipTail(t, l, &r)
	if len(r.Lost) != 0 || r.Next != nil {
		t.Fatalf("result %+v", r)
	}
	if _, ok := l.ObserveLeaderEpoch(tp0, 5); ok {
		t.Fatal("everything checked, yet a question")
	}
}

// TestLedgerTruncation: exactly the ranges past the end offset of their
// epoch are reported, with their sequences, once.
func TestLedgerTruncation(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 10, 3, true)
	rec(t, l, 10, 20, 3, true)
	q, ok := l.ObserveLeaderEpoch(tp0, 4)
	q = mustQuery(t, q, ok, 3, 4)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 15})
	skipTail(t, l, &r)
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{15, 20}}) {
		t.Fatalf("lost %v", got)
	}
	if x := r.Lost[0]; x.LeaderEpoch != 3 || x.Producer != pid || x.FirstSequence != 15 || x.CurrentLeaderEpoch != 4 || x.TP != tp0 {
		t.Fatalf("report %+v", x)
	}
	if got := l.Ranges(tp0); len(got) != 1 || got[0].From != 0 || got[0].To != 15 {
		t.Fatalf("kept %+v", got)
	}
	if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 15}); !r.Stale || len(r.Lost) != 0 {
		t.Fatalf("replayed answer %+v", r)
	}
	if _, ok := l.ObserveLeaderEpoch(tp0, 4); ok {
		t.Fatal("question after the check completed")
	}
}

// TestLedgerEpochUnknownToNewLeader: the new leader never had the newest
// write epoch: all of it is lost; the answer's own epoch settles its ranges.
func TestLedgerEpochUnknownToNewLeader(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 50, 3, true)
	q, _ := l.ObserveLeaderEpoch(tp0, 4)
	l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 50})
	rec(t, l, 100, 110, 5, true)
	q, ok := l.ObserveLeaderEpoch(tp0, 7)
	q = mustQuery(t, q, ok, 5, 7)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 40})
	skipTail(t, l, &r)
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{40, 50}, {100, 110}}) {
		t.Fatalf("lost %v", got)
	}
	if r.Next != nil {
		t.Fatalf("needless follow-up %+v", r.Next)
	}
}

// TestLedgerFollowUp: when the newest epoch's ranges are all lost, older
// epochs need their own question (no anchor proves them).
func TestLedgerFollowUp(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 10, 2, true)
	q, _ := l.ObserveLeaderEpoch(tp0, 4)
	l.ApplyEpochEnd(q, EpochEnd{Epoch: 2, EndOffset: 10})
	rec(t, l, 10, 20, 4, true)
	q, ok := l.ObserveLeaderEpoch(tp0, 6)
	q = mustQuery(t, q, ok, 4, 6)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 4, EndOffset: 10})
	skipTail(t, l, &r)
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{10, 20}}) {
		t.Fatalf("lost %v", got)
	}
	if r.Next == nil {
		t.Fatal("no follow-up for epoch 2")
	}
	next := mustQuery(t, *r.Next, true, 2, 6)
	r = l.ApplyEpochEnd(next, EpochEnd{Epoch: 2, EndOffset: 8})
	skipTail(t, l, &r)
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{8, 10}}) || r.Next != nil {
		t.Fatalf("follow-up result %+v", r)
	}
}

// TestLedgerUndefinedAnswer: (-1, -1) settles nothing by epochs and reports
// nothing by itself: the ranges are probed at their offsets (the whole
// epoch may be gone), and the probe reports what is lost; ranges without a
// producer identity it reports Unconfirmed.
func TestLedgerUndefinedAnswer(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 10, 3, true)
	q, _ := l.ObserveLeaderEpoch(tp0, 4)
	for _, ans := range []EpochEnd{{Epoch: -1, EndOffset: -1}, {Epoch: 3, EndOffset: -1}, {Epoch: -1, EndOffset: 5}, {Epoch: 9, EndOffset: 100}} {
		r := l.ApplyEpochEnd(q, ans)
		skipTail(t, l, &r)
		if !r.Unknown || len(r.Lost) != 0 || r.Probe == nil || r.Probe.Offset != 0 || r.Probe.CurrentLeaderEpoch != 4 {
			t.Fatalf("answer %+v: %+v", ans, r)
		}
		q, _ = l.Recheck(tp0, 4)
	}
	q, ok := l.ObserveLeaderEpoch(tp0, 5)
	mustQuery(t, q, ok, 3, 5)

	// The probe finds the first half of the range and nothing past it.
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
	skipTail(t, l, &r)
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 5,
		Batches: []ProbedBatch{{BaseOffset: 0, LastOffset: 4, LeaderEpoch: 3, ProducerID: pid.ID, ProducerEpoch: pid.Epoch, BaseSequence: 0}}})
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{5, 10}}) || r.Probe != nil {
		t.Fatalf("probe after (-1, -1): %+v", r)
	}

	// Without a producer identity (exact epoch or not) the probe cannot
	// find the records: reported Unconfirmed, not left unchecked with no
	// report until a next leader change; lost if past the log end.
	for _, c := range []struct {
		exact  bool
		logEnd int64
		lost   bool
	}{{true, 20, false}, {false, 20, false}, {false, 0, true}} {
		l = NewAckLedger(0)
		if _, err := l.Record(tp0, AckedRange{From: 0, To: 10, LeaderEpoch: 3, EpochExact: c.exact, Producer: NoProducerID, FirstSequence: -1}); err != nil {
			t.Fatal(err)
		}
		q, _ = l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
		skipTail(t, l, &r)
		if !r.Unknown || r.Probe == nil || len(r.Lost)+len(r.Unconfirmed) != 0 {
			t.Fatalf("unidentified range (exact %v): %+v; want a probe", c.exact, r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: c.logEnd})
		if c.lost != (len(r.Lost) == 1) || c.lost == (len(r.Unconfirmed) == 1) || len(l.Ranges(tp0)) != 0 {
			t.Fatalf("unidentified range (exact %v, log end %d): %+v, ranges %+v", c.exact, c.logEnd, r, l.Ranges(tp0))
		}
		if _, ok := l.ObserveLeaderEpoch(tp0, 5); ok {
			t.Fatal("reported range asked about again")
		}
	}
}

// TestLedgerStaleAnswer: an answer for a leader epoch that has since changed
// is ignored.
func TestLedgerStaleAnswer(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 10, 3, true)
	old, _ := l.ObserveLeaderEpoch(tp0, 4)
	q, ok := l.ObserveLeaderEpoch(tp0, 5)
	mustQuery(t, q, ok, 3, 5)
	if r := l.ApplyEpochEnd(old, EpochEnd{Epoch: 3, EndOffset: 0}); !r.Stale || len(r.Lost) != 0 {
		t.Fatalf("stale answer applied: %+v", r)
	}
}

// TestLedgerRecheck: a producer-side gap forces a check without a leader
// change.
func TestLedgerRecheck(t *testing.T) {
	l := NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 3)
	rec(t, l, 0, 10, 3, true)
	if _, ok := l.ObserveLeaderEpoch(tp0, 3); ok {
		t.Fatal("question without change")
	}
	q, ok := l.Recheck(tp0, 3)
	q = mustQuery(t, q, ok, 3, 3)
	if got := lostRanges(l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 4})); !reflect.DeepEqual(got, [][2]int64{{4, 10}}) {
		t.Fatalf("lost %v", got)
	}
}

// TestLedgerInexactEpochProbe: a range recorded under the epoch the client
// believed (3) but appended under 4 looks lost to the epoch argument; the
// probe finds the records at their offsets under their producer identity and
// clears them (no bogus loss). A real loss is confirmed by the probe.
func TestLedgerInexactEpochProbe(t *testing.T) {
	setup := func() (*AckLedger, Probe) {
		l := NewAckLedger(0)
		rec(t, l, 0, 100, 3, true)
		rec(t, l, 120, 130, 3, false)
		q, _ := l.ObserveLeaderEpoch(tp0, 5)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 110})
		skipTail(t, l, &r)
		if len(r.Lost) != 0 || r.Probe == nil || r.Probe.Offset != 120 || r.Probe.CurrentLeaderEpoch != 5 {
			t.Fatalf("no probe: %+v", r)
		}
		return l, *r.Probe
	}
	ours := func(base, last int64, epoch int32) ProbedBatch {
		return ProbedBatch{BaseOffset: base, LastOffset: last, LeaderEpoch: epoch,
			ProducerID: pid.ID, ProducerEpoch: pid.Epoch, BaseSequence: int32(base)}
	}
	t.Run("survived", func(t *testing.T) {
		l, pr := setup()
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: 200,
			Batches: []ProbedBatch{ours(120, 124, 4), ours(125, 129, 4)}})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("result %+v", r)
		}
		got := l.Ranges(tp0)
		if len(got) != 2 || got[1].LeaderEpoch != 4 || !got[1].EpochExact || got[1].From != 120 || got[1].To != 130 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		l, pr := setup()
		other := ProbedBatch{BaseOffset: 118, LastOffset: 140, LeaderEpoch: 5, ProducerID: 99, ProducerEpoch: 0, BaseSequence: 0}
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{other}})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{120, 130}}) {
			t.Fatalf("lost %v", got)
		}
	})
	t.Run("partly replaced", func(t *testing.T) {
		l, pr := setup()
		other := ProbedBatch{BaseOffset: 125, LastOffset: 140, LeaderEpoch: 5, ProducerID: 99, BaseSequence: 0}
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{ours(120, 124, 4), other}})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{125, 130}}) || r.Lost[0].FirstSequence != 125 {
			t.Fatalf("lost %+v", r.Lost)
		}
	})
	t.Run("beyond log end", func(t *testing.T) {
		l, pr := setup()
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: 110})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{120, 130}}) {
			t.Fatalf("lost %v", got)
		}
	})
	t.Run("below log start", func(t *testing.T) {
		// Never found in the log since it was acknowledged: retention
		// may have removed it, or an unclean election cut it first.
		l, pr := setup()
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 130, LogEndOffset: 200})
		if len(r.Lost) != 0 || len(l.Ranges(tp0)) != 1 || r.Probe != nil {
			t.Fatalf("result %+v, ranges %+v", r, l.Ranges(tp0))
		}
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{120, 130}}) || r.Unconfirmed[0].FirstSequence != 120 || r.Unconfirmed[0].Err != nil {
			t.Fatalf("unconfirmed %+v; want [120, 130)", r.Unconfirmed)
		}
	})
	t.Run("not reached", func(t *testing.T) {
		l, pr := setup()
		r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: -1, Batches: []ProbedBatch{ours(120, 122, 4)}})
		if len(r.Lost) != 0 || r.Probe == nil || r.Probe.Offset != 123 {
			t.Fatalf("result %+v", r)
		}
		if r2 := l.ApplyProbe(pr, ProbeResult{}); !r2.Stale {
			t.Fatal("old probe applied")
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogEndOffset: 200, Batches: []ProbedBatch{ours(123, 129, 4)}})
		if len(r.Lost) != 0 || r.Probe != nil {
			t.Fatalf("second probe %+v", r)
		}
	})
}

// TestLedgerUnconfirmed: ranges without a producer identity (non-idempotent
// writes) on an inexact epoch cannot be confirmed by a probe: reported as
// unconfirmed, never as lost, unless they lie beyond the log end.
func TestLedgerUnconfirmed(t *testing.T) {
	for _, c := range []struct {
		logEnd int64
		lost   bool
	}{{200, false}, {110, true}} {
		l := NewAckLedger(0)
		if _, err := l.Record(tp0, AckedRange{From: 120, To: 130, LeaderEpoch: 3, Producer: NoProducerID, FirstSequence: -1}); err != nil {
			t.Fatal(err)
		}
		q, _ := l.ObserveLeaderEpoch(tp0, 5)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 110})
		skipTail(t, l, &r)
		if r.Probe == nil {
			t.Fatalf("no probe: %+v", r)
		}
		other := ProbedBatch{BaseOffset: 110, LastOffset: 140, LeaderEpoch: 4, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: c.logEnd, Batches: []ProbedBatch{other}})
		if c.lost != (len(r.Lost) == 1) || c.lost == (len(r.Unconfirmed) == 1) || len(l.Ranges(tp0)) != 0 {
			t.Fatalf("log end %d: %+v, ranges %+v", c.logEnd, r, l.Ranges(tp0))
		}
	}
}

// TestLedgerProbeCompactionGapTerminates: on a compacted topic a whole batch
// of an acknowledged range can be removed (only its producer's last batch is
// kept as an empty batch), leaving a gap. A probe that starts in such a gap
// gets the batches after it; it must make progress (or settle the range), not
// ask the same probe again forever.
func TestLedgerProbeCompactionGapTerminates(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 120, 130, 3, false) // inexact: appended under 4 in fact
	q, _ := l.ObserveLeaderEpoch(tp0, 5)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 110})
	skipTail(t, l, &r)
	if r.Probe == nil || r.Probe.Offset != 120 {
		t.Fatalf("no probe: %+v", r)
	}
	// [120, 125) compacted away entirely; our batch [125, 129] is still there.
	fetched := ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{
		{BaseOffset: 125, LastOffset: 129, LeaderEpoch: 4, ProducerID: pid.ID, ProducerEpoch: pid.Epoch, BaseSequence: 125},
		{BaseOffset: 130, LastOffset: 150, LeaderEpoch: 5, ProducerID: 99, BaseSequence: 0},
	}}
	pr := *r.Probe
	for i := 0; i < 10; i++ {
		r = l.ApplyProbe(pr, fetched) // the leader answers a fetch at 120 the same way each time
		if len(r.Lost) != 0 {
			t.Fatalf("compacted (surviving) records reported lost: %+v", r.Lost)
		}
		if r.Probe == nil {
			return
		}
		if r.Probe.Offset == pr.Offset {
			t.Fatalf("probe %d asks again at the same offset %d: it never ends", i, pr.Offset)
		}
		pr = *r.Probe
	}
	t.Fatal("probe did not finish")
}

// TestLedgerProbeGapNotOurs: a gap that no batch of ours follows cannot be
// told from a truncation (nor proven compaction): its offsets are given up
// as Unconfirmed, never probed again; the offsets after it, holding another
// producer's records, are lost.
func TestLedgerProbeGapNotOurs(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 120, 130, 3, false)
	q, _ := l.ObserveLeaderEpoch(tp0, 5)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 110})
	skipTail(t, l, &r)
	if r.Probe == nil || r.Probe.Offset != 120 {
		t.Fatalf("no probe: %+v", r)
	}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{
		{BaseOffset: 125, LastOffset: 150, LeaderEpoch: 5, ProducerID: 99, BaseSequence: 0},
	}})
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{125, 130}}) || len(r.Unconfirmed) != 1 || r.Probe != nil || len(l.Ranges(tp0)) != 0 {
		t.Fatalf("gap followed by another producer's batch: %+v, ranges %+v", r, l.Ranges(tp0))
	}
	if u := r.Unconfirmed[0]; u.From != 120 || u.To != 125 || !u.Unconfirmed {
		t.Fatalf("unconfirmed %+v; want [120, 125), marked Unconfirmed", u)
	}
}

// TestLedgerWants: a question is wanted until it is answered or superseded
// (a newer leader epoch, a recheck, a Forget).
func TestLedgerWants(t *testing.T) {
	l := NewAckLedger(0)
	rec(t, l, 0, 10, 3, true)
	q4, _ := l.ObserveLeaderEpoch(tp0, 4)
	if !l.Wants(q4) {
		t.Fatal("the current question is not wanted")
	}
	q5, _ := l.ObserveLeaderEpoch(tp0, 5)
	if l.Wants(q4) || !l.Wants(q5) {
		t.Fatal("a question superseded by a newer epoch is still wanted")
	}
	q6, _ := l.Recheck(tp0, 5)
	if l.Wants(q5) || !l.Wants(q6) {
		t.Fatal("a question superseded by a recheck is still wanted")
	}
	l.ApplyEpochEnd(q6, EpochEnd{Epoch: 3, EndOffset: 10})
	if l.Wants(q6) {
		t.Fatal("an answered question is still wanted")
	}
	q7, _ := l.ObserveLeaderEpoch(tp0, 7)
	l.Forget(tp0)
	if l.Wants(q7) {
		t.Fatal("a question about a forgotten partition is still wanted")
	}
}

// TestLedgerBoundReportsUntracked: once the bound dropped ranges, a loss
// that reaches the oldest range still held reports the dropped offsets
// too, Unconfirmed and Untracked, once; a loss above the oldest range does
// not.
func TestLedgerBoundReportsUntracked(t *testing.T) {
	untracked := func(r CheckResult) [][2]int64 {
		var out [][2]int64
		for _, x := range r.Unconfirmed {
			if x.Untracked {
				if !x.Unconfirmed || x.Producer.Valid() || x.LeaderEpoch != -1 {
					t.Fatalf("untracked report %+v", x)
				}
				out = append(out, [2]int64{x.From, x.To})
			}
		}
		return out
	}
	t.Run("exact", func(t *testing.T) {
		l := NewAckLedger(2)
		rec(t, l, 0, 10, 3, true)
		rec(t, l, 20, 30, 3, true)
		rec(t, l, 40, 50, 3, true) // drops [0, 10)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 25})
		skipTail(t, l, &r)
		if got := untracked(r); got != nil {
			t.Fatalf("untracked %v for a loss above the oldest range held", got)
		}
		q, _ = l.ObserveLeaderEpoch(tp0, 5)
		r = l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 15})
		skipTail(t, l, &r)
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{20, 25}}) {
			t.Fatalf("lost %v", got)
		}
		if got := untracked(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}}) {
			t.Fatalf("untracked %v; want the dropped [0, 10)", got)
		}
	})
	t.Run("probe", func(t *testing.T) {
		l := NewAckLedger(1)
		rec(t, l, 0, 10, 3, false)
		rec(t, l, 20, 30, 3, false) // drops [0, 10)
		q, _ := l.ObserveLeaderEpoch(tp0, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 5})
		skipTail(t, l, &r)
		if r.Probe == nil || len(r.Lost) != 0 || untracked(r) != nil {
			t.Fatalf("result %+v", r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 3, LogEndOffset: 5})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{20, 30}}) {
			t.Fatalf("lost %v", got)
		}
		// The dropped offsets below the log start too: whether the
		// dropped range was ever found in this log before the log start
		// passed it (retention) is no longer known.
		if got := untracked(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}}) {
			t.Fatalf("untracked %v; want all the dropped offsets, [0, 10)", got)
		}
		rec(t, l, 40, 50, 3, false)
		q, _ = l.ObserveLeaderEpoch(tp0, 5)
		r = l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 5})
		skipTail(t, l, &r)
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 5})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{40, 50}}) {
			t.Fatalf("lost %v", got)
		}
		if got := untracked(r); got != nil {
			t.Fatalf("untracked %v again; the dropped offsets were reported", got)
		}
	})
}

// A check that cannot be made is not silence: the ranges it was to verify
// are reported Unconfirmed with Err (matching ErrAckCheckFailed and the
// cause), as are the offsets the bound dropped below the oldest of them,
// and dropped; ranges verified already are not reported, and an abandoned
// check that was superseded reports nothing.
func TestLedgerAbandonedCheckReportsUnverified(t *testing.T) {
	cause := errors.New("refused")
	l := NewAckLedger(3)
	l.ObserveLeaderEpoch(tp0, 1)
	rec(t, l, 0, 5, 1, true) // another producer's records between the ranges
	rec(t, l, 6, 10, 1, true)
	rec(t, l, 11, 20, 1, true)
	q, ok := l.ObserveLeaderEpoch(tp0, 2)
	stale := mustQuery(t, q, ok, 1, 2)
	q, ok = l.ObserveLeaderEpoch(tp0, 3)
	q2 := mustQuery(t, q, ok, 1, 3)
	rec(t, l, 21, 25, 3, true) // written under the new leader: verified; the bound drops [0, 5)
	if res := l.AbandonQuery(stale, cause); !res.Stale || len(res.Unconfirmed) != 0 {
		t.Fatalf("superseded check abandoned: %+v", res)
	}
	res := l.AbandonQuery(q2, cause)
	var got [][3]int64
	for _, u := range res.Unconfirmed {
		if !u.Unconfirmed || !errors.Is(u.Err, ErrAckCheckFailed) || !errors.Is(u.Err, cause) || u.CurrentLeaderEpoch != 3 {
			t.Fatalf("report %+v", u)
		}
		untracked := int64(0)
		if u.Untracked {
			untracked = 1
		}
		got = append(got, [3]int64{u.From, u.To, untracked})
	}
	if want := [][3]int64{{6, 10, 0}, {0, 5, 1}, {11, 20, 0}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("unverified %v; want %v", got, want)
	}
	if rs := l.Ranges(tp0); len(rs) != 1 || rs[0].From != 21 || l.Wants(q2) {
		t.Fatalf("ranges %+v kept, query wanted %v", rs, l.Wants(q2))
	}
}

// TestLedgerInexactSurvivorIsProbed: the epoch argument does not hold for a
// range recorded under an epoch that was not its append epoch. Leader A of
// epoch 3 holds our [0, 10) and another producer's acks=1 records [10, 30),
// which replica R copied and leader B did not. B leads epoch 4 from offset
// 10; our next batch is appended there as [10, 20) under 4, while the
// client's metadata still names epoch 3 (recorded inexact). R is then
// elected uncleanly (epoch 5): its log is epoch 3 up to 30, and it answers
// OffsetForLeaderEpoch(3) with (3, 30), past our range, though [10, 20) in
// its log is the other producer's records and ours went with epoch 4. The
// range is therefore probed, not taken as survived, and the probe finds it
// lost; the exact [0, 10) is settled by the answer alone. Without a producer
// identity the range cannot be probed: it is reported Unconfirmed, not kept
// as survived.
func TestLedgerInexactSurvivorIsProbed(t *testing.T) {
	other := ProbedBatch{BaseOffset: 10, LastOffset: 29, LeaderEpoch: 3, ProducerID: 99, ProducerEpoch: 0, BaseSequence: 0}
	fetched := ProbeResult{LogStartOffset: 0, LogEndOffset: 30, Batches: []ProbedBatch{other}}

	l := NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 3)
	rec(t, l, 0, 10, 3, true)
	rec(t, l, 10, 20, 3, false) // appended under 4 in fact
	q, ok := l.ObserveLeaderEpoch(tp0, 5)
	q = mustQuery(t, q, ok, 3, 5)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 30})
	skipTail(t, l, &r)
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Next != nil || r.Probe == nil || r.Probe.Offset != 10 || r.Probe.CurrentLeaderEpoch != 5 {
		t.Fatalf("answer (3, 30): %+v; want a probe at 10", r)
	}
	r = l.ApplyProbe(*r.Probe, fetched)
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{10, 20}}) || r.Probe != nil {
		t.Fatalf("probe: %+v; want [10, 20) lost", r)
	}
	if rs := l.Ranges(tp0); len(rs) != 1 || rs[0].From != 0 || rs[0].To != 10 {
		t.Fatalf("ranges %+v", rs)
	}

	// The same without a producer identity.
	l = NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 3)
	if _, err := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 3, Producer: NoProducerID, FirstSequence: -1}); err != nil {
		t.Fatal(err)
	}
	q, ok = l.ObserveLeaderEpoch(tp0, 5)
	q = mustQuery(t, q, ok, 3, 5)
	r = l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 30})
	skipTail(t, l, &r)
	if r.Probe == nil {
		t.Fatalf("unidentified range taken as survived: %+v", r)
	}
	r = l.ApplyProbe(*r.Probe, fetched)
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 1 || r.Unconfirmed[0].From != 10 || r.Unconfirmed[0].To != 20 ||
		!r.Unconfirmed[0].Unconfirmed || r.Unconfirmed[0].Err != nil || len(l.Ranges(tp0)) != 0 {
		t.Fatalf("probe: %+v, ranges %+v; want [10, 20) Unconfirmed", r, l.Ranges(tp0))
	}
}

// TestLedgerInexactIsNoAnchor: a range recorded inexact and judged present
// by the epoch argument proves nothing about the ranges below it; one the
// probe found in the new leader's log does (its epoch is then exact), at the
// next leader change.
func TestLedgerInexactIsNoAnchor(t *testing.T) {
	l := NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 2)
	rec(t, l, 0, 10, 2, true)
	q, _ := l.ObserveLeaderEpoch(tp0, 3)
	if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 2, EndOffset: 10}); len(r.Lost) != 0 || r.Next != nil || r.Probe != nil {
		t.Fatalf("result %+v", r)
	}
	// [0, 10) is now known in the log of epoch 3; [10, 20) is recorded
	// under 3, inexact.
	rec(t, l, 10, 20, 3, false)
	q, ok := l.ObserveLeaderEpoch(tp0, 5)
	q = mustQuery(t, q, ok, 3, 5)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 30})
	skipTail(t, l, &r)
	// [0, 10) (epoch 2) is not settled by the inexact range: asked about.
	if r.Next == nil || r.Next.Epoch != 2 || r.Probe == nil || r.Probe.Offset != 10 {
		t.Fatalf("result %+v; want a question for epoch 2 and a probe at 10", r)
	}
	ours := ProbedBatch{BaseOffset: 10, LastOffset: 19, LeaderEpoch: 3, ProducerID: pid.ID, ProducerEpoch: pid.Epoch, BaseSequence: 10}
	if r2 := l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 30, Batches: []ProbedBatch{ours}}); len(r2.Lost) != 0 || r2.Probe != nil {
		t.Fatalf("probe %+v", r2)
	}
	if r2 := l.ApplyEpochEnd(*r.Next, EpochEnd{Epoch: 2, EndOffset: 10}); len(r2.Lost) != 0 || r2.Next != nil || r2.Probe != nil {
		t.Fatalf("epoch 2 answer %+v", r2)
	}
	// Confirmed by the probe, [10, 20) is exact and anchors [0, 10) at
	// the next change: one question.
	q, ok = l.ObserveLeaderEpoch(tp0, 6)
	q = mustQuery(t, q, ok, 3, 6)
	if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 30}); len(r.Lost) != 0 || r.Next != nil || r.Probe != nil {
		t.Fatalf("result %+v; want everything settled by the confirmed range", r)
	}
}

// skipTail answers a tail probe in r with nothing found at its offset, and
// puts the walk that follows in its place: for the tests of the walk.
func skipTail(t *testing.T, l *AckLedger, r *CheckResult) {
	t.Helper()
	for r.Probe != nil && r.Probe.Tail {
		w := l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: -1, LogEndOffset: -1})
		if len(w.Lost) != 0 || len(w.Unconfirmed) != 0 || w.Probe == nil {
			t.Fatalf("tail probe found nothing: %+v", w)
		}
		r.Probe = w.Probe
	}
}

// recID records [from, to) for producer identity id with first sequence seq.
func recID(t *testing.T, l *AckLedger, from, to int64, epoch int32, id ProducerID, seq int32) {
	t.Helper()
	if _, err := l.Record(tp0, AckedRange{From: from, To: to, LeaderEpoch: epoch, Producer: id, FirstSequence: seq}); err != nil {
		t.Fatal(err)
	}
}

// tailSetup records inexact ranges of identity pid (other producers'
// records in between, so that they do not merge) and of identity pid2 (a
// bump after them), observes a leader change and answers its question:
// the ranges are suspects, and the first probe is a tail probe.
func tailSetup(t *testing.T, withBump bool) (*AckLedger, Probe) {
	t.Helper()
	l := NewAckLedger(0)
	recID(t, l, 0, 10, 3, pid, 0)
	recID(t, l, 20, 30, 3, pid, 10)
	recID(t, l, 40, 50, 3, pid, 20)
	if withBump {
		recID(t, l, 60, 70, 3, ProducerID{ID: pid.ID, Epoch: pid.Epoch + 1}, 0)
	}
	q, ok := l.ObserveLeaderEpoch(tp0, 4)
	q = mustQuery(t, q, ok, 3, 4)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 100})
	if len(r.Lost) != 0 || r.Next != nil || r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 49 {
		t.Fatalf("answer: %+v; want a tail probe at 49", r)
	}
	return l, *r.Probe
}

func batchOf(id ProducerID, base, last int64, seq, epoch int32) ProbedBatch {
	return ProbedBatch{BaseOffset: base, LastOffset: last, LeaderEpoch: epoch, ProducerID: id.ID, ProducerEpoch: id.Epoch, BaseSequence: seq}
}

// TestLedgerTailConfirmsIdentity: the identity's newest batch found under
// the epoch its ranges were recorded under, with its sequence, at its
// offset confirms every earlier range of the identity with that one probe:
// no walk (which would fetch from offset 0), all exact, nothing left.
func TestLedgerTailConfirmsIdentity(t *testing.T) {
	l, pr := tailSetup(t, false)
	r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: -1,
		Batches: []ProbedBatch{batchOf(pid, 45, 49, 25, 3)}})
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Probe != nil || r.Next != nil {
		t.Fatalf("tail found: %+v; want everything confirmed", r)
	}
	for _, x := range l.Ranges(tp0) {
		if !x.EpochExact || x.LeaderEpoch != 3 {
			t.Fatalf("range %+v not made exact", x)
		}
	}
	// Confirmed for epoch 4: nothing to ask until the next change, then
	// the epoch argument (exact ranges) settles them with one question.
	if _, ok := l.ObserveLeaderEpoch(tp0, 4); ok {
		t.Fatal("question without change")
	}
	q, ok := l.ObserveLeaderEpoch(tp0, 5)
	q = mustQuery(t, q, ok, 3, 5)
	if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 100}); len(r.Lost) != 0 || r.Next != nil || r.Probe != nil {
		t.Fatalf("next change: %+v", r)
	}
}

// TestLedgerTailRecordedUnderOtherEpoch: the tail batch carries a later
// epoch than the ranges were recorded under (the client's metadata lagged,
// and a leader without the producer's state may have taken any sequence):
// only the tail batch is confirmed, the rest is walked, and the walk
// reports exactly what is gone.
func TestLedgerTailRecordedUnderOtherEpoch(t *testing.T) {
	l, pr := tailSetup(t, false)
	r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: -1,
		Batches: []ProbedBatch{batchOf(pid, 45, 49, 25, 4)}})
	if len(r.Lost) != 0 || r.Probe == nil || r.Probe.Tail || r.Probe.Offset != 0 {
		t.Fatalf("tail under epoch 4: %+v; want a walk from 0", r)
	}
	other := ProbedBatch{BaseOffset: 0, LastOffset: 44, LeaderEpoch: 2, ProducerID: 99}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 50,
		Batches: []ProbedBatch{other, batchOf(pid, 45, 49, 25, 4)}})
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {20, 30}, {40, 45}}) || r.Probe != nil {
		t.Fatalf("walk: %+v; want [0, 10), [20, 30), [40, 45) lost", r)
	}
}

// TestLedgerTailMissingWalks: the tail is not there (another producer's
// records at its offset): the identity is walked from its oldest suspect
// range, and the walk reports exactly the lost suffix.
func TestLedgerTailMissingWalks(t *testing.T) {
	l, pr := tailSetup(t, false)
	r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, LogEndOffset: -1,
		Batches: []ProbedBatch{{BaseOffset: 25, LastOffset: 60, LeaderEpoch: 4, ProducerID: 99}}})
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Probe == nil || r.Probe.Tail || r.Probe.Offset != 0 {
		t.Fatalf("tail missing: %+v; want a walk from 0", r)
	}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 61, Batches: []ProbedBatch{
		batchOf(pid, 0, 9, 0, 3), {BaseOffset: 10, LastOffset: 19, LeaderEpoch: 3, ProducerID: 99},
		batchOf(pid, 20, 24, 10, 3), {BaseOffset: 25, LastOffset: 60, LeaderEpoch: 4, ProducerID: 99}}})
	if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{25, 30}, {40, 50}}) || r.Probe != nil || len(r.Unconfirmed) != 0 {
		t.Fatalf("walk: %+v; want [25, 30) and [40, 50) lost", r)
	}
}

// TestLedgerTailPerIdentity: two identities (a bump between them) get one
// tail probe each, and nothing else when both are found.
func TestLedgerTailPerIdentity(t *testing.T) {
	bumped := ProducerID{ID: pid.ID, Epoch: pid.Epoch + 1}
	l, pr := tailSetup(t, true)
	r := l.ApplyProbe(pr, ProbeResult{LogStartOffset: 0, Batches: []ProbedBatch{batchOf(pid, 45, 49, 25, 3)}})
	if len(r.Lost) != 0 || r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 69 {
		t.Fatalf("first identity: %+v; want a tail probe at 69", r)
	}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, Batches: []ProbedBatch{batchOf(bumped, 60, 69, 0, 3)}})
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Probe != nil {
		t.Fatalf("second identity: %+v; want nothing more", r)
	}
}

// TestLedgerWalkMergedRangeSecondBatchFromStatelessLeader: two batches of one
// identity acknowledged at contiguous offsets under one recorded epoch (5)
// share a range, but the second was appended under a later epoch (7) by a
// leader that held no state for the producer (its log had lost the first
// batch to an unclean election, and it accepted the continuing sequence
// anyway), the client's metadata lagging throughout. A third range is gone
// too, so its tail probe fails and the walk reads the merged range. The
// second batch is in the log: it must not be reported lost with the first;
// and the first's offsets, compacted away, are no proof that the first batch
// was there: its continuing batch came from a leader that would have taken
// any sequence.
func TestLedgerWalkMergedRangeSecondBatchFromStatelessLeader(t *testing.T) {
	for _, c := range []struct {
		name        string
		head        []ProbedBatch // what the log holds at [0, 10)
		second      int32         // the epoch the second batch was appended under
		lost, uncon [][2]int64
	}{
		{"others' records where the first batch was", []ProbedBatch{{BaseOffset: 0, LastOffset: 9, LeaderEpoch: 6, ProducerID: 99}}, 7,
			[][2]int64{{0, 10}, {25, 35}}, nil},
		{"a compaction gap where the first batch was", nil, 7,
			[][2]int64{{25, 35}}, [][2]int64{{0, 10}}},
		// Appended under the epoch it was recorded under, the second
		// batch proves the gap compaction: the first was sent to that
		// epoch's leader before it.
		{"a compaction gap, the second batch under the recorded epoch", nil, 5,
			[][2]int64{{25, 35}}, nil},
		// Our batch just before the gap and the one after it under one
		// epoch: that leader took both, holding the producer's state,
		// so the gap's records were there.
		{"a compaction gap between two batches of ours under one epoch", []ProbedBatch{batchOf(pid, 0, 4, 0, 7)}, 7,
			[][2]int64{{25, 35}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewAckLedger(0)
			recID(t, l, 0, 10, 5, pid, 0)
			recID(t, l, 10, 20, 5, pid, 10) // merged with [0, 10)
			recID(t, l, 25, 35, 5, pid, 20)
			if got := l.Ranges(tp0); len(got) != 2 {
				t.Fatalf("ranges %+v; want [0, 20) merged and [25, 35)", got)
			}
			q, ok := l.ObserveLeaderEpoch(tp0, 8)
			q = mustQuery(t, q, ok, 5, 8)
			r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 5, EndOffset: 0})
			others := ProbedBatch{BaseOffset: 20, LastOffset: 39, LeaderEpoch: 8, ProducerID: 99}
			if r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 34 {
				t.Fatalf("answer: %+v; want a tail probe at 34", r)
			}
			r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: -1, Batches: []ProbedBatch{others}})
			if r.Probe == nil || r.Probe.Tail || r.Probe.Offset != 0 {
				t.Fatalf("tail missing: %+v; want a walk from 0", r)
			}
			batches := append(append([]ProbedBatch(nil), c.head...), batchOf(pid, 10, 19, 10, c.second), others)
			r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 40, Batches: batches})
			var uncon [][2]int64
			for _, u := range r.Unconfirmed {
				uncon = append(uncon, [2]int64{u.From, u.To})
			}
			if got := lostRanges(r); !reflect.DeepEqual(got, c.lost) || !reflect.DeepEqual(uncon, c.uncon) || r.Probe != nil {
				t.Fatalf("walk: lost %v, unconfirmed %v, %+v; want lost %v, unconfirmed %v", got, uncon, r, c.lost, c.uncon)
			}
			got := l.Ranges(tp0)
			if len(c.head) > 0 && c.head[0].ProducerID == pid.ID {
				if len(got) == 0 || got[0].From != 0 || got[0].To != 5 || !got[0].EpochExact {
					t.Fatalf("ranges %+v; want [0, 5) exact first", got)
				}
				got = got[1:]
			}
			if len(got) != 1 || got[0].From != 10 || got[0].To != 20 || !got[0].EpochExact || got[0].LeaderEpoch != c.second {
				t.Fatalf("ranges %+v; want [10, 20) exact under %d", got, c.second)
			}
		})
	}
}
