package producer_test

import (
	stderrors "errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A producer writing to many short-lived topics keeps nothing of a deleted
// one once metadata confirmed its removal and its records are reported:
// no partition state, sequences, ledger, partitioner entry or watch (so the
// shared refresher keeps only a tombstone of it). Producing to a topic of
// the same name created again works, from sequence 0, with no bump.
func TestDeletedTopicsStateDropped(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 30*time.Second)
	const n = 20
	name := func(i int) string { return fmt.Sprintf("short-lived-%d", i) }
	for i := range n {
		adminTopic(t, c, name(i), true)
	}
	for i := range n {
		if _, err := p.ProduceSync(ctx, &producer.Record{Topic: name(i), Value: []byte("a")}, &producer.Record{Topic: name(i), Key: []byte("k"), Value: []byte("b")}); err != nil {
			t.Fatalf("produce to %s: %v", name(i), err)
		}
	}
	if got := producer.TopicStateSizes(p); got["parts"] != n || got["watching"] != n || got["sequencer"] != n {
		t.Fatalf("after producing to %d topics: %v", n, got)
	}
	for i := range n {
		adminTopic(t, c, name(i), false)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sizes, left := producer.TopicStateSizes(p), false
		for _, v := range sizes {
			left = left || v != 0
		}
		if !left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after deleting the %d topics the producer keeps %v", n, sizes)
		}
	}

	adminTopic(t, c, name(0), true)
	res, err := p.ProduceSync(ctx, &producer.Record{Topic: name(0), Value: []byte("again")})
	if err != nil {
		t.Fatalf("produce to %s created again: %v", name(0), err)
	}
	if res[0].Offset != 0 {
		t.Fatalf("record to the recreated topic at offset %d, want 0", res[0].Offset)
	}
	if got := producer.TopicStateSizes(p); got["parts"] != 1 || got["watching"] != 1 {
		t.Fatalf("after producing to the recreated topic: %v", got)
	}
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	if os := rec.Outcomes(); len(os) != 0 {
		t.Fatalf("outcomes %s", kinds(os))
	}
	wantNoLost(t, rec)
}

// A topic metadata wrongly calls removed (answers naming it unknown, long
// enough for the producer to drop it) that comes back under the same topic
// ID continues its sequences: starting again at sequence 0 would be
// refused as out of order and reported as a possible gap, with a bump.
func TestGoneTopicBackUnderSameIDContinuesSequences(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 30*time.Second)
	const topic = "comes-back"
	adminTopic(t, c, topic, true)
	for i := range 3 {
		if _, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}

	// An answer calling a topic unknown, renamed to ours.
	cl := oracle(t, c)
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("never-created")
	req.Topics = append(req.Topics, rt)
	unknown, err := req.RequestWith(ctx, cl)
	cl.Close()
	if err != nil || len(unknown.Topics) != 1 || unknown.Topics[0].ErrorCode == 0 {
		t.Fatalf("metadata for a missing topic: %+v, %v", unknown, err)
	}
	unknown.Topics[0].Topic = kmsg.StringPtr(topic)
	var hide atomic.Bool
	hide.Store(true)
	c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !hide.Load() {
			return nil, nil, false
		}
		resp := *unknown
		resp.Version = kr.GetVersion()
		return &resp, nil, true
	})
	for deadline := time.Now().Add(20 * time.Second); producer.TopicStateSizes(p)["parts"] != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the producer never dropped the topic metadata calls unknown: %v", producer.TopicStateSizes(p))
		}
	}
	hide.Store(false)

	res, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("back")})
	if err != nil {
		t.Fatalf("produce after the topic came back: %v", err)
	}
	if res[0].Offset != 3 {
		t.Fatalf("record after the topic came back at offset %d, want 3", res[0].Offset)
	}
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	if os := rec.Outcomes(); len(os) != 0 {
		t.Fatalf("outcomes %s", kinds(os))
	}
	wantNoLost(t, rec)
}

// In a transaction, a record acknowledged by a topic that is then deleted
// went with the deleted log, so the transaction cannot commit it, also
// when the producer dropped the deleted topic's state before the topic was
// created again and produced to in the same transaction (dropped, the
// partition's state no longer named the old incarnation, and the new one
// was taken for a first sighting: the transaction committed without the
// record).
func TestDroppedTopicRecreatedInTransactionAborts(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-dropped-recreated", producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 30*time.Second)
	const name = "dropped-in-txn"
	adminTopic(t, c, name, true)

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ProduceSync(ctx, &producer.Record{Topic: name, Value: []byte("a")}); err != nil {
		t.Fatalf("produce a: %v", err)
	}
	adminTopic(t, c, name, false)
	// Metadata confirms the removal: the producer's metadata loop marks the
	// topic gone, and in the same step drops its state or keeps it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if sizes := producer.TopicStateSizes(p); sizes["gone"] != 0 || sizes["parts"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the producer never saw the topic gone: %v", producer.TopicStateSizes(p))
		}
	}
	adminTopic(t, c, name, true)
	// A record for the new incarnation: refused at once if the producer
	// already learned of the recreation, else failed by the abort.
	done := make(chan producer.Result, 1)
	err := p.Produce(ctx, &producer.Record{Topic: name, Value: []byte("b")}, func(r producer.Result) { done <- r })
	if err != nil {
		if !stderrors.Is(err, producer.ErrAbortRequired) || !stderrors.Is(err, errors.ErrTopicIDChanged) {
			t.Fatalf("produce b: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
		}
		close(done)
	}
	if err := p.CommitTransaction(ctx); !stderrors.Is(err, producer.ErrAbortRequired) || !stderrors.Is(err, errors.ErrTopicIDChanged) {
		t.Fatalf("CommitTransaction: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	if r, ok := <-done; ok && r.Err == nil {
		t.Fatalf("record b of the aborted transaction acknowledged at offset %d", r.Offset)
	}
}

// A Produce to a topic the producer holds nothing of that metadata does
// not know (deleted, and its state dropped; or never created) fails at
// MetadataWait and leaves no watch behind: watched until Close, each such
// topic was asked about by every refresh and never became a tombstone.
func TestProduceToMissingTopicLeavesNoWatch(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.MetadataWait(300*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	for i := range 3 {
		err := p.Produce(ctx, &producer.Record{Topic: fmt.Sprintf("missing-%d", i), Value: []byte("v")}, nil)
		if !stderrors.Is(err, errors.ErrMetadataTimeout) {
			t.Fatalf("produce to a missing topic: %v; want ErrMetadataTimeout", err)
		}
	}
	if got := producer.TopicStateSizes(p); got["watching"] != 0 || got["watched"] != 0 || got["parts"] != 0 {
		t.Fatalf("after produces to missing topics failed: %v", got)
	}
}
