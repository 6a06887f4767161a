package producer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	kepocherrors "github.com/kepoch/kepoch/errors"
)

// kinds describes outcomes as "Kind(batch)" / "Kind" strings, with batch
// refs mapped to names.
func kinds(d Decision, names map[BatchRef]string) string {
	var out []string
	for _, o := range d.Outcomes {
		switch o := o.(type) {
		case ResequencedNoLoss:
			out = append(out, "ResequencedNoLoss("+names[o.Batch]+")")
		case PossibleDuplicate:
			out = append(out, "PossibleDuplicate("+names[o.Batch]+")")
		case Failed:
			out = append(out, "Failed("+names[o.Batch]+")")
		case ProvenGap:
			out = append(out, "ProvenGap")
		case PossibleGap:
			out = append(out, "PossibleGap")
		}
	}
	return strings.Join(out, " ")
}

func outcomes[T Outcome](d Decision) []T {
	var out []T
	for _, o := range d.Outcomes {
		if x, ok := o.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// Answers name the topic by ID, as Kafka 4.1 and later answer (Produce
// v13+).
var (
	answered = func(code int16) ProduceResult {
		return ProduceResult{Code: code, BaseOffset: -1, LogStartOffset: -1, ByTopicID: true}
	}
	okAt = func(off int64) ProduceResult {
		return ProduceResult{BaseOffset: off, LogStartOffset: 0, ByTopicID: true}
	}
	oosn = answered(kerr.OutOfOrderSequenceNumber.Code)
)

// TestIdempotentDecisionTable drives every row of the Produce answer →
// action table (Sequencer.Complete) on the same setup: partition t[0] has
// acknowledged a 2-record batch at offsets 100-101 (sequences 0-1) and has
// b1 (2 records, sequences 2-3) and b2 (1 record, sequence 4) in flight. b1
// gets the answer under test; then b2 gets drain (what a leader would
// answer it), which settles the partition.
func TestIdempotentDecisionTable(t *testing.T) {
	bumped := ProducerID{ID: pid.ID, Epoch: pid.Epoch + 1}
	newID := ProducerID{ID: 2000, Epoch: 0}
	type want struct {
		outcomes string // after b1's answer and b2's drain (and SetProducer when a new ID is needed)
		acks     int
		bump     string // "", "epoch", "new-id"
		split    bool
		fatal    bool
		check    bool // CheckAckedWrites names t[0]
		// next resend afterwards ("": none) and its identity
		resend   string
		resendID BatchIdentity
		b1Maybe  bool
	}
	rows := []struct {
		name   string
		answer ProduceResult
		drain  ProduceResult
		want   want
	}{
		{"NONE", okAt(102), okAt(104), want{acks: 2}},
		{"DUPLICATE_SEQUENCE_NUMBER", answered(kerr.DuplicateSequenceNumber.Code), okAt(104), want{acks: 2}},
		{"NotSent", ProduceResult{Delivery: NotSent}, oosn, want{resend: "b1", resendID: id(pid, 2)}},
		{"LEADER_NOT_AVAILABLE", answered(kerr.LeaderNotAvailable.Code), oosn, want{resend: "b1", resendID: id(pid, 2)}},
		{"NOT_ENOUGH_REPLICAS", answered(kerr.NotEnoughReplicas.Code), oosn, want{resend: "b1", resendID: id(pid, 2)}},
		{"UNKNOWN_TOPIC_OR_PARTITION", answered(kerr.UnknownTopicOrPartition.Code), oosn, want{resend: "b1", resendID: id(pid, 2)}},
		{"NoResponse", ProduceResult{Delivery: NoResponse}, ProduceResult{Delivery: NoResponse}, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"NOT_LEADER_OR_FOLLOWER", answered(kerr.NotLeaderForPartition.Code), oosn, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"REQUEST_TIMED_OUT", answered(kerr.RequestTimedOut.Code), oosn, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"NOT_ENOUGH_REPLICAS_AFTER_APPEND", answered(kerr.NotEnoughReplicasAfterAppend.Code), oosn, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"KAFKA_STORAGE_ERROR", answered(kerr.KafkaStorageError.Code), oosn, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"unknown code", answered(9999), oosn, want{resend: "b1", resendID: id(pid, 2), b1Maybe: true}},
		{"OUT_OF_ORDER_SEQUENCE_NUMBER next", oosn, oosn, want{
			outcomes: "ProvenGap ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "epoch", check: true, resend: "b1", resendID: id(bumped, 0)}},
		{"UNKNOWN_PRODUCER_ID logStart -1", answered(kerr.UnknownProducerID.Code), oosn, want{
			outcomes: "PossibleGap ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "epoch", check: true, resend: "b1", resendID: id(bumped, 0)}},
		{"UNKNOWN_PRODUCER_ID logStart > lastAcked", ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: 102}, oosn, want{
			outcomes: "ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "epoch", resend: "b1", resendID: id(bumped, 0)}},
		{"UNKNOWN_PRODUCER_ID logStart = lastAcked", ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: 101}, oosn, want{
			outcomes: "PossibleGap ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "epoch", check: true, resend: "b1", resendID: id(bumped, 0)}},
		{"UNKNOWN_PRODUCER_ID logStart < lastAcked", ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: 50}, oosn, want{
			outcomes: "PossibleGap ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "epoch", check: true, resend: "b1", resendID: id(bumped, 0)}},
		{"INVALID_PRODUCER_EPOCH", answered(kerr.InvalidProducerEpoch.Code), answered(kerr.InvalidProducerEpoch.Code), want{
			outcomes: "ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "new-id", resend: "b1", resendID: id(newID, 0)}},
		{"INVALID_PRODUCER_ID_MAPPING", answered(kerr.InvalidProducerIDMapping.Code), oosn, want{
			outcomes: "ResequencedNoLoss(b1) ResequencedNoLoss(b2)", bump: "new-id", resend: "b1", resendID: id(newID, 0)}},
		{"MESSAGE_TOO_LARGE", answered(kerr.MessageTooLarge.Code), oosn, want{split: true}},
		{"RECORD_LIST_TOO_LARGE", answered(kerr.RecordListTooLarge.Code), oosn, want{split: true}},
		{"INVALID_RECORD", answered(kerr.InvalidRecord.Code), oosn, want{
			outcomes: "Failed(b1) ResequencedNoLoss(b2)", bump: "epoch", resend: "b2", resendID: id(bumped, 0)}},
		{"CORRUPT_MESSAGE", answered(kerr.CorruptMessage.Code), oosn, want{
			outcomes: "Failed(b1) ResequencedNoLoss(b2)", bump: "epoch", resend: "b2", resendID: id(bumped, 0)}},
		{"TOPIC_AUTHORIZATION_FAILED", answered(kerr.TopicAuthorizationFailed.Code), oosn, want{
			outcomes: "Failed(b1) ResequencedNoLoss(b2)", bump: "epoch", resend: "b2", resendID: id(bumped, 0)}},
		{"TRANSACTION_ABORTABLE", answered(kerr.TransactionAbortable.Code), oosn, want{
			outcomes: "Failed(b1) ResequencedNoLoss(b2)", bump: "epoch", resend: "b2", resendID: id(bumped, 0)}},
		{"PRODUCER_FENCED", answered(kerr.ProducerFenced.Code), oosn, want{outcomes: "Failed(b1) Failed(b2)", fatal: true}},
		{"CLUSTER_AUTHORIZATION_FAILED", answered(kerr.ClusterAuthorizationFailed.Code), oosn, want{outcomes: "Failed(b1) Failed(b2)", fatal: true}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			h := newHarness(t, Config{}, pid)
			r0, _ := h.assign(tp0, 2)
			h.ok(r0, 100)
			r1, i1 := h.assign(tp0, 2)
			r2, i2 := h.assign(tp0, 1)
			if i1 != id(pid, 2) || i2 != id(pid, 4) {
				t.Fatalf("setup identities %v %v", i1, i2)
			}
			names := map[BatchRef]string{r1: "b1", r2: "b2"}
			var d Decision
			d.Merge(h.s.Complete(r1, row.answer))
			d.Merge(h.s.Complete(r2, row.drain))
			if d.NeedProducerID {
				sd, err := h.s.SetProducer(newID)
				if err != nil {
					t.Fatal(err)
				}
				d.Merge(sd)
			}
			w := row.want
			if got := kinds(d, names); got != w.outcomes {
				t.Errorf("outcomes %q, want %q", got, w.outcomes)
			}
			if len(d.Acks) != w.acks {
				t.Errorf("%d acks, want %d", len(d.Acks), w.acks)
			}
			bump := ""
			if d.Bump != nil {
				bump = "epoch"
				if d.Bump.NewProducerID {
					bump = "new-id"
				}
				if d.Bump.From != pid {
					t.Errorf("bump from %v", d.Bump.From)
				}
			}
			if bump != w.bump || d.NeedProducerID != (w.bump == "new-id") {
				t.Errorf("bump %q (need ID %v), want %q", bump, d.NeedProducerID, w.bump)
			}
			if wantBumps := map[string]int{"": 0, "epoch": 1, "new-id": 1}[w.bump]; h.s.Bumps() != wantBumps {
				t.Errorf("%d bumps, want %d", h.s.Bumps(), wantBumps)
			}
			if (len(d.Split) == 1 && d.Split[0] == r1) != w.split {
				t.Errorf("split %v", d.Split)
			}
			if (d.Fatal != nil) != w.fatal {
				t.Errorf("fatal %v", d.Fatal)
			}
			if (len(d.CheckAckedWrites) == 1 && d.CheckAckedWrites[0] == tp0) != w.check {
				t.Errorf("check acked writes %v", d.CheckAckedWrites)
			}
			ref, got, ok := h.s.NextResend(tp0)
			if w.resend != "" {
				if !ok || names[ref] != w.resend || got != w.resendID {
					t.Errorf("NextResend = %s %v %v, want %s %v", names[ref], got, ok, w.resend, w.resendID)
				}
			} else if ok {
				t.Errorf("NextResend = %s %v, want none", names[ref], got)
			}
			if b := h.s.batches[r1]; b != nil && b.maybeWritten != w.b1Maybe {
				t.Errorf("b1 maybe-written %v", b.maybeWritten)
			}
			// Every rewritten batch's new identity is what the
			// Sequencer now stamps, in sequence order from 0.
			for _, o := range outcomes[ResequencedNoLoss](d) {
				if cur, _ := h.s.Identity(o.Batch); cur != o.To || o.From.Producer != pid {
					t.Errorf("rewrite %+v, current identity %v", o, cur)
				}
			}
		})
	}
}

// TestUnknownProducerIDLogStart pins testing.md §3's three
// UNKNOWN_PRODUCER_ID cases by their reports: -1 and ≤ lastAcked → PossibleGap
// with the last acknowledged offset; > lastAcked → no gap, no check.
func TestUnknownProducerIDLogStart(t *testing.T) {
	for _, c := range []struct {
		logStart int64
		gap      bool
	}{{-1, true}, {50, true}, {101, true}, {102, false}, {5000, false}} {
		t.Run(fmt.Sprint(c.logStart), func(t *testing.T) {
			h := newHarness(t, Config{}, pid)
			r0, _ := h.assign(tp0, 2)
			h.ok(r0, 100)
			r1, _ := h.assign(tp0, 1)
			d := h.s.Complete(r1, ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: c.logStart})
			gaps := outcomes[PossibleGap](d)
			if c.gap != (len(gaps) == 1) {
				t.Fatalf("gaps %+v", gaps)
			}
			if c.gap {
				g := gaps[0]
				if g.LastAckedOffset != 101 || g.LastAckedSequence != 1 || g.LogStartOffset != c.logStart || g.Producer != pid {
					t.Fatalf("gap %+v", g)
				}
			}
			if d.Bump == nil || d.Bump.To != (ProducerID{pid.ID, pid.Epoch + 1}) {
				t.Fatalf("bump %+v", d.Bump)
			}
			rs := outcomes[ResequencedNoLoss](d)
			if len(rs) != 1 || rs[0].To != id(d.Bump.To, 0) || rs[0].From != id(pid, 2) {
				t.Fatalf("resequenced %+v", rs)
			}
		})
	}
	// Nothing ever acknowledged on the partition: nothing can be lost,
	// whatever the log start offset.
	h := newHarness(t, Config{}, pid)
	r1, _ := h.assign(tp0, 1)
	d := h.s.Complete(r1, ProduceResult{Code: kerr.UnknownProducerID.Code, LogStartOffset: -1})
	if len(outcomes[PossibleGap](d)) != 0 || len(outcomes[ResequencedNoLoss](d)) != 1 {
		t.Fatalf("nothing acked: %+v", d.Outcomes)
	}
}

// fiveInFlight sets up t[0] with batch 0 acknowledged at offset 10 and five
// single-record batches (sequences 1..5) in flight.
func fiveInFlight(t *testing.T) (*harness, []BatchRef, map[BatchRef]string) {
	h := newHarness(t, Config{}, pid)
	r0, _ := h.assign(tp0, 1)
	h.ok(r0, 10)
	refs := make([]BatchRef, 5)
	names := map[BatchRef]string{}
	for i := range refs {
		var got BatchIdentity
		refs[i], got = h.assign(tp0, 1)
		if got != id(pid, int32(i+1)) {
			t.Fatalf("setup %v", got)
		}
		names[refs[i]] = fmt.Sprintf("b%d", i+1)
	}
	return h, refs, names
}

// TestOutOfOrderNonNextWithFiveInFlight: OUT_OF_ORDER_SEQUENCE_NUMBER on a
// batch behind an unacknowledged one is a consequence, not a gap: no bump, no
// outcome, and the batches are resent unchanged in order.
func TestOutOfOrderNonNextWithFiveInFlight(t *testing.T) {
	h, b, _ := fiveInFlight(t)
	var d Decision
	d.Merge(h.s.Complete(b[0], answered(kerr.NotLeaderForPartition.Code)))
	for _, r := range b[1:] {
		d.Merge(h.s.Complete(r, oosn))
	}
	if d.Bump != nil || len(d.Outcomes) != 0 || h.s.Bumps() != 0 {
		t.Fatalf("decision %+v", d)
	}
	for i, r := range b {
		h.resend(tp0, r, id(pid, int32(i+1)))
		h.noResend(tp0)
		h.ok(r, int64(11+i))
	}
	if st := h.state(tp0); st.LastAckedSequence != 5 || st.LastAckedOffset != 15 || len(st.InFlight) != 0 {
		t.Fatalf("state %+v", st)
	}
}

// TestOutOfOrderNextWithFiveInFlight: the same error on the next expected
// batch is a gap: ProvenGap with the last acknowledged sequence and offset,
// then, once the other four answer (also out of order), exactly one bump and
// all five rewritten from sequence 0 under the new epoch.
func TestOutOfOrderNextWithFiveInFlight(t *testing.T) {
	h, b, names := fiveInFlight(t)
	d := h.s.Complete(b[0], oosn)
	gaps := outcomes[ProvenGap](d)
	if len(gaps) != 1 || gaps[0].LastAckedSequence != 0 || gaps[0].LastAckedOffset != 10 || gaps[0].RejectedSequence != 1 || gaps[0].Producer != pid {
		t.Fatalf("gap %+v", d.Outcomes)
	}
	if d.Bump != nil {
		t.Fatal("bumped with four batches still on the wire")
	}
	for _, r := range b[1:4] {
		if x := h.s.Complete(r, oosn); !x.Empty() {
			t.Fatalf("stale answer decided %+v", x)
		}
	}
	d = h.s.Complete(b[4], oosn)
	bumped := ProducerID{pid.ID, pid.Epoch + 1}
	if d.Bump == nil || d.Bump.To != bumped || h.s.Bumps() != 1 {
		t.Fatalf("bump %+v (%d)", d.Bump, h.s.Bumps())
	}
	if got := kinds(d, names); got != "ResequencedNoLoss(b1) ResequencedNoLoss(b2) ResequencedNoLoss(b3) ResequencedNoLoss(b4) ResequencedNoLoss(b5)" {
		t.Fatalf("outcomes %s", got)
	}
	for i, o := range outcomes[ResequencedNoLoss](d) {
		if o.From != id(pid, int32(i+1)) || o.To != id(bumped, int32(i)) {
			t.Fatalf("rewrite %d: %+v", i, o)
		}
	}
	for i, r := range b {
		h.resend(tp0, r, id(bumped, int32(i)))
		h.ok(r, int64(20+i))
	}
	if st := h.state(tp0); st.Owner != bumped || st.LastAckedSequence != 4 || st.NextSequence != 5 {
		t.Fatalf("state %+v", st)
	}
}

// TestOutOfOrderNextAfterUnknownOutcome: a batch that once got no answer and
// is then rewritten is reported PossibleDuplicate, not ResequencedNoLoss.
func TestOutOfOrderNextAfterUnknownOutcome(t *testing.T) {
	h, b, names := fiveInFlight(t)
	h.s.Complete(b[0], ProduceResult{Delivery: NoResponse})
	for _, r := range b[1:] {
		h.s.Complete(r, ProduceResult{Delivery: NoResponse})
	}
	h.resend(tp0, b[0], id(pid, 1))
	d := h.s.Complete(b[0], oosn)
	if got := kinds(d, names); got != "ProvenGap PossibleDuplicate(b1) PossibleDuplicate(b2) PossibleDuplicate(b3) PossibleDuplicate(b4) PossibleDuplicate(b5)" {
		t.Fatalf("outcomes %s", got)
	}
}

// TestEpochExhaustion: a bump at epoch 32767 takes a new producer ID instead
// (InitProducerId), and nothing is assigned until it arrives; at 32766 the
// bump is still local.
func TestEpochExhaustion(t *testing.T) {
	h := newHarness(t, Config{}, ProducerID{ID: 7, Epoch: math.MaxInt16 - 1})
	r1, _ := h.assign(tp0, 1)
	d := h.s.Complete(r1, answered(kerr.UnknownProducerID.Code))
	if d.Bump == nil || d.Bump.NewProducerID || d.Bump.To != (ProducerID{7, math.MaxInt16}) {
		t.Fatalf("bump at 32766: %+v", d.Bump)
	}
	h.resend(tp0, r1, id(ProducerID{7, math.MaxInt16}, 0))
	d = h.s.Complete(r1, oosn)
	if d.Bump == nil || !d.Bump.NewProducerID || !d.NeedProducerID || d.Bump.From != (ProducerID{7, math.MaxInt16}) {
		t.Fatalf("bump at 32767: %+v", d)
	}
	if !h.s.AwaitingProducerID() {
		t.Fatal("not awaiting a producer ID")
	}
	if _, _, err := h.s.Assign(tp1, 1, time.Time{}); !errors.Is(err, ErrNoProducerID) {
		t.Fatalf("Assign while awaiting a producer ID: %v", err)
	}
	h.noResend(tp0)
	fresh := ProducerID{ID: 8, Epoch: 0}
	d, err := h.s.SetProducer(fresh)
	if err != nil {
		t.Fatal(err)
	}
	rs := outcomes[ResequencedNoLoss](d)
	if len(rs) != 1 || rs[0].To != id(fresh, 0) {
		t.Fatalf("after new ID: %+v", d.Outcomes)
	}
	if _, got := h.assign(tp1, 1); got != id(fresh, 0) {
		t.Fatalf("new partition under new ID: %v", got)
	}
	if h.s.Bumps() != 2 {
		t.Fatalf("%d bumps", h.s.Bumps())
	}
}

// TestBumpWhileOtherPartitionsInFlight is the KAFKA-12152 / Dekaf case: a
// bump caused by t[0] must not reset t[1] while t[1] has batches under the old
// epoch on the wire; idle t[2] restarts at 0 under the new epoch at once; the
// retries of t[1] keep their old identity; and a failure on t[1] that comes
// from the same incident joins the bump instead of causing a second one.
func TestBumpWhileOtherPartitionsInFlight(t *testing.T) {
	for _, sameCause := range []bool{false, true} {
		t.Run(fmt.Sprintf("sameCause=%v", sameCause), func(t *testing.T) {
			h := newHarness(t, Config{}, pid)
			bumped := ProducerID{pid.ID, pid.Epoch + 1}
			ra, _ := h.assign(tp0, 1)
			h.ok(ra, 0)
			rc, _ := h.assign(tp1, 1)
			h.ok(rc, 0)
			re, _ := h.assign(tp2, 1)
			h.ok(re, 0)
			a1, _ := h.assign(tp0, 1)
			c1, _ := h.assign(tp1, 1)
			c2, _ := h.assign(tp1, 1)

			d := h.s.Complete(a1, oosn)
			if d.Bump == nil || d.Bump.To != bumped {
				t.Fatalf("bump %+v", d.Bump)
			}
			if rs := outcomes[ResequencedNoLoss](d); len(rs) != 1 || rs[0].Batch != a1 || rs[0].To != id(bumped, 0) {
				t.Fatalf("t[0] rewrite %+v", d.Outcomes)
			}
			// Idle t[2]: new epoch, sequence 0, right away.
			if _, got := h.assign(tp2, 1); got != id(bumped, 0) {
				t.Fatalf("t[2] after bump: %v", got)
			}
			// Busy t[1]: no new batch until its old-epoch batches finish.
			if _, _, err := h.s.Assign(tp1, 1, time.Time{}); !errors.Is(err, ErrPartitionRecovering) {
				t.Fatalf("t[1] Assign during drain: %v", err)
			}
			if st := h.state(tp1); st.Owner != pid || !st.Recovering {
				t.Fatalf("t[1] state %+v", st)
			}
			var rest Decision
			if sameCause {
				// The leader of t[1] lost the same state: its next batch
				// is refused too. Reported, but no second bump.
				rest.Merge(h.s.Complete(c1, oosn))
				rest.Merge(h.s.Complete(c2, oosn))
				if len(outcomes[ProvenGap](rest)) != 1 || rest.Bump != nil || h.s.Bumps() != 1 {
					t.Fatalf("same cause: %+v", rest)
				}
				rs := outcomes[ResequencedNoLoss](rest)
				if len(rs) != 2 || rs[0].To != id(bumped, 0) || rs[1].To != id(bumped, 1) {
					t.Fatalf("t[1] rewrite %+v", rs)
				}
				h.resend(tp1, c1, id(bumped, 0))
				return
			}
			rest.Merge(h.s.Complete(c1, answered(kerr.NotLeaderForPartition.Code)))
			rest.Merge(h.s.Complete(c2, oosn))
			h.resend(tp1, c1, id(pid, 1)) // old identity: it may already be in the log
			rest.Merge(h.s.Complete(c1, okAt(1)))
			h.resend(tp1, c2, id(pid, 2))
			rest.Merge(h.s.Complete(c2, okAt(2)))
			if rest.Bump != nil || len(rest.Outcomes) != 0 || len(rest.Acks) != 2 || h.s.Bumps() != 1 {
				t.Fatalf("t[1] drain: %+v", rest)
			}
			if _, got := h.assign(tp1, 1); got != id(bumped, 0) {
				t.Fatalf("t[1] after drain: %v", got)
			}
		})
	}
}

// TestOneBumpForManyPartitions: three partitions refused for the same
// reason give one bump; each partition's gap is still reported.
func TestOneBumpForManyPartitions(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	tps := []TopicPartition{tp0, tp1, tp2}
	var in []BatchRef
	for _, tp := range tps {
		r, _ := h.assign(tp, 1)
		h.ok(r, 5)
		x, _ := h.assign(tp, 1)
		in = append(in, x)
	}
	var d Decision
	for _, r := range in {
		d.Merge(h.s.Complete(r, oosn))
	}
	if h.s.Bumps() != 1 || len(outcomes[ProvenGap](d)) != 3 || len(outcomes[ResequencedNoLoss](d)) != 3 {
		t.Fatalf("%d bumps, %+v", h.s.Bumps(), d.Outcomes)
	}
	if !reflect.DeepEqual(d.CheckAckedWrites, tps) {
		t.Fatalf("checks %v", d.CheckAckedWrites)
	}
}

func TestSplit(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, _ := h.assign(tp0, 5)
	r2, _ := h.assign(tp0, 1)
	d := h.s.Complete(r1, answered(kerr.MessageTooLarge.Code))
	if len(d.Split) != 1 || d.Split[0] != r1 || len(d.Outcomes) != 0 {
		t.Fatalf("decision %+v", d)
	}
	h.s.Complete(r2, oosn)
	if _, err := h.s.Split(r1, []int32{2, 2}); err == nil {
		t.Fatal("split losing a record accepted")
	}
	if _, err := h.s.Split(r2, []int32{1}); err == nil {
		t.Fatal("split of a batch not refused as too large accepted")
	}
	parts, err := h.s.Split(r1, []int32{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	h.resend(tp0, parts[0], id(pid, 1))
	h.ok(parts[0], 1)
	h.resend(tp0, parts[1], id(pid, 3))
	h.ok(parts[1], 3)
	h.resend(tp0, r2, id(pid, 6))
	h.ok(r2, 6)
	if h.s.Bumps() != 0 {
		t.Fatal("split bumped")
	}
	// A single record too large, or a batch that may already be in the
	// log, is not split: it fails.
	h2 := newHarness(t, Config{}, pid)
	r, _ := h2.assign(tp0, 1)
	if d := h2.s.Complete(r, answered(kerr.MessageTooLarge.Code)); len(outcomes[Failed](d)) != 1 || len(d.Split) != 0 {
		t.Fatalf("single record: %+v", d)
	}
	r, _ = h2.assign(tp0, 3)
	h2.s.Complete(r, ProduceResult{Delivery: NoResponse})
	h2.resend(tp0, r, id(pid, 0))
	if d := h2.s.Complete(r, answered(kerr.MessageTooLarge.Code)); len(outcomes[Failed](d)) != 1 || !outcomes[Failed](d)[0].MaybeWritten {
		t.Fatalf("maybe-written batch: %+v", d)
	}
}

// TestRefusedTailGivesSequencesBack: a batch refused for good at the tail of
// its partition gives its sequences back; no bump.
func TestRefusedTailGivesSequencesBack(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r0, _ := h.assign(tp0, 2)
	r1, _ := h.assign(tp0, 3)
	d := h.s.Complete(r1, answered(kerr.InvalidRecord.Code))
	f := outcomes[Failed](d)
	if len(f) != 1 || f[0].MaybeWritten || !errors.Is(f[0].Err, kerr.InvalidRecord) {
		t.Fatalf("failed %+v", d.Outcomes)
	}
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrPartitionRecovering) {
		t.Fatalf("Assign with a refused batch pending: %v", err)
	}
	h.ok(r0, 1)
	if _, got := h.assign(tp0, 1); got != id(pid, 3) || h.s.Bumps() != 0 {
		t.Fatalf("after give-back: %v, %d bumps", got, h.s.Bumps())
	}
}

// TestDeliveryTimeout covers a batch expiring while its request is on the
// wire: its late answer decides (acknowledged → AfterFailure ack, no bump;
// no answer → its sequences cannot be reused: bump, later batches rewritten).
func TestDeliveryTimeout(t *testing.T) {
	t0 := time.Unix(1000, 0)
	newCase := func(t *testing.T) (*harness, BatchRef, BatchRef) {
		h := newHarness(t, Config{}, pid)
		r0, _ := h.assign(tp0, 1)
		h.ok(r0, 0)
		b1 := h.assignDeadline(tp0, 1, t0.Add(time.Second))
		b2 := h.assignDeadline(tp0, 1, t0.Add(time.Hour))
		if d := h.s.Expire(t0); !d.Empty() {
			t.Fatalf("early expiry %+v", d)
		}
		d := h.s.Expire(t0.Add(2 * time.Second))
		f := outcomes[Failed](d)
		if len(f) != 1 || f[0].Batch != b1 || !f[0].MaybeWritten || !errors.Is(f[0].Err, ErrDeliveryTimeout) {
			t.Fatalf("expiry %+v", d.Outcomes)
		}
		if d := h.s.Expire(t0.Add(3 * time.Second)); !d.Empty() {
			t.Fatalf("expired twice: %+v", d)
		}
		return h, b1, b2
	}
	t.Run("late ack", func(t *testing.T) {
		h, b1, b2 := newCase(t)
		d := h.s.Complete(b1, okAt(1))
		if len(d.Acks) != 1 || !d.Acks[0].AfterFailure {
			t.Fatalf("late ack %+v", d)
		}
		h.ok(b2, 2)
		if h.s.Bumps() != 0 || h.state(tp0).LastAckedSequence != 2 {
			t.Fatalf("state %+v", h.state(tp0))
		}
	})
	t.Run("resolved by a later ack", func(t *testing.T) {
		h, b1, b2 := newCase(t)
		h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
		h.ok(b2, 2) // the leader accepted sequence 2, so it has sequence 1
		if h.s.Bumps() != 0 || h.state(tp0).LastAckedSequence != 2 || len(h.state(tp0).InFlight) != 0 {
			t.Fatalf("state %+v, %d bumps", h.state(tp0), h.s.Bumps())
		}
	})
	t.Run("unresolved", func(t *testing.T) {
		h, b1, b2 := newCase(t)
		names := map[BatchRef]string{b1: "b1", b2: "b2"}
		var d Decision
		d.Merge(h.s.Complete(b1, ProduceResult{Delivery: NoResponse}))
		d.Merge(h.s.Complete(b2, oosn)) // behind the unresolved b1
		if h.s.Bumps() != 1 || d.Bump == nil {
			t.Fatalf("no bump: %+v", d)
		}
		if got := kinds(d, names); got != "ResequencedNoLoss(b2)" {
			t.Fatalf("outcomes %s", got)
		}
	})
	t.Run("definitely unsent at the tail", func(t *testing.T) {
		h := newHarness(t, Config{}, pid)
		b1 := h.assignDeadline(tp0, 1, t0)
		h.s.Complete(b1, ProduceResult{Delivery: NotSent})
		d := h.s.Expire(t0)
		if f := outcomes[Failed](d); len(f) != 1 || f[0].MaybeWritten {
			t.Fatalf("expiry %+v", d.Outcomes)
		}
		if _, got := h.assign(tp0, 1); got != id(pid, 0) || h.s.Bumps() != 0 {
			t.Fatalf("sequence not given back: %v", got)
		}
	})
}

func TestFatalStopsEverything(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r1, _ := h.assign(tp0, 1)
	r2, _ := h.assign(tp1, 1)
	h.s.Complete(r2, answered(kerr.NotLeaderForPartition.Code)) // r2 waits for a resend
	d := h.s.Complete(r1, answered(kerr.ClusterAuthorizationFailed.Code))
	if !errors.Is(d.Fatal, kerr.ClusterAuthorizationFailed) || len(outcomes[Failed](d)) != 2 {
		t.Fatalf("fatal %+v", d)
	}
	if _, _, err := h.s.Assign(tp2, 1, time.Time{}); !errors.Is(err, ErrProducerFatal) || !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("Assign after fatal: %v", err)
	}
	h.noResend(tp1)
	if _, err := h.s.SetProducer(pid); err == nil {
		t.Fatal("SetProducer after fatal accepted")
	}
}

func TestCompleteIgnoresUnknownAndRepeatedAnswers(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r1, _ := h.assign(tp0, 1)
	if d := h.s.Complete(999, okAt(0)); !d.Empty() {
		t.Fatalf("unknown batch: %+v", d)
	}
	h.ok(r1, 0)
	if d := h.s.Complete(r1, okAt(0)); !d.Empty() {
		t.Fatalf("repeated answer: %+v", d)
	}
}

// TestAbandon: the I/O layer gives up on a batch (say it cannot encode it):
// Failed, and its sequences are given back at the tail or resolved by a bump.
func TestAbandon(t *testing.T) {
	errEncode := errors.New("cannot encode")
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, _ := h.assign(tp0, 1)
	h.s.Complete(r1, ProduceResult{Delivery: NotSent})
	d := h.s.Abandon(r1, errEncode)
	if f := outcomes[Failed](d); len(f) != 1 || f[0].MaybeWritten || !errors.Is(f[0].Err, errEncode) || d.Bump != nil {
		t.Fatalf("tail abandon %+v", d)
	}
	if _, got := h.assign(tp0, 1); got != id(pid, 1) {
		t.Fatalf("sequence not given back: %v", got)
	}
	if d := h.s.Abandon(r1, errEncode); !d.Empty() {
		t.Fatalf("second abandon %+v", d)
	}

	// Not at the tail, and on the wire: MaybeWritten, and once the
	// partition drains, a bump rewrites the batch behind it.
	h = newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, _ = h.assign(tp0, 1)
	r2, _ := h.assign(tp0, 1)
	d = h.s.Abandon(r1, errEncode)
	if f := outcomes[Failed](d); len(f) != 1 || !f[0].MaybeWritten {
		t.Fatalf("abandon on the wire %+v", d)
	}
	d = h.s.Complete(r1, ProduceResult{Delivery: NoResponse})
	d.Merge(h.s.Complete(r2, oosn))
	if d.Bump == nil || kinds(d, map[BatchRef]string{r2: "r2"}) != "ResequencedNoLoss(r2)" {
		t.Fatalf("after drain %+v", d)
	}

	// Transactional: the transaction must abort.
	ht := newHarness(t, Config{Transactional: true}, pid)
	r, _ := ht.assign(tp0, 1)
	if d := ht.s.Abandon(r, errEncode); d.Abortable == nil || !d.Abortable.BumpEpoch {
		t.Fatalf("transactional abandon %+v", d)
	}
}

// TestExpiredBatchProvenAppendedByEarlierAck: b1 timed out (no answer) and
// b2, behind it, was acknowledged first: the leader accepted b2's sequence
// only after b1's, so b1 is in the log. When b1's delivery deadline passes
// before its retry is answered, its sequences are not a gap: no bump, and
// b3 (maybe written) is resent under its own identity, never rewritten into
// a possible duplicate.
func TestExpiredBatchProvenAppendedByEarlierAck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	b1 := h.assignDeadline(tp0, 1, t0)
	b2 := h.assignDeadline(tp0, 1, t0.Add(time.Hour))
	b3 := h.assignDeadline(tp0, 1, t0.Add(time.Hour))
	h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
	if d := h.ok(b2, 2); len(d.Acks) != 1 {
		t.Fatalf("b2 %+v", d)
	}
	h.s.Complete(b3, ProduceResult{Delivery: NoResponse})
	d := h.s.Expire(t0)
	if f := outcomes[Failed](d); len(f) != 1 || f[0].Batch != b1 {
		t.Fatalf("expiry %+v", d.Outcomes)
	}
	if d.Bump != nil || h.s.Bumps() != 0 || len(outcomes[PossibleDuplicate](d)) != 0 {
		t.Fatalf("b1 was proven appended by b2's ack, yet: bump %+v, outcomes %+v", d.Bump, d.Outcomes)
	}
	h.resend(tp0, b3, id(pid, 3))
	h.ok(b3, 3)
	if st := h.state(tp0); st.LastAckedSequence != 3 || len(st.InFlight) != 0 {
		t.Fatalf("state %+v", st)
	}
}

// TestGapNamesLatestAcknowledgedWrite: b1 expired with no answer, b2 waits
// for its retry, b3 was acknowledged: b1 is resolved as appended (no bump,
// b2 resent unchanged). When b2's retry is then refused as next expected,
// the gap names b3, the latest write acknowledged, not b1, whose records
// were reported failed.
func TestGapNamesLatestAcknowledgedWrite(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	b1 := h.assignDeadline(tp0, 1, t0)
	b2 := h.assignDeadline(tp0, 2, t0.Add(time.Hour))
	b3 := h.assignDeadline(tp0, 1, t0.Add(time.Hour))
	h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
	h.s.Complete(b2, ProduceResult{Delivery: NoResponse})
	h.ok(b3, 4)
	if d := h.s.Expire(t0); d.Bump != nil || len(outcomes[Failed](d)) != 1 {
		t.Fatalf("expiry %+v", d)
	}
	h.resend(tp0, b2, id(pid, 2))
	d := h.s.Complete(b2, oosn)
	g := outcomes[ProvenGap](d)
	if len(g) != 1 || g[0].LastAckedSequence != 4 || g[0].LastAckedOffset != 4 || g[0].RejectedSequence != 2 {
		t.Fatalf("gap %+v", d.Outcomes)
	}
}

// TestNewIncarnationRestartsSequences: five batches on the wire to a topic
// incarnation that is then replaced. Their answers are about the deleted
// log: b1's out-of-order refusal is no gap and asks for no bump, b2 (no
// answer) may be in the deleted log, b3 was acknowledged there, b4's
// unknown producer needs no new identity, b5 met the deleted topic ID. Once
// they are in,
// the remaining batches are resequenced from 0 under the same identity, in
// order, and new batches follow them.
func TestNewIncarnationRestartsSequences(t *testing.T) {
	for _, txn := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", txn), func(t *testing.T) {
			h := newHarness(t, Config{Transactional: txn}, pid)
			r0, _ := h.assign(tp0, 1)
			h.ok(r0, 10)
			b := make([]BatchRef, 5)
			names := map[BatchRef]string{}
			for i := range b {
				b[i], _ = h.assign(tp0, 1)
				names[b[i]] = fmt.Sprintf("b%d", i+1)
			}
			var d Decision
			d.Merge(h.s.NewIncarnation(tp0))
			if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrPartitionRecovering) {
				t.Fatalf("Assign while the old incarnation's answers are due: %v", err)
			}
			h.noResend(tp0)
			d.Merge(h.s.Complete(b[0], oosn))
			d.Merge(h.s.Complete(b[1], ProduceResult{Delivery: NoResponse}))
			d.Merge(h.s.Complete(b[2], okAt(13)))
			d.Merge(h.s.Complete(b[3], answered(kerr.UnknownProducerID.Code)))
			d.Merge(h.s.Complete(b[4], answered(kerr.UnknownTopicID.Code)))
			if d.Bump != nil || h.s.Bumps() != 0 || d.Abortable != nil || len(d.CheckAckedWrites) != 0 || h.s.Producer() != pid {
				t.Fatalf("decision %+v", d)
			}
			if got := kinds(d, names); got != "ResequencedNoLoss(b1) PossibleDuplicate(b2) ResequencedNoLoss(b4) ResequencedNoLoss(b5)" {
				t.Fatalf("outcomes %s", got)
			}
			for _, o := range d.Outcomes {
				var c Cause
				switch o := o.(type) {
				case ResequencedNoLoss:
					c = o.Cause
				case PossibleDuplicate:
					c = o.Cause
				default:
					continue
				}
				if !errors.Is(c.Err, kepocherrors.ErrTopicIDChanged) {
					t.Fatalf("outcome %+v: cause %v", o, c)
				}
			}
			if len(d.Acks) != 1 || d.Acks[0].Batch != b[2] {
				t.Fatalf("acks %+v", d.Acks)
			}
			if h.s.NeedsBump() {
				t.Fatal("NeedsBump after a restart for a new incarnation")
			}
			for i, r := range []BatchRef{b[0], b[1], b[3], b[4]} {
				h.resend(tp0, r, id(pid, int32(i)))
				h.noResend(tp0) // nothing acknowledged in the new incarnation yet: one at a time
				h.ok(r, int64(i))
			}
			if _, got := h.assign(tp0, 1); got != id(pid, 4) {
				t.Fatalf("next batch %v", got)
			}
			if st := h.state(tp0); st.LastAckedOffset != 3 || st.LastAckedSequence != 3 {
				t.Fatalf("state %+v", st)
			}
		})
	}
}

// TestNewIncarnationIdle: with nothing in flight, the next batch simply
// starts at sequence 0 in the new incarnation.
func TestNewIncarnationIdle(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r0, _ := h.assign(tp0, 3)
	h.ok(r0, 10)
	if d := h.s.NewIncarnation(tp0); !d.Empty() {
		t.Fatalf("decision %+v", d)
	}
	if _, got := h.assign(tp0, 1); got != id(pid, 0) {
		t.Fatalf("first batch of the new incarnation %v", got)
	}
	if st := h.state(tp0); st.LastAckedOffset != -1 || st.LastAckedSequence != -1 {
		t.Fatalf("state %+v", st)
	}
}

// TestNewIncarnationDropsOldGaps: a batch refused for good by the deleted
// incarnation ahead of one still due leaves a sequence gap there, which
// would call for a bump; in the new incarnation it leaves none.
func TestNewIncarnationDropsOldGaps(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, _ := h.assign(tp0, 1)
	r2, _ := h.assign(tp0, 1)
	names := map[BatchRef]string{r1: "b1", r2: "b2"}
	var d Decision
	d.Merge(h.s.Complete(r1, answered(kerr.InvalidRecord.Code)))
	d.Merge(h.s.NewIncarnation(tp0))
	d.Merge(h.s.Complete(r2, ProduceResult{Delivery: NoResponse}))
	if got := kinds(d, names); got != "Failed(b1) PossibleDuplicate(b2)" || d.Bump != nil || h.s.Bumps() != 0 {
		t.Fatalf("outcomes %s, bump %+v", got, d.Bump)
	}
	h.resend(tp0, r2, id(pid, 0))
}

// TestNewIncarnationFailsBeforeResend: a batch whose attempt on the deleted
// incarnation went unanswered is resequenced from 0 for the new one
// (PossibleDuplicate, cause ErrTopicIDChanged), and then fails there before
// it is sent (Abandon, delivery timeout) or after a definite refusal from
// the new incarnation. The new log has never held it, so its sequences are
// given back like any refused batch's at the tail: no epoch bump, and the
// next batch takes sequence 0 under the same identity. With a batch behind
// it, a bump is still needed (that batch holds later sequences), and that
// batch's rewrite is ResequencedNoLoss: its only possibly written copy was
// in the deleted log, already reported, and its identity in the new
// incarnation was never sent.
func TestNewIncarnationFailsBeforeResend(t *testing.T) {
	t0 := time.Unix(1000, 0)
	errEncode := errors.New("cannot encode")
	for _, tc := range []struct {
		name string
		fail func(h *harness, b BatchRef) Decision
	}{
		{"abandoned before resend", func(h *harness, b BatchRef) Decision {
			return h.s.Abandon(b, errEncode)
		}},
		{"expired before resend", func(h *harness, b BatchRef) Decision {
			return h.s.Expire(t0)
		}},
		{"refused by the new incarnation", func(h *harness, b BatchRef) Decision {
			h.resend(tp0, b, id(pid, 0))
			return h.code(b, kerr.InvalidRecord.Code)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{}, pid)
			h.warm(tp0, 1)
			b1 := h.assignDeadline(tp0, 2, t0)
			h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
			d := h.s.NewIncarnation(tp0)
			pd := outcomes[PossibleDuplicate](d)
			if len(pd) != 1 || pd[0].Batch != b1 || pd[0].To != id(pid, 0) || !errors.Is(pd[0].Cause.Err, kepocherrors.ErrTopicIDChanged) {
				t.Fatalf("recreation %+v", d)
			}
			d = tc.fail(h, b1)
			if f := outcomes[Failed](d); len(f) != 1 || f[0].Batch != b1 || !f[0].MaybeWritten {
				t.Fatalf("failure %+v", d)
			}
			if d.Bump != nil || h.s.Bumps() != 0 || h.s.NeedsBump() || len(d.Outcomes) != 1 {
				t.Fatalf("needless bump or outcome: %+v, %d bumps", d, h.s.Bumps())
			}
			if _, got := h.assign(tp0, 1); got != id(pid, 0) {
				t.Fatalf("next batch %v", got)
			}
		})
	}

	t.Run("batch behind it", func(t *testing.T) {
		h := newHarness(t, Config{}, pid)
		h.warm(tp0, 1)
		b1 := h.assignDeadline(tp0, 2, t0)
		b2 := h.assignDeadline(tp0, 1, t0.Add(time.Hour))
		names := map[BatchRef]string{b1: "b1", b2: "b2"}
		h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
		h.s.Complete(b2, ProduceResult{Delivery: NoResponse})
		if got := kinds(h.s.NewIncarnation(tp0), names); got != "PossibleDuplicate(b1) PossibleDuplicate(b2)" {
			t.Fatalf("recreation %s", got)
		}
		d := h.s.Expire(t0)
		if got := kinds(d, names); got != "Failed(b1) ResequencedNoLoss(b2)" || d.Bump == nil {
			t.Fatalf("after expiry: %s, bump %+v", got, d.Bump)
		}
		h.resend(tp0, b2, id(ProducerID{ID: pid.ID, Epoch: pid.Epoch + 1}, 0))
	})

	// Recreated again after a definite refusal from the second
	// incarnation: the possible copy in the first was reported with the
	// first recreation; the second never held the batch.
	t.Run("recreated again", func(t *testing.T) {
		h := newHarness(t, Config{}, pid)
		h.warm(tp0, 1)
		b1 := h.assignDeadline(tp0, 2, t0)
		names := map[BatchRef]string{b1: "b1"}
		h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
		if got := kinds(h.s.NewIncarnation(tp0), names); got != "PossibleDuplicate(b1)" {
			t.Fatalf("first recreation %s", got)
		}
		h.resend(tp0, b1, id(pid, 0))
		h.code(b1, kerr.NotEnoughReplicas.Code)
		d := h.s.NewIncarnation(tp0)
		if got := kinds(d, names); got != "ResequencedNoLoss(b1)" || d.Bump != nil {
			t.Fatalf("second recreation %s, bump %+v", got, d.Bump)
		}
		h.resend(tp0, b1, id(pid, 0))
	})

	// Answers that name the topic only (Produce below v13): a request
	// that named the deleted incarnation by name may have been appended
	// to the new one, so the batch's failure bumps the epoch as it did
	// before the new incarnation (its sequences are not given back).
	t.Run("topic named only", func(t *testing.T) {
		h := newHarness(t, Config{}, pid)
		h.byName = true
		h.warm(tp0, 1)
		b1 := h.assignDeadline(tp0, 2, t0)
		h.s.Complete(b1, ProduceResult{Delivery: NoResponse})
		h.s.NewIncarnation(tp0)
		d := h.s.Abandon(b1, errEncode)
		if f := outcomes[Failed](d); len(f) != 1 || !f[0].MaybeWritten || d.Bump == nil {
			t.Fatalf("failure %+v; want Failed(MaybeWritten) and a bump", d)
		}
	})
}

// TestOutOfOrderAnsweredAfterLaterAckIsNoGap: b1 is refused before the
// append (NOT_ENOUGH_REPLICAS) and b2, pipelined behind it, is refused out
// of order by the same leader; the leader moves, and b1's retry is
// acknowledged by the new one before the old leader's answer to b2
// arrives (b2's request waited behind another partition's). b2 is now the
// partition's next batch, but its refusal answered an attempt sent before
// b1's acknowledged one: it proves no gap. b2 is resent unchanged, with no
// outcome and no bump.
func TestOutOfOrderAnsweredAfterLaterAckIsNoGap(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r0, _ := h.assign(tp0, 1)
	h.ok(r0, 10)
	b1, _ := h.assign(tp0, 1)
	b2, _ := h.assign(tp0, 1)
	var d Decision
	d.Merge(h.code(b1, kerr.NotEnoughReplicas.Code))
	h.s.LeaderChanged(tp0)
	h.resend(tp0, b1, id(pid, 1))
	d.Merge(h.ok(b1, 11))
	d.Merge(h.s.Complete(b2, oosn))
	if d.Bump != nil || len(d.Outcomes) != 0 || len(d.CheckAckedWrites) != 0 || h.s.Bumps() != 0 {
		t.Fatalf("decision %+v (%d bumps)", d, h.s.Bumps())
	}
	h.resend(tp0, b2, id(pid, 2))
	h.ok(b2, 12)
	if st := h.state(tp0); st.Owner != pid || st.LastAckedSequence != 2 || len(st.InFlight) != 0 {
		t.Fatalf("state %+v", st)
	}
	// An out-of-order refusal of an attempt sent after the acknowledged
	// one is still a gap.
	b3, _ := h.assign(tp0, 1)
	if d := h.s.Complete(b3, oosn); len(outcomes[ProvenGap](d)) != 1 {
		t.Fatalf("refusal after the acknowledgement: %+v", d.Outcomes)
	}
}

// TestUnknownProducerAnsweredAfterLaterAckIsNoGap: as with an out-of-order
// refusal, UNKNOWN_PRODUCER_ID answering an attempt sent before the
// acknowledged retry of the batch before it says nothing of the leader
// that acknowledged that retry, which holds the producer's state: b2 is
// resent unchanged, with no outcome and no bump.
func TestUnknownProducerAnsweredAfterLaterAckIsNoGap(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r0, _ := h.assign(tp0, 1)
	h.ok(r0, 10)
	b1, _ := h.assign(tp0, 1)
	b2, _ := h.assign(tp0, 1)
	var d Decision
	d.Merge(h.code(b1, kerr.NotEnoughReplicas.Code))
	h.s.LeaderChanged(tp0)
	h.resend(tp0, b1, id(pid, 1))
	d.Merge(h.ok(b1, 11))
	d.Merge(h.s.Complete(b2, ProduceResult{Code: kerr.UnknownProducerID.Code, BaseOffset: -1, LogStartOffset: 0, ByTopicID: true}))
	if d.Bump != nil || len(d.Outcomes) != 0 || len(d.CheckAckedWrites) != 0 || h.s.Bumps() != 0 {
		t.Fatalf("decision %+v (%d bumps)", d, h.s.Bumps())
	}
	h.resend(tp0, b2, id(pid, 2))
	h.ok(b2, 12)
	// Answering an attempt sent after the acknowledged one, it is judged
	// as always.
	b3, _ := h.assign(tp0, 1)
	if d := h.s.Complete(b3, ProduceResult{Code: kerr.UnknownProducerID.Code, BaseOffset: -1, LogStartOffset: 0, ByTopicID: true}); len(outcomes[PossibleGap](d)) != 1 {
		t.Fatalf("refusal after the acknowledgement: %+v", d.Outcomes)
	}
}
