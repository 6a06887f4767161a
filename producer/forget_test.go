package producer

import (
	"errors"
	"testing"
)

// Forget drops partitions' sequence state all together, and only when
// nothing of any of them is in flight; a forgotten partition starts again
// at sequence 0.
func TestSequencerForget(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 2)
	ref, _ := h.assign(tp1, 3)
	if h.s.Forget(tp0, tp1) {
		t.Fatal("forgot partitions while one has a batch in flight")
	}
	if _, ok := h.s.Partition(tp0); !ok {
		t.Fatal("a refused Forget dropped a partition")
	}
	h.ok(ref, 0)
	if !h.s.Forget(tp0, tp1, tp2) {
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

// A refused batch holding sequences keeps its partition: forgotten, the
// pending rewrite (and bump) would be lost.
func TestSequencerForgetKeepsPendingRewrite(t *testing.T) {
	h := newHarness(t, Config{}, pid)
	h.warm(tp0, 2)
	ref, _ := h.assign(tp0, 1)
	h.s.Abandon(ref, errors.New("cannot encode"))
	if h.s.Forget(tp0) {
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
