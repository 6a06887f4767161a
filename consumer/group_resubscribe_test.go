package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestGroupResubscribeRegexToTopics: a member subscribed by regex that
// calls Subscribe with a topic list gives up the regex's topics, under both
// protocols.
func TestGroupResubscribeRegexToTopics(t *testing.T) {
	for _, proto := range []consumer.GroupProtocol{consumer.ProtocolClassic, consumer.ProtocolConsumer} {
		t.Run(proto.String(), func(t *testing.T) {
			c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
			createTopic(t, c, "u", 2)
			seq := 0
			subscribe := func(cons *consumer.Consumer) error { return cons.SubscribeRegex(`t`) }
			m := startMemberWith(t, c, "re", "resub-"+proto.String(), &seq, subscribe, consumer.WithGroupProtocol(proto))
			waitFor(t, 10*time.Second, "t's 2 partitions", func() bool { return m.log.ownedCount() == 2 })
			if err := m.cons.Subscribe("u"); err != nil {
				t.Fatal(err)
			}
			want := []string{"u[0]", "u[1]"}
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && !slices.Equal(m.log.ownedList(), want) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := m.log.ownedList(); !slices.Equal(got, want) {
				t.Fatalf("owned %v after Subscribe(u); want %v (callbacks %v)", got, want, m.log.log())
			}
		})
	}
}

// TestGroupPartitionsAddedDuringAssign: partitions added to a subscribed
// topic after the classic leader assigned but before its session started
// waiting (metadata refreshed while SyncGroup/OffsetFetch/OnAssigned ran)
// are still rebalanced in.
func TestGroupPartitionsAddedDuringAssign(t *testing.T) {
	c := newCluster(t, 2)
	seq := 0
	var once sync.Once
	grow := consumer.OnAssigned(func(context.Context, []consumer.TopicPartition) {
		once.Do(func() {
			req := kmsg.NewPtrCreatePartitionsRequest()
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = topic, 4
			req.Topics = append(req.Topics, rt)
			if err := kerr.ErrorForCode(admin(t, c, req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode); err != nil {
				t.Error(err)
			}
			time.Sleep(2 * time.Second) // a metadata refresh (MetadataMaxAge 500ms) sees 4 partitions
		})
	})
	m := startMember(t, c, "m", "grow-early", &seq, grow)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && len(m.cons.Assigned()) != 4 {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(m.cons.Assigned()); n != 4 {
		_, errs := m.got()
		t.Fatalf("owned %d partitions, want 4 (errors %v)", n, errs)
	}
}
