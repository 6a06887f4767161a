package producer_test

// A Produce answer is about the topic incarnation its request named: when
// the topic is deleted and created again while the request is on the wire,
// and the producer's metadata learns of it before the answer is handled,
// the answer is still judged against the old incarnation.

import (
	"context"
	stderrors "errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// recreateTopic deletes topic and creates it again with partitions
// partitions (a new topic ID), returning the new ID.
func recreateTopic(t *testing.T, c *kfake.Cluster, partitions int32) [16]byte {
	t.Helper()
	cl := oracle(t, c)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TopicNames = []string{topic}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	if len(dresp.Topics) != 1 || dresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("DeleteTopics: %+v", dresp.Topics)
	}
	cr := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, partitions, 1
	cr.Topics = append(cr.Topics, ct)
	cresp, err := cr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if len(cresp.Topics) != 1 || cresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: %+v", cresp.Topics)
	}
	return cresp.Topics[0].TopicID
}

// An idempotent producer's batch appended to the old incarnation, whose
// answer is handled after the producer learned of the recreation: the batch
// is not sent again to the new incarnation (it was written once, to a log
// now deleted), and its report says so precisely: failed with
// ErrTopicIDChanged, not acknowledged with an offset of the deleted log, and
// not an unknown outcome (the old incarnation answered).
func TestAnswerOfRecreatedTopicJudgedByItsIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)

	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	oldID := producer.PartitionTopicID(p, topic, 0)
	if oldID == ([16]byte{}) {
		t.Fatal("no topic ID (Produce v13 expected)")
	}

	// The next Produce is held, then answered as the old incarnation's
	// leader answers an append: acknowledged at offset 1 under the topic
	// ID the request named.
	release := make(chan struct{})
	seen := make(chan struct{})
	var named atomic.Value
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		named.Store(req.Topics[0].TopicID)
		close(seen)
		c.SleepControl(func() { <-release })
		resp := answerProduce(req, 0, 0)
		resp.Topics[0].Partitions[0].BaseOffset = 1
		return resp, nil, true
	})
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	if got := named.Load().([16]byte); got != oldID {
		t.Fatalf("request named topic ID %x, want the old %x", got, oldID)
	}

	newID := recreateTopic(t, c, 1)
	eventually(t, 5*time.Second, "producer adopts the new topic ID", func() bool {
		_ = producer.RefreshMetadata(ctx, p)
		return producer.PartitionTopicID(p, topic, 0) == newID
	})
	close(release)

	res := pr.wait(5 * time.Second)[0]
	if res.Err == nil {
		t.Fatalf("record b of the deleted incarnation reported acknowledged at offset %d", res.Offset)
	}
	if !stderrors.Is(res.Err, errors.ErrTopicIDChanged) || stderrors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("record b: %v; want ErrTopicIDChanged and not an unknown outcome", res.Err)
	}
	var pe *errors.PartitionError
	if !stderrors.As(res.Err, &pe) || pe.Offset != 1 {
		t.Fatalf("record b: %v; want a PartitionError naming its offset 1 in the deleted log", res.Err)
	}
	if res.Recovery != nil {
		t.Fatalf("record b: recovery outcome %T", res.Recovery)
	}

	// The new incarnation holds only what was produced to it. (The new
	// log refuses the producer's next sequence, as a Kafka partition never
	// written refuses a first sequence other than 0: a ProvenGap, the
	// recreation having taken the acknowledged a with it, and c
	// resequenced. Nothing is a possible duplicate.)
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	wantLog(t, c, 0, []string{"c"})
	for _, o := range rec.Outcomes() {
		switch o.(type) {
		case producer.PossibleDuplicate, producer.Failed:
			t.Fatalf("outcomes %s", kinds(rec.Outcomes()))
		}
	}
	wantNoLost(t, rec)
}

// The same for a producer without idempotence: the batch appended to the
// old incarnation is not sent again to the new one.
func TestAnswerOfRecreatedTopicJudgedByItsIncarnationPlain(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.DisableIdempotence())
	ctx := testCtx(t, 20*time.Second)

	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	release := make(chan struct{})
	seen := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		close(seen)
		c.SleepControl(func() { <-release })
		resp := answerProduce(kr.(*kmsg.ProduceRequest), 0, 0)
		resp.Topics[0].Partitions[0].BaseOffset = 1
		return resp, nil, true
	})
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	newID := recreateTopic(t, c, 1)
	eventually(t, 5*time.Second, "producer adopts the new topic ID", func() bool {
		_ = producer.RefreshMetadata(ctx, p)
		return producer.PartitionTopicID(p, topic, 0) == newID
	})
	close(release)

	res := pr.wait(5 * time.Second)[0]
	if !stderrors.Is(res.Err, errors.ErrTopicIDChanged) || stderrors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("record b: offset %d, err %v; want ErrTopicIDChanged and not an unknown outcome", res.Offset, res.Err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	wantLog(t, c, 0, []string{"c"})
	wantNoLost(t, rec)
}

// In a transaction, the record acknowledged by the deleted incarnation
// fails, and so the transaction cannot commit.
func TestAnswerOfRecreatedTopicAbortsTransaction(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-recreate")
	ctx := testCtx(t, 20*time.Second)
	commitTxn(t, ctx, p, prec(0, "a"))

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	seen := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		close(seen)
		c.SleepControl(func() { <-release })
		resp := answerProduce(kr.(*kmsg.ProduceRequest), 0, 0)
		resp.Topics[0].Partitions[0].BaseOffset = 2
		return resp, nil, true
	})
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	newID := recreateTopic(t, c, 1)
	eventually(t, 5*time.Second, "producer adopts the new topic ID", func() bool {
		_ = producer.RefreshMetadata(ctx, p)
		return producer.PartitionTopicID(p, topic, 0) == newID
	})
	close(release)

	if res := pr.wait(5 * time.Second)[0]; !stderrors.Is(res.Err, errors.ErrTopicIDChanged) {
		t.Fatalf("record b: offset %d, err %v; want ErrTopicIDChanged", res.Offset, res.Err)
	}
	if err := p.CommitTransaction(ctx); !stderrors.Is(err, producer.ErrAbortRequired) || !stderrors.Is(err, errors.ErrTopicIDChanged) {
		t.Fatalf("CommitTransaction: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
}
