package producer

import (
	"reflect"
	"testing"
)

// recNoID records the batch [from, to) of a producer without an identity,
// with crc its header's CRC (none if crc is 0), inexact at epoch.
func recNoID(t *testing.T, l *AckLedger, from, to int64, epoch int32, crc uint32) CheckResult {
	t.Helper()
	r, err := l.Record(tp0, AckedRange{From: from, To: to, LeaderEpoch: epoch, Producer: NoProducerID, FirstSequence: -1,
		TailFrom: from, TailCRC: crc, HasTailCRC: crc != 0})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func noIDBatch(base, last int64, epoch int32, crc uint32) ProbedBatch {
	return ProbedBatch{BaseOffset: base, LastOffset: last, LeaderEpoch: epoch, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, CRC: crc}
}

func unconfirmedRanges(r CheckResult) [][2]int64 {
	var out [][2]int64
	for _, x := range r.Unconfirmed {
		out = append(out, [2]int64{x.From, x.To})
	}
	return out
}

// TestLedgerNoIdentityTail: ranges of a non-idempotent producer are found by
// their newest batch's offsets and CRC. A clean leader change costs one tail
// probe and reports nothing (it reported every range Unconfirmed); what the
// tail does not confirm is walked, each range confirmed by its own newest
// batch, lost past the log end, and Unconfirmed only when its batch is not
// found as acknowledged (a broker that rewrote it has another CRC).
func TestLedgerNoIdentityTail(t *testing.T) {
	const a, b, c = 0xaaaa, 0xbbbb, 0xcccc
	for _, tc := range []struct {
		name string
		// late: [12, 18) recorded last, below the tail, without a CRC
		// (the tail is the newest range a probe can find).
		late bool
		// tail: the fetch of the tail probe at 29.
		tail []ProbedBatch
		// walk: the walk's fetch, when the tail does not confirm all.
		walk        ProbeResult
		lost, uncon [][2]int64
	}{{
		name: "clean",
		tail: []ProbedBatch{noIDBatch(20, 29, 3, c)},
	}, {
		name: "tail appended under a later epoch: only its batch is confirmed",
		tail: []ProbedBatch{noIDBatch(20, 29, 4, c)},
		walk: ProbeResult{LogStartOffset: 0, LogEndOffset: 30,
			Batches: []ProbedBatch{noIDBatch(0, 4, 3, a), noIDBatch(5, 9, 3, b), noIDBatch(10, 19, 3, 0x1), noIDBatch(20, 29, 4, c)}},
	}, {
		name: "truncated: the lost range reported, the rest confirmed by the walk",
		walk: ProbeResult{LogStartOffset: 0, LogEndOffset: 20,
			Batches: []ProbedBatch{noIDBatch(0, 4, 3, a), noIDBatch(5, 9, 3, b), noIDBatch(10, 19, 3, 0x1)}},
		lost: [][2]int64{{20, 30}},
	}, {
		name: "truncated within a merged range: the part past the log end lost, the rest unconfirmed",
		walk: ProbeResult{LogStartOffset: 0, LogEndOffset: 5, Batches: []ProbedBatch{noIDBatch(0, 4, 3, a)}},
		lost: [][2]int64{{5, 10}, {20, 30}}, uncon: [][2]int64{{0, 5}},
	}, {
		name: "another CRC at the offsets (rewritten by the broker, or not ours): unconfirmed, not lost",
		tail: []ProbedBatch{noIDBatch(20, 29, 3, 0xdddd)},
		walk: ProbeResult{LogStartOffset: 0, LogEndOffset: 30,
			Batches: []ProbedBatch{noIDBatch(0, 4, 3, a), noIDBatch(5, 9, 3, b), noIDBatch(10, 19, 3, 0x1), noIDBatch(20, 29, 3, 0xdddd)}},
		uncon: [][2]int64{{20, 30}},
	}, {
		name: "a range acknowledged after the tail is not confirmed by it",
		late: true,
		tail: []ProbedBatch{noIDBatch(20, 29, 3, c)},
		walk: ProbeResult{LogStartOffset: 0, LogEndOffset: 30,
			Batches: []ProbedBatch{noIDBatch(10, 19, 3, 0x1), noIDBatch(20, 29, 3, c)}},
		uncon: [][2]int64{{12, 18}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewAckLedger(0)
			recNoID(t, l, 0, 5, 3, a)
			recNoID(t, l, 5, 10, 3, b) // merged with [0, 5): its tail batch
			recNoID(t, l, 20, 30, 3, c)
			want := []AckedRange{
				{From: 0, To: 10, LeaderEpoch: 3, Producer: NoProducerID, FirstSequence: -1, TailFrom: 5, TailCRC: b, HasTailCRC: true},
				{From: 20, To: 30, LeaderEpoch: 3, Producer: NoProducerID, FirstSequence: -1, TailFrom: 20, TailCRC: c, HasTailCRC: true},
			}
			if got := l.Ranges(tp0); !reflect.DeepEqual(got, want) {
				t.Fatalf("ranges %+v, want %+v", got, want)
			}
			if tc.late {
				recNoID(t, l, 12, 18, 3, 0)
			}
			q, ok := l.ObserveLeaderEpoch(tp0, 5)
			q = mustQuery(t, q, ok, 3, 5)
			r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 100})
			if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 29 {
				t.Fatalf("answer: %+v; want a tail probe at 29", r)
			}
			r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: -1, LogEndOffset: -1, Batches: tc.tail})
			var lost, uncon [][2]int64
			for n := 0; r.Probe != nil; n++ {
				if n > 3 || r.Probe.Tail || r.Probe.Offset >= 30 {
					t.Fatalf("probe %+v", r.Probe)
				}
				lost, uncon = append(lost, lostRanges(r)...), append(uncon, unconfirmedRanges(r)...)
				r = l.ApplyProbe(*r.Probe, tc.walk)
			}
			lost, uncon = append(lost, lostRanges(r)...), append(uncon, unconfirmedRanges(r)...)
			if !reflect.DeepEqual(lost, tc.lost) || !reflect.DeepEqual(uncon, tc.uncon) {
				t.Fatalf("lost %v unconfirmed %v; want %v and %v", lost, uncon, tc.lost, tc.uncon)
			}
			for _, x := range l.Ranges(tp0) {
				if !x.EpochExact {
					t.Fatalf("range left unconfirmed: %+v", l.Ranges(tp0))
				}
			}
			// Everything left is exact and checked: the next leader
			// change settles it with one question, no probe.
			q, ok = l.ObserveLeaderEpoch(tp0, 6)
			if ok {
				r = l.ApplyEpochEnd(q, EpochEnd{Epoch: q.Epoch, EndOffset: 100})
				if len(r.Lost)+len(r.Unconfirmed) != 0 || r.Probe != nil {
					t.Fatalf("next change: %+v", r)
				}
			}
		})
	}
}

// TestLedgerLateAckOfOldEpochIsChecked: a range acknowledged after the
// ledger saw a newer leader epoch, recorded under an older one (the
// metadata the batch was sent with lagged), is checked at once when nothing
// outstanding covers it: it was left unchecked until the next leader change,
// and its loss unreported, maybe forever.
func TestLedgerLateAckOfOldEpochIsChecked(t *testing.T) {
	setup := func(t *testing.T) *AckLedger {
		t.Helper()
		l := NewAckLedger(0)
		l.ObserveLeaderEpoch(tp0, 3)
		rec(t, l, 0, 10, 3, false)
		q, ok := l.ObserveLeaderEpoch(tp0, 4)
		q = mustQuery(t, q, ok, 3, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 10})
		if r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 9 {
			t.Fatalf("answer: %+v; want a tail probe at 9", r)
		}
		if r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: -1, Batches: []ProbedBatch{batchOf(pid, 0, 9, 0, 3)}}); r.Probe != nil || len(r.Lost) != 0 {
			t.Fatalf("tail: %+v; want it confirmed", r)
		}
		return l
	}
	t.Run("inexact: probed", func(t *testing.T) {
		l := setup(t)
		// Written by the deposed leader of 3 after the change (acks=1),
		// not in the log of 4.
		r, err := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 3, Producer: pid, FirstSequence: 10})
		if err != nil || r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 19 || r.Probe.CurrentLeaderEpoch != 4 || r.Next != nil {
			t.Fatalf("Record: %+v %v; want a tail probe at 19", r, err)
		}
		// A second one while the probe is out waits for it.
		if r2, _ := l.Record(tp0, AckedRange{From: 20, To: 30, LeaderEpoch: 3, Producer: pid, FirstSequence: 20}); r2.Probe != nil || r2.Next != nil {
			t.Fatalf("Record with a probe out: %+v", r2)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: -1})
		if r.Probe == nil {
			t.Fatalf("tail not found: %+v; want a walk", r)
		}
		r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 10})
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{10, 20}, {20, 30}}) || r.Probe != nil {
			t.Fatalf("walk: %+v; want [10, 30) lost", r)
		}
	})
	t.Run("exact: asked about", func(t *testing.T) {
		l := setup(t)
		r, err := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 3, EpochExact: true, Producer: pid, FirstSequence: 10})
		if err != nil || r.Next == nil || r.Next.Epoch != 3 || r.Next.CurrentLeaderEpoch != 4 || r.Probe != nil {
			t.Fatalf("Record: %+v %v; want a question for epoch 3", r, err)
		}
		if r = l.ApplyEpochEnd(*r.Next, EpochEnd{Epoch: 3, EndOffset: 10}); !reflect.DeepEqual(lostRanges(r), [][2]int64{{10, 20}}) {
			t.Fatalf("answer: %+v; want [10, 20) lost", r)
		}
	})
	t.Run("current epoch: nothing to check", func(t *testing.T) {
		l := setup(t)
		if r, _ := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 4, Producer: pid, FirstSequence: 10}); r.Probe != nil || r.Next != nil {
			t.Fatalf("Record: %+v", r)
		}
	})
	t.Run("question outstanding: it covers the range", func(t *testing.T) {
		l := NewAckLedger(0)
		l.ObserveLeaderEpoch(tp0, 3)
		rec(t, l, 0, 10, 3, false)
		q, ok := l.ObserveLeaderEpoch(tp0, 4)
		q = mustQuery(t, q, ok, 3, 4)
		if r, _ := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 3, Producer: pid, FirstSequence: 10}); r.Probe != nil || r.Next != nil {
			t.Fatalf("Record with a question out: %+v", r)
		}
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 10})
		if r.Probe == nil || r.Probe.Offset != 19 {
			t.Fatalf("answer: %+v; want a tail probe at 19", r)
		}
	})
}

// TestLedgerNoIdentityWalkNotReached: a walk that did not reach a range's
// newest batch (below the log end, past what the fetch returned) leaves the
// range suspect for the next fetch, as it does a range with an identity.
func TestLedgerNoIdentityWalkNotReached(t *testing.T) {
	l := NewAckLedger(0)
	recNoID(t, l, 0, 5, 3, 0xa)
	recNoID(t, l, 5, 10, 3, 0xb)
	q, ok := l.ObserveLeaderEpoch(tp0, 4)
	q = mustQuery(t, q, ok, 3, 4)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 100})
	skipTail(t, l, &r)
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 100, Batches: []ProbedBatch{noIDBatch(0, 4, 3, 0xa)}})
	if len(r.Lost)+len(r.Unconfirmed) != 0 || r.Probe == nil || r.Probe.Offset != 0 {
		t.Fatalf("walk: %+v; want the range kept for the next fetch", r)
	}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 100, Batches: []ProbedBatch{noIDBatch(0, 4, 3, 0xa), noIDBatch(5, 9, 3, 0xb)}})
	if len(r.Lost)+len(r.Unconfirmed) != 0 || r.Probe != nil {
		t.Fatalf("second walk: %+v; want the range confirmed", r)
	}
}

// TestLedgerRecordedDuringUnknownAnswer: a range recorded while a question
// was out, under an epoch above the one asked (and below the leader's), is
// asked about after an answer that settles nothing: it was left unchecked.
func TestLedgerRecordedDuringUnknownAnswer(t *testing.T) {
	l := NewAckLedger(0)
	l.ObserveLeaderEpoch(tp0, 2)
	rec(t, l, 0, 10, 2, true)
	q, ok := l.ObserveLeaderEpoch(tp0, 4)
	q = mustQuery(t, q, ok, 2, 4)
	if r, _ := l.Record(tp0, AckedRange{From: 10, To: 20, LeaderEpoch: 3, EpochExact: true, Producer: pid, FirstSequence: 10}); r.Next != nil || r.Probe != nil {
		t.Fatalf("Record with a question out: %+v", r)
	}
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: -1, EndOffset: -1})
	if !r.Unknown || r.Next == nil || r.Next.Epoch != 3 || r.Probe == nil {
		t.Fatalf("answer: %+v; want a probe and a question for epoch 3", r)
	}
}

// TestLedgerNoIdentityRecordedBelowOutstandingWalk: a range without an
// identity acknowledged (under a lagging epoch) while a walk is out, at
// offsets below those the walk fetches from (the new leader's log was cut
// below the older ranges, and took the batch there): the walk's fetch did not
// read it, so it waits for the next probe, which confirms it; it is not
// reported Unconfirmed because batches above it came back.
func TestLedgerNoIdentityRecordedBelowOutstandingWalk(t *testing.T) {
	const a, b = 0xaaaa, 0xbbbb
	l := NewAckLedger(0)
	recNoID(t, l, 100, 110, 5, a)
	q, ok := l.ObserveLeaderEpoch(tp0, 7)
	q = mustQuery(t, q, ok, 5, 7)
	r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 5, EndOffset: 50})
	if r.Probe == nil || !r.Probe.Tail || r.Probe.Offset != 109 {
		t.Fatalf("answer: %+v; want a tail probe at 109", r)
	}
	others := noIDBatch(60, 199, 7, 0x1)
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: -1, Batches: []ProbedBatch{others}})
	if r.Probe == nil || r.Probe.Tail || r.Probe.Offset != 100 {
		t.Fatalf("tail missing: %+v; want a walk from 100", r)
	}
	walk := *r.Probe
	if w := recNoID(t, l, 50, 60, 5, b); w.Probe != nil || w.Next != nil {
		t.Fatalf("recorded while the walk is out: %+v; want it to wait", w)
	}
	r = l.ApplyProbe(walk, ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{others}})
	if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{100, 110}}) || len(r.Lost) != 0 {
		t.Fatalf("walk from 100: %+v; want only [100, 110) unconfirmed", r)
	}
	if r.Probe == nil || r.Probe.Offset > 59 {
		t.Fatalf("walk from 100: %+v; want a probe reading [50, 60)", r)
	}
	r = l.ApplyProbe(*r.Probe, ProbeResult{LogStartOffset: 0, LogEndOffset: 200, Batches: []ProbedBatch{noIDBatch(50, 59, 7, b), others}})
	if len(r.Lost) != 0 || len(r.Unconfirmed) != 0 || r.Probe != nil {
		t.Fatalf("probe of [50, 60): %+v; want it confirmed", r)
	}
	if got := l.Ranges(tp0); len(got) != 1 || got[0].From != 50 || !got[0].EpochExact {
		t.Fatalf("ranges %+v; want [50, 60) exact", got)
	}
}
