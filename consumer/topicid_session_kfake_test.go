package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// idPart is a session entry as Kafka keys it from Fetch v13 on: topic ID
// and partition (FetchSession.scala CachedPartition.equals).
type idPart struct {
	id [16]byte
	p  int32
}

// kafkaSessions replays the Fetch requests a cluster receives into the
// sessions a Kafka broker would hold: keyed by (topic ID, partition), so a
// partition named under a new topic ID is a new entry, and the old one
// stays until a request forgets it by its old ID (Java's
// FetchSessionHandler puts it in ForgottenTopics, "replaced").
type kafkaSessions struct {
	mu   sync.Mutex
	held map[int32]map[idPart]bool // node → entries
}

func observeKafkaSessions(c *kfake.Cluster) *kafkaSessions {
	s := &kafkaSessions{held: map[int32]map[idPart]bool{}}
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		if req.Version < 13 {
			return nil, nil, false
		}
		node := c.CurrentNode()
		s.mu.Lock()
		defer s.mu.Unlock()
		cur := s.held[node]
		if req.SessionEpoch <= 0 || cur == nil {
			cur = map[idPart]bool{}
			s.held[node] = cur
		}
		for _, ft := range req.ForgottenTopics {
			for _, p := range ft.Partitions {
				delete(cur, idPart{ft.TopicID, p})
			}
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				cur[idPart{rt.TopicID, rp.Partition}] = true
			}
		}
		return nil, nil, false
	})
	return s
}

// stale returns the entries held for a topic ID other than id.
func (s *kafkaSessions) stale(id [16]byte) []idPart {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []idPart
	for _, cur := range s.held {
		for e := range cur {
			if e.id != id {
				out = append(out, e)
			}
		}
	}
	return out
}

// A topic recreated under the same name, with the same leader: the fetch
// session must forget the partition under its old topic ID when it names
// it under the new one. Kafka keys session entries by topic ID: an entry
// left under the old ID is fetched by the broker on every request of the
// session and answered INCONSISTENT_TOPIC_ID (or UNKNOWN_TOPIC_ID), which
// makes every Fetch return at once (an error never waits MaxWait) and is
// ignored by the consumer (the answer's topic ID is not one it asked for):
// a Fetch busy loop for as long as the session lives.
func TestFetchSessionForgetsReplacedTopicID(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sessions := observeKafkaSessions(c)
	produceRange(t, c, 0, 0, 20)
	cons, _ := startAt0(t, c, 20)
	oldID := c.TopicInfo(topic).TopicID
	if err := c.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	newID := c.TopicInfo(topic).TopicID
	if newID == oldID {
		t.Fatal("kfake kept the topic id")
	}
	produce(t, c, 0, "new", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for n < 5 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d)", err, n)
		}
		n += len(f.Records)
	}
	// Let the consumer fetch a few more times at the end of the new log.
	time.Sleep(200 * time.Millisecond)
	if st := sessions.stale(newID); len(st) > 0 {
		t.Fatalf("the broker's session still holds %d partition(s) under the old topic ID %x (old %x, new %x): never forgotten",
			len(st), st[0].id, oldID, newID)
	}
}
