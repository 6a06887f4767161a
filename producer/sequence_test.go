package producer

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

var (
	tp0 = TopicPartition{"t", 0}
	tp1 = TopicPartition{"t", 1}
	tp2 = TopicPartition{"t", 2}
	pid = ProducerID{ID: 1000, Epoch: 5}
)

// harness wraps a Sequencer with fail-fast helpers.
type harness struct {
	t *testing.T
	s *Sequencer
	// byName: answers name the topic, not its ID (Produce below v13);
	// by default they name its ID, as Kafka 4.1 and later answer.
	byName bool
}

func newHarness(t *testing.T, cfg Config, id ProducerID) *harness {
	t.Helper()
	s, err := NewSequencer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !id.Valid() {
		return &harness{t: t, s: s}
	}
	if _, err := s.SetProducer(id); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, s: s}
}

func (h *harness) assign(tp TopicPartition, n int32) (BatchRef, BatchIdentity) {
	h.t.Helper()
	ref, id, err := h.s.Assign(tp, n, time.Time{})
	if err != nil {
		h.t.Fatalf("Assign(%v, %d): %v", tp, n, err)
	}
	return ref, id
}

// warm acknowledges one batch of n records on tp at offset 0, so that tp
// pipelines (a partition sends alone until its first acknowledgement).
func (h *harness) warm(tp TopicPartition, n int32) {
	h.t.Helper()
	ref, _ := h.assign(tp, n)
	if d := h.ok(ref, 0); len(d.Acks) != 1 {
		h.t.Fatalf("warm-up not acknowledged: %+v", d)
	}
}

func (h *harness) assignDeadline(tp TopicPartition, n int32, dl time.Time) BatchRef {
	h.t.Helper()
	ref, _, err := h.s.Assign(tp, n, dl)
	if err != nil {
		h.t.Fatalf("Assign(%v, %d): %v", tp, n, err)
	}
	return ref
}

func (h *harness) ok(ref BatchRef, offset int64) Decision {
	h.t.Helper()
	return h.s.Complete(ref, ProduceResult{BaseOffset: offset, LogStartOffset: 0, ByTopicID: !h.byName})
}

func (h *harness) code(ref BatchRef, code int16) Decision {
	h.t.Helper()
	return h.s.Complete(ref, ProduceResult{Code: code, BaseOffset: -1, LogStartOffset: -1, ByTopicID: !h.byName})
}

// resend sends tp's next retry and checks it is ref with identity want.
func (h *harness) resend(tp TopicPartition, ref BatchRef, want BatchIdentity) {
	h.t.Helper()
	got, id, ok := h.s.NextResend(tp)
	if !ok || got != ref || id != want {
		h.t.Fatalf("NextResend(%v) = %d %v %v, want %d %v", tp, got, id, ok, ref, want)
	}
	if err := h.s.Sent(ref); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) noResend(tp TopicPartition) {
	h.t.Helper()
	if ref, id, ok := h.s.NextResend(tp); ok {
		h.t.Fatalf("NextResend(%v) = %d %v, want none", tp, ref, id)
	}
}

func (h *harness) state(tp TopicPartition) PartitionState {
	h.t.Helper()
	st, ok := h.s.Partition(tp)
	if !ok {
		h.t.Fatalf("no state for %v", tp)
	}
	return st
}

func id(p ProducerID, seq int32) BatchIdentity { return BatchIdentity{Producer: p, BaseSequence: seq} }

func TestNextSequenceWraps(t *testing.T) {
	cases := []struct{ seq, n, want int32 }{
		{0, 1, 1},
		{10, 5, 15},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 1, 3, 1},
		{math.MaxInt32 - 4, 5, 0},
	}
	for _, c := range cases {
		if got := NextSequence(c.seq, c.n); got != c.want {
			t.Errorf("NextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
	if got := LastSequence(math.MaxInt32, 2); got != 0 {
		t.Errorf("LastSequence(MaxInt32, 2) = %d, want 0", got)
	}
}

func TestNewSequencerRejectsMoreThanFiveInFlight(t *testing.T) {
	if _, err := NewSequencer(Config{MaxInFlight: 6}); err == nil {
		t.Fatal("MaxInFlight 6 accepted")
	}
	s, err := NewSequencer(Config{})
	if err != nil || s.cfg.MaxInFlight != MaxInFlightPerPartition {
		t.Fatalf("default MaxInFlight: %v %v", s, err)
	}
}

func TestAssignSequencesPerPartition(t *testing.T) {
	h := newHarness(t, Config{}, NoProducerID)
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrNoProducerID) {
		t.Fatalf("Assign before SetProducer: %v", err)
	}
	if _, err := h.s.SetProducer(pid); err != nil {
		t.Fatal(err)
	}
	ra, a := h.assign(tp0, 3)
	_, c := h.assign(tp1, 4)
	h.ok(ra, 0)
	_, b := h.assign(tp0, 2)
	_, b2 := h.assign(tp0, 1)
	if a != id(pid, 0) || b != id(pid, 3) || b2 != id(pid, 5) || c != id(pid, 0) {
		t.Fatalf("identities %v %v %v %v", a, b, b2, c)
	}
	if st := h.state(tp0); st.NextSequence != 6 || st.LastAckedSequence != 2 || len(st.InFlight) != 2 {
		t.Fatalf("state %+v", st)
	}
	if _, _, err := h.s.Assign(tp0, 0, time.Time{}); err == nil {
		t.Fatal("empty batch accepted")
	}
}

func TestInFlightLimit(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	refs := make([]BatchRef, 5)
	for i := range refs {
		refs[i], _ = h.assign(tp0, 1)
	}
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("6th batch: %v", err)
	}
	h.ok(refs[0], 100)
	if _, got := h.assign(tp0, 1); got != id(pid, 6) {
		t.Fatalf("after an ack: %v", got)
	}
	h2 := newHarness(t, Config{MaxInFlight: 1}, pid)
	h2.warm(tp0, 1)
	h2.assign(tp0, 1)
	if _, _, err := h2.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("MaxInFlight 1: %v", err)
	}
}

// TestSequenceWrapAcrossAcks: a partition whose sequences reach MaxInt32
// continues at 0, and the leader's "next" check follows the wrap.
func TestSequenceWrapAcrossAcks(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.assign(tp0, 1) // create the partition
	p := h.s.parts[tp0]
	h.s.Complete(p.inflight[0].ref, ProduceResult{BaseOffset: 0})
	p.nextSeq, p.lastAckedSeq = math.MaxInt32-1, math.MaxInt32-2
	ref, got := h.assign(tp0, 3)
	if got != id(pid, math.MaxInt32-1) {
		t.Fatalf("base %v", got)
	}
	if st := h.state(tp0); st.NextSequence != 1 {
		t.Fatalf("next after wrap %d", st.NextSequence)
	}
	h.ok(ref, 10)
	if st := h.state(tp0); st.LastAckedSequence != 0 {
		t.Fatalf("last acked after wrap %d", st.LastAckedSequence)
	}
	ref2, got2 := h.assign(tp0, 1)
	if got2 != id(pid, 1) || !p.isNext(h.s.batches[ref2]) {
		t.Fatalf("batch after wrap %v is not next", got2)
	}
}

// TestOutOfOrderAcks: an acknowledgement of a later batch does not advance
// the last acknowledged sequence past an unacknowledged earlier batch.
func TestOutOfOrderAcks(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, _ := h.assign(tp0, 2)
	r2, _ := h.assign(tp0, 3)
	d := h.ok(r2, 12)
	if len(d.Acks) != 1 || d.Acks[0].Batch != r2 {
		t.Fatalf("acks %+v", d.Acks)
	}
	if st := h.state(tp0); st.LastAckedSequence != 0 || st.LastAckedOffset != 14 || len(st.InFlight) != 1 {
		t.Fatalf("state %+v", st)
	}
	h.ok(r1, 10)
	if st := h.state(tp0); st.LastAckedSequence != 5 || len(st.InFlight) != 0 {
		t.Fatalf("state %+v", st)
	}
}

func TestSentOnlyForTheNextResend(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	r1, i1 := h.assign(tp0, 1)
	r2, _ := h.assign(tp0, 1)
	if err := h.s.Sent(r1); err == nil {
		t.Fatal("Sent on an outstanding batch accepted")
	}
	h.code(r1, 6) // NOT_LEADER_OR_FOLLOWER
	h.code(r2, 6)
	if err := h.s.Sent(r2); err == nil {
		t.Fatal("Sent on a batch behind the head accepted")
	}
	h.resend(tp0, r1, i1)
	h.noResend(tp0) // r2 waits until r1 is acknowledged
	h.ok(r1, 0)
	if ref, _, ok := h.s.NextResend(tp0); !ok || ref != r2 {
		t.Fatalf("NextResend after head ack: %d %v", ref, ok)
	}
}

// TestFirstBatchAlone: a partition sends one batch at a time until the
// leader acknowledges one under the current identity: a leader without state
// for the producer accepts any sequence, so a second pipelined batch could be
// appended before a first one that was lost or refused (KAFKA-15591).
func TestFirstBatchAlone(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	r1, _ := h.assign(tp0, 1)
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("second batch before the first ack: %v", err)
	}
	h.code(r1, 6) // NOT_LEADER: still no ack
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrPartitionRecovering) {
		t.Fatalf("new batch with a retry pending: %v", err)
	}
	h.resend(tp0, r1, id(pid, 0))
	h.ok(r1, 0)
	h.assign(tp0, 1)
	h.assign(tp0, 1) // pipelining once acknowledged
	// After a bump the partition starts over under the new identity.
	h2 := newHarness(t, Config{}, pid)
	h2.warm(tp0, 1)
	x, _ := h2.assign(tp0, 1)
	h2.s.Complete(x, oosn)
	h2.resend(tp0, x, id(ProducerID{pid.ID, pid.Epoch + 1}, 0))
	if _, _, err := h2.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("second batch after a bump before the first ack: %v", err)
	}
}

// TestSoloAfterLeaderChange: after a leader change the partition sends one
// batch at a time until the new leader acknowledges one.
func TestSoloAfterLeaderChange(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 1)
	h.assign(tp0, 1)
	h.s.LeaderChanged(tp0)
	if _, _, err := h.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("pipelining to a new leader before its first ack: %v", err)
	}
	h.warm(tp1, 1)
	h.assign(tp1, 1) // other partitions are not affected
	h.assign(tp1, 1)

	// A late acknowledgement from the former leader does not end it;
	// one from the new leader does.
	h2 := newHarness(t, Config{}, pid)
	h2.warm(tp0, 1)
	old, _ := h2.assign(tp0, 1)
	h2.s.LeaderChanged(tp0)
	h2.ok(old, 1)
	r, _ := h2.assign(tp0, 1)
	if _, _, err := h2.s.Assign(tp0, 1, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("pipelining after a former leader's ack: %v", err)
	}
	h2.ok(r, 2)
	h2.assign(tp0, 1)
	h2.assign(tp0, 1)
}

// TestSoloAfterIdle: after SoloAfterIdle without a new batch, the next batch
// goes alone until acknowledged (the leader may have expired the producer's
// state, KIP-854).
func TestSoloAfterIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		idle    time.Duration
		setting time.Duration
		solo    bool
	}{{time.Second, 0, false}, {2 * time.Minute, 0, true}, {2 * time.Minute, -1, false}, {10 * time.Second, 5 * time.Second, true}} {
		h := newHarness(t, Config{SoloAfterIdle: c.setting}, pid)
		r, _, err := h.s.AssignAt(tp0, 1, t0, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		h.ok(r, 0)
		now := t0.Add(c.idle)
		r, _, err = h.s.AssignAt(tp0, 1, now, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = h.s.AssignAt(tp0, 1, now, time.Time{})
		if c.solo != errors.Is(err, ErrInFlightLimit) {
			t.Fatalf("%+v: second batch after idling: %v", c, err)
		}
		h.ok(r, 1)
		if _, _, err := h.s.AssignAt(tp0, 1, now, time.Time{}); err != nil {
			t.Fatalf("%+v: after the ack: %v", c, err)
		}
	}
}

// TestSoloAfterIdleCountsFromLastAppend: the leader expires a producer's
// state when it has appended nothing of it for producer.id.expiration.ms,
// so a batch that was refused (given back, never appended) does not restart
// the idle clock: pipelining after it could let a stateless leader append a
// later batch before a lost earlier one (KAFKA-15591). Found by
// TestModelRandomized, seed 102966.
func TestSoloAfterIdleCountsFromLastAppend(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := newHarness(t, Config{SoloAfterIdle: time.Minute}, pid)
	r, _, err := h.s.AssignAt(tp0, 1, t0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	h.ok(r, 0)
	r, _, err = h.s.AssignAt(tp0, 1, t0.Add(50*time.Second), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if f := outcomes[Failed](h.code(r, kerr.InvalidRecord.Code)); len(f) != 1 || f[0].MaybeWritten {
		t.Fatalf("refusal %+v", f)
	}
	now := t0.Add(70 * time.Second) // 70s since the last append, 20s since the refused batch
	r1, got, err := h.s.AssignAt(tp0, 1, now, time.Time{})
	if err != nil || got != id(pid, 1) {
		t.Fatalf("first batch after idling: %v %v", got, err)
	}
	if _, _, err := h.s.AssignAt(tp0, 1, now, time.Time{}); !errors.Is(err, ErrInFlightLimit) {
		t.Fatalf("second batch pipelined after a minute without an append: %v", err)
	}
	h.ok(r1, 1)
	if _, _, err := h.s.AssignAt(tp0, 1, now, time.Time{}); err != nil {
		t.Fatalf("after the ack: %v", err)
	}
}
