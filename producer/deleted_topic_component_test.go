package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// topicRequest sends one admin request about topic and wants no error.
func topicRequest(t *testing.T, c *kfake.Cluster, create bool) [16]byte {
	t.Helper()
	return adminTopic(t, c, topic, create)
}

// adminTopic creates (one partition, returning its ID) or deletes the named
// topic and wants no error.
func adminTopic(t *testing.T, c *kfake.Cluster, name string, create bool) [16]byte {
	t.Helper()
	cl := oracle(t, c)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !create {
		del := kmsg.NewPtrDeleteTopicsRequest()
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(name)
		del.TopicNames, del.Topics = []string{name}, append(del.Topics, dt)
		resp, err := del.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("DeleteTopics %s: %+v, %v", name, resp, err)
		}
		return [16]byte{}
	}
	cr := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, 1, 1
	cr.Topics = append(cr.Topics, ct)
	resp, err := cr.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics %s: %+v, %v", name, resp, err)
	}
	return resp.Topics[0].TopicID
}

// An idempotent producer's topic deleted for longer than its delivery
// timeout and metadata wait: the records produced meanwhile fail with typed
// errors (ErrDeliveryTimeout for those taken, ErrMetadataTimeout for those
// Produce refuses once metadata no longer has the topic), nothing hangs,
// and when a topic of the same name is created again, the partition's
// sequences start afresh there: sequence 0, no gap, no bump, nothing
// reported lost.
func TestDeletedTopicFailsThenRecreatedStartsAfresh(t *testing.T) {
	c := newCluster(t, 1)
	// MetadataWait well above what the refresher takes to adopt the new
	// topic ID (confirmations spaced by its backoff, up to 1 s).
	const timeout, wait = 500 * time.Millisecond, 10 * time.Second
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond),
		producer.DeliveryTimeout(timeout), producer.MetadataWait(wait), producer.RequestTimeout(200*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
	before := p.ProducerID()

	topicRequest(t, c, false)
	// Metadata keeps a deleted topic's partitions (a broker answering
	// UNKNOWN_TOPIC_OR_PARTITION may be behind): Produce takes the
	// records, and each fails at its delivery timeout, or is refused at
	// MetadataWait once metadata has no partitions for the topic. Either
	// way a typed error, and no hang.
	for range 3 {
		began := time.Now()
		res, err := p.ProduceSync(ctx, prec(0, "lost"))
		took := time.Since(began)
		if err == nil {
			t.Fatalf("record to a deleted topic acknowledged: %+v", res)
		}
		if took > timeout+wait+time.Second {
			t.Fatalf("record to a deleted topic failed after %v: %v", took, err)
		}
		if !errors.Is(err, producer.ErrDeliveryTimeout) && !errors.Is(err, errors.ErrMetadataTimeout) {
			t.Fatalf("record to a deleted topic: %v; want ErrDeliveryTimeout or ErrMetadataTimeout", err)
		}
	}

	newID := topicRequest(t, c, true)
	// The refresher adopts the new ID after a few answers name it (no
	// broker was seen moving to it: they answered the topic unknown in
	// between); records sent before, to the deleted ID, would time out.
	eventually(t, 10*time.Second, "producer adopts the new topic ID", func() bool {
		_ = producer.RefreshMetadata(ctx, p)
		return producer.PartitionTopicID(p, topic, 0) == newID
	})
	sent := watchProduce(c, 0)
	mustOK(t, sendAll(t, ctx, p, prec(0, "c"), prec(0, "d")))
	wantLog(t, c, 0, []string{"c", "d"})
	bs := sent.batches()
	if len(bs) == 0 || bs[0].Seq != 0 || bs[0].PID != before.ID {
		t.Fatalf("batches sent to the new topic %+v; want the first at sequence 0 of %v", bs, before)
	}
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	for _, o := range rec.Outcomes() {
		switch o.(type) {
		case producer.ProvenGap, producer.PossibleGap, producer.PossibleDuplicate:
			t.Fatalf("outcome %#v", o)
		}
	}
	wantNoLost(t, rec)
}
