package producer

import (
	"errors"
	"testing"
)

// Forget drops partitions' sequence state all together, and only when
// nothing of any of them is in flight; a forgotten partition used again
// without Revive starts again at sequence 0.
func TestSequencerForget(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 2)
	ref, _ := h.assign(tp1, 3)
	if h.s.Forget(topicA, tp0, tp1) {
		t.Fatal("forgot partitions while one has a batch in flight")
	}
	if _, ok := h.s.Partition(tp0); !ok {
		t.Fatal("a refused Forget dropped a partition")
	}
	h.ok(ref, 0)
	if !h.s.Forget(topicA, tp0, tp1, tp2) {
		t.Fatal("Forget refused partitions with nothing in flight")
	}
	for _, tp := range []TopicPartition{tp0, tp1} {
		if _, ok := h.s.Partition(tp); ok {
			t.Fatalf("%v still has state", tp)
		}
	}
	if len(h.s.order) != 0 {
		t.Fatalf("%d partitions left in the creation order", len(h.s.order))
	}
	if _, got := h.assign(tp0, 1); got != id(pid, 0) {
		t.Fatalf("forgotten partition's next batch %v, want sequence 0", got)
	}
}

var (
	topicA = [16]byte{0xa}
	topicB = [16]byte{0xb}
)

// A partition forgotten and revived under the same topic ID continues its
// sequences (the topic was not gone: sequence 0 would be refused as out of
// order, a false gap); under another ID (recreated) it starts at 0.
func TestSequencerRevive(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 2)
	h.warm(tp1, 2)
	before, _ := h.s.Partition(tp0)
	if !h.s.Forget(topicA, tp0, tp1) {
		t.Fatal("Forget refused idle partitions")
	}
	h.s.Revive(tp0, topicA)
	h.s.Revive(tp1, topicB)
	after, ok := h.s.Partition(tp0)
	if !ok || after.NextSequence != before.NextSequence || after.LastAckedSequence != before.LastAckedSequence ||
		after.LastAckedOffset != before.LastAckedOffset || after.Owner != before.Owner {
		t.Fatalf("revived under the same ID: %+v, want the state it was forgotten with %+v", after, before)
	}
	if _, got := h.assign(tp0, 1); got != id(pid, before.NextSequence) {
		t.Fatalf("revived partition's next batch %v, want sequence %d", got, before.NextSequence)
	}
	if _, got := h.assign(tp1, 1); got != id(pid, 0) {
		t.Fatalf("partition revived under a new topic ID: next batch %v, want sequence 0", got)
	}
	// Revived once: a second Revive finds nothing to restore.
	h.s.Revive(tp0, topicA)
	if len(h.s.forgot) != 0 {
		t.Fatalf("%d forgotten partitions left", len(h.s.forgot))
	}
}

// The forgotten sequences are bounded: beyond the bound the oldest go.
func TestSequencerForgottenBounded(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.s.maxForgotten = 3
	for i := range int32(10) {
		tp := TopicPartition{Topic: "t", Partition: i}
		h.warm(tp, 1)
		if !h.s.Forget(topicA, tp) {
			t.Fatal("Forget refused an idle partition")
		}
	}
	if len(h.s.forgot) != 3 || len(h.s.forgotOrder) > 3+2*3+64 {
		t.Fatalf("%d forgotten, order %d; want 3", len(h.s.forgot), len(h.s.forgotOrder))
	}
	for i := range int32(7) {
		if _, ok := h.s.forgot[TopicPartition{Topic: "t", Partition: i}]; ok {
			t.Fatalf("partition %d (among the oldest) still remembered", i)
		}
	}
	newest := TopicPartition{Topic: "t", Partition: 9}
	h.s.Revive(newest, topicA)
	if st, ok := h.s.Partition(newest); !ok || st.NextSequence == 0 {
		t.Fatalf("newest forgotten partition not revived: %+v", st)
	}
}

// A refused batch holding sequences keeps its partition: forgotten, the
// pending rewrite (and bump) would be lost.
func TestSequencerForgetKeepsPendingRewrite(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 2)
	ref, _ := h.assign(tp0, 1)
	h.s.Abandon(ref, errors.New("cannot encode"))
	if h.s.Forget(topicA, tp0) {
		t.Fatal("forgot a partition that needs a bump")
	}
}

// The default partitioner drops a topic's sticky choice when the producer
// drops the topic.
func TestPartitionerForgetTopic(t *testing.T) {
	p := DefaultPartitioner().(*stickyKeyPartitioner)
	r := &Record{Topic: "a"}
	p.Partition(r, 3)
	p.Partition(&Record{Topic: "b"}, 3)
	p.forgetTopic("a")
	if _, ok := p.sticky["a"]; ok || len(p.sticky) != 1 {
		t.Fatalf("sticky after forgetting a: %v", p.sticky)
	}
}
