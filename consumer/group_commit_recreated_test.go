package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestCommitOfDeletedIncarnationRefused: a commit made while the member
// read one incarnation of a topic and sent after the topic was deleted
// and created again (it waited behind a slow commit) is of offsets of the
// deleted log. Sent under the new topic's ID (or its name), it was stored
// for the new incarnation: the next owner started at offset 10 of a log
// of 3 records. It is refused with ErrTopicIDChanged.
func TestCommitOfDeletedIncarnationRefused(t *testing.T) {
	c := newClusterWith(t, 2)
	produceRange(t, c, 0, 0, 10)
	seq := 0
	m := startMember(t, c, "m", "commit-recreated", &seq, consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "10 records", func() bool { r, _ := m.got(); return len(r) == 10 })
	t0 := consumer.TopicPartition{Topic: topic, Partition: 0}
	offs := m.cons.Consumed()
	if offs[t0].Offset != 10 {
		t.Fatalf("consumed %v", offs)
	}
	release := blockCommits(t, m.cons)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res <- m.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{t0: offs[t0]})
	}()
	waitFor(t, 5*time.Second, "the commit queued", func() bool { return consumer.QueuedCommits(m.cons) == 1 })

	del := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	del.Topics = append(del.Topics, dt)
	del.TopicNames = []string{topic}
	if err := kerr.ErrorForCode(admin(t, c, del).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode); err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, topic, 2)
	produceRange(t, c, 0, 0, 3)
	waitFor(t, 15*time.Second, "the recreation reported", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, e := range m.events {
			if e.Partition == 0 && e.Kind == consumer.Recreated {
				return true
			}
		}
		return false
	})
	release()
	err := <-res
	if !errors.Is(err, errors.ErrTopicIDChanged) {
		t.Errorf("CommitSync of the deleted incarnation's offset: %v; want ErrTopicIDChanged", err)
	}
	if got, ok := committedBy(t, m.cons, t0)[t0]; ok {
		t.Fatalf("the new incarnation's committed offset is %+v, the deleted one's position", got)
	}
}

// TestCommitRecreatedWhileSending: the topic is deleted and created again,
// and metadata learns the new ID, after the commit's incarnation check
// passed and before the request is built. Built with the ID metadata held
// then, the request stored the deleted log's offset for the new
// incarnation. It names the incarnation the offsets were read in, or is
// refused with ErrTopicIDChanged, and nothing is stored for the new one.
func TestCommitRecreatedWhileSending(t *testing.T) {
	c := newClusterWith(t, 2)
	produceRange(t, c, 0, 0, 10)
	seq := 0
	m := startMember(t, c, "m", "commit-recreated-sending", &seq, consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "10 records", func() bool { r, _ := m.got(); return len(r) == 10 })
	t0 := consumer.TopicPartition{Topic: topic, Partition: 0}
	offs := m.cons.Consumed()
	if offs[t0].Offset != 10 {
		t.Fatalf("consumed %v", offs)
	}
	old := consumer.MetadataTopicID(m.cons, topic)
	hookErr := make(chan error, 1)
	var once sync.Once
	consumer.BeforeCommitSend(m.cons, func() {
		once.Do(func() {
			hookErr <- func() error {
				cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
				if err != nil {
					return err
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				del := kmsg.NewPtrDeleteTopicsRequest()
				dt := kmsg.NewDeleteTopicsRequestTopic()
				dt.Topic = kmsg.StringPtr(topic)
				del.Topics = append(del.Topics, dt)
				del.TopicNames = []string{topic}
				dr, err := del.RequestWith(ctx, cl)
				if err == nil {
					err = kerr.ErrorForCode(dr.Topics[0].ErrorCode)
				}
				if err != nil {
					return err
				}
				cr := kmsg.NewPtrCreateTopicsRequest()
				ct := kmsg.NewCreateTopicsRequestTopic()
				ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, 2, 1
				cr.Topics = append(cr.Topics, ct)
				cresp, err := cr.RequestWith(ctx, cl)
				if err == nil {
					err = kerr.ErrorForCode(cresp.Topics[0].ErrorCode)
				}
				if err != nil {
					return err
				}
				for ctx.Err() == nil {
					if id := consumer.MetadataTopicID(m.cons, topic); id != old && id != ([16]byte{}) {
						return nil
					}
					time.Sleep(5 * time.Millisecond)
				}
				return fmt.Errorf("the consumer's metadata never named the new incarnation")
			}()
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := m.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{t0: offs[t0]})
	if herr := <-hookErr; herr != nil {
		t.Fatal(herr)
	}
	if !errors.Is(err, errors.ErrTopicIDChanged) && !errors.Is(err, kerr.UnknownTopicID) {
		t.Errorf("CommitSync of the deleted incarnation's offset: %v; want ErrTopicIDChanged (or the deleted ID unknown)", err)
	}
	if got, ok := committedBy(t, m.cons, t0)[t0]; ok {
		t.Fatalf("the new incarnation's committed offset is %+v, the deleted one's position", got)
	}
}
