package producer

import (
	"reflect"
	"testing"
)

// TestLedgerEchoAnswer: asked about an epoch older than every entry of its
// leader epoch cache, a Kafka broker answers the requested epoch with its
// oldest entry's start (LeaderEpochFileCache.endOffsetFor), and retention
// trims that cache to the log start. [0, 10) and [12, 20) were appended
// under epoch 3 (exact); an unclean election made epoch 4's leader a replica
// that never had them, its log holds other records under 4, and
// DeleteRecords moved its log start to 15 (its cache: 4 from 15). Asked
// about 3, it answers (3, 15): the same answer a leader that had them would
// give once retention passed them. Below 15 the ledger cannot tell: they
// are reported Unconfirmed (they survived in silence before); from 15 on,
// lost either way.
func TestLedgerEchoAnswer(t *testing.T) {
	setup := func(t *testing.T, max int) (*AckLedger, EpochQuery) {
		l := NewAckLedger(max)
		rec(t, l, 0, 10, 3, true)
		rec(t, l, 12, 20, 3, true)
		q, ok := l.ObserveLeaderEpoch(tp0, 4)
		return l, mustQuery(t, q, ok, 3, 4)
	}
	echo := EpochEnd{Epoch: 3, EndOffset: 15, LogStartOffset: -1}
	for _, ls := range []int64{15, -1} { // -1: not known, taken for an echo
		l, q := setup(t, 0)
		if !l.NeedsLogStart(q, echo) {
			t.Fatal("NeedsLogStart: false for a possible echo")
		}
		ans := echo
		ans.LogStartOffset = ls
		r := l.ApplyEpochEnd(q, ans)
		if got := unconfirmedRanges(r); !reflect.DeepEqual(got, [][2]int64{{0, 10}, {12, 15}}) {
			t.Fatalf("log start %d: unconfirmed %v; want [0, 10) and [12, 15)", ls, got)
		}
		for i, u := range r.Unconfirmed {
			if !u.Unconfirmed || u.Untracked || u.Err != nil || u.LeaderEpoch != 3 || u.CurrentLeaderEpoch != 4 || u.FirstSequence != int32(u.From) || u.Producer != pid {
				t.Fatalf("report %d: %+v", i, u)
			}
		}
		if got := lostRanges(r); !reflect.DeepEqual(got, [][2]int64{{15, 20}}) || r.Lost[0].FirstSequence != 15 || r.Lost[0].Unconfirmed {
			t.Fatalf("log start %d: lost %+v; want [15, 20)", ls, r.Lost)
		}
		if r.Next != nil || r.Probe != nil || r.Unknown {
			t.Fatalf("result %+v", r)
		}
		if got := l.Ranges(tp0); len(got) != 0 {
			t.Fatalf("ranges %+v still tracked", got)
		}
	}

	t.Run("true end above the log start", func(t *testing.T) {
		// A leader that keeps epoch 3 answers where it ends, above its
		// log start: both ranges are in its log (log matching).
		l, q := setup(t, 0)
		ans := EpochEnd{Epoch: 3, EndOffset: 20, LogStartOffset: -1}
		if !l.NeedsLogStart(q, ans) {
			t.Fatal("NeedsLogStart: false")
		}
		ans.LogStartOffset = 15
		if r := l.ApplyEpochEnd(q, ans); len(r.Lost)+len(r.Unconfirmed) != 0 || r.Next != nil || r.Probe != nil {
			t.Fatalf("result %+v; want both present", r)
		}
		if got := l.Ranges(tp0); len(got) != 2 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("the bound's dropped offsets", func(t *testing.T) {
		// The bound dropped [0, 5): the oldest range held reported
		// Unconfirmed reports them too.
		l := NewAckLedger(2)
		rec(t, l, 0, 5, 2, true)
		rec(t, l, 6, 10, 3, true)
		rec(t, l, 12, 20, 3, true)
		q, ok := l.ObserveLeaderEpoch(tp0, 4)
		q = mustQuery(t, q, ok, 3, 4)
		r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 15, LogStartOffset: 15})
		var untracked [][2]int64
		for _, u := range r.Unconfirmed {
			if u.Untracked {
				untracked = append(untracked, [2]int64{u.From, u.To})
			}
		}
		if !reflect.DeepEqual(untracked, [][2]int64{{0, 5}}) {
			t.Fatalf("untracked %v; want [0, 5): %+v", untracked, r)
		}
	})
	t.Run("no echo possible", func(t *testing.T) {
		l, q := setup(t, 0)
		for _, ans := range []EpochEnd{
			{Epoch: 2, EndOffset: 15, LogStartOffset: -1}, // an older epoch: a cache entry followed by another
			{Epoch: 3, EndOffset: 0, LogStartOffset: -1},  // nothing below the end
			{Epoch: -1, EndOffset: -1, LogStartOffset: -1},
		} {
			if l.NeedsLogStart(q, ans) {
				t.Fatalf("NeedsLogStart(%+v): true", ans)
			}
		}
		// Only inexact ranges of the epoch: they are probed, whatever
		// the answer says.
		l = NewAckLedger(0)
		rec(t, l, 0, 10, 3, false)
		q, _ = l.ObserveLeaderEpoch(tp0, 4)
		if l.NeedsLogStart(q, echo) {
			t.Fatal("NeedsLogStart: true for inexact ranges")
		}
	})
	t.Run("proven in the current leader's log", func(t *testing.T) {
		// Confirmed against epoch 4's leader by a true end, then
		// rechecked against it (the producer's sequences said
		// something is gone) after DeleteRecords moved its log start
		// to 22 (its cache: 4 from 22): they were in this log, so the
		// echo (3, 22) is retention, and nothing is reported.
		l, q := setup(t, 0)
		if r := l.ApplyEpochEnd(q, EpochEnd{Epoch: 3, EndOffset: 20, LogStartOffset: 0}); len(r.Lost)+len(r.Unconfirmed) != 0 {
			t.Fatalf("result %+v", r)
		}
		q, ok := l.Recheck(tp0, 4)
		q = mustQuery(t, q, ok, 3, 4)
		ans := EpochEnd{Epoch: 3, EndOffset: 22, LogStartOffset: -1}
		if l.NeedsLogStart(q, ans) {
			t.Fatal("NeedsLogStart: true for ranges proven in this log")
		}
		if r := l.ApplyEpochEnd(q, ans); len(r.Lost)+len(r.Unconfirmed) != 0 || r.Next != nil || r.Probe != nil {
			t.Fatalf("result %+v; want nothing reported", r)
		}
	})
}

// TestLedgerCleanChangesAfterRetention: the false alarms the echo rule must
// not raise. [0, 10) under epoch 1 is confirmed by epoch 2's leader, [10,
// 20) written under 2; retention moves the log start to 15 (epoch 2's cache
// entry now starts there) and leadership moves cleanly to epoch 3: the
// answer for epoch 2 (20, its true end, above the log start) proves both
// ranges, [0, 10) through the log it was proven in (log matching), and
// nothing is reported. Only when retention has passed every record the
// producer wrote since (an idle partition) is the answer an echo for every
// epoch, and the ranges it passed are reported Unconfirmed, once: Kafka's
// answers cannot tell retention from an unclean election's loss there.
func TestLedgerCleanChangesAfterRetention(t *testing.T) {
	answer := func(l *AckLedger, q EpochQuery, end, logStart int64) CheckResult {
		ans := EpochEnd{Epoch: q.Epoch, EndOffset: end, LogStartOffset: -1}
		if l.NeedsLogStart(q, ans) {
			ans.LogStartOffset = logStart
		}
		return l.ApplyEpochEnd(q, ans)
	}
	setup := func(t *testing.T) (*AckLedger, EpochQuery) {
		l := NewAckLedger(0)
		rec(t, l, 0, 10, 1, true)
		q, ok := l.ObserveLeaderEpoch(tp0, 2)
		if r := answer(l, mustQuery(t, q, ok, 1, 2), 10, 0); len(r.Lost)+len(r.Unconfirmed) != 0 || r.Next != nil || r.Probe != nil {
			t.Fatalf("first leader change: %+v", r)
		}
		rec(t, l, 10, 20, 2, true)
		q, ok = l.ObserveLeaderEpoch(tp0, 3)
		return l, mustQuery(t, q, ok, 2, 3)
	}
	t.Run("retention below the newest epoch", func(t *testing.T) {
		l, q := setup(t)
		if r := answer(l, q, 20, 15); len(r.Lost)+len(r.Unconfirmed) != 0 || r.Next != nil || r.Probe != nil {
			t.Fatalf("result %+v; want nothing reported, nothing more asked", r)
		}
		if got := l.Ranges(tp0); len(got) != 2 {
			t.Fatalf("ranges %+v", got)
		}
	})
	t.Run("idle past retention", func(t *testing.T) {
		l, q := setup(t)
		// The new leader's cache: 3 from 25, the log start (its
		// epoch 2 entry trimmed away): asked about 2, it echoes 25.
		r := answer(l, q, 25, 25)
		got := unconfirmedRanges(r)
		if r.Next != nil { // then epoch 1, echoed the same
			r = answer(l, mustQuery(t, *r.Next, true, 1, 3), 25, 25)
			got = append(got, unconfirmedRanges(r)...)
		}
		if !reflect.DeepEqual(got, [][2]int64{{10, 20}, {0, 10}}) || len(r.Lost) != 0 || r.Next != nil || r.Probe != nil {
			t.Fatalf("unconfirmed %v, last result %+v; want [10, 20) then [0, 10)", got, r)
		}
		if got := l.Ranges(tp0); len(got) != 0 {
			t.Fatalf("ranges %+v still tracked", got)
		}
	})
}
