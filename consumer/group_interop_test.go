package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
)

// owners tracks which member owns each partition, failing on a partition
// owned twice at once.
type owners struct {
	t  *testing.T
	mu sync.Mutex
	by map[int32]string
}

func (o *owners) assigned(who string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps {
		if cur, ok := o.by[p]; ok && cur != who {
			o.t.Errorf("partition %d assigned to %s while %s owns it", p, who, cur)
		}
		o.by[p] = who
	}
}

func (o *owners) revoked(who string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps {
		if o.by[p] == who {
			delete(o.by, p)
		}
	}
}

func (o *owners) count(who string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, w := range o.by {
		if w == who {
			n++
		}
	}
	return n
}

func partitionsOf(tps []consumer.TopicPartition) []int32 {
	var out []int32
	for _, tp := range tps {
		out = append(out, tp.Partition)
	}
	return out
}

// kgoMember joins the group with franz-go's own consumer, whose
// ConsumerProtocol encoding follows the Java client's.
func kgoMember(t *testing.T, c *kfake.Cluster, group string, o *owners, balancer kgo.GroupBalancer) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(balancer),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.SessionTimeout(6*time.Second),
		kgo.RebalanceTimeout(5*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { o.assigned("kgo", m[topic]) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { o.revoked("kgo", m[topic]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { o.revoked("kgo", m[topic]) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	// kgo's group management runs while the client polls.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return cl
}

func kepochMember(t *testing.T, c *kfake.Cluster, group string, o *owners, opts ...consumer.Opt) *member {
	seq := 0
	return startMember(t, c, "kepoch", group, &seq, append(opts,
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) { o.assigned("kepoch", partitionsOf(tps)) }),
		consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) { o.revoked("kepoch", partitionsOf(tps)) }),
		consumer.OnLost(func(_ context.Context, tps []consumer.TopicPartition) { o.revoked("kepoch", partitionsOf(tps)) }),
	)...)
}

// TestGroupInteropWithFranzGo: kepoch and franz-go consumers (both speaking
// the Java ConsumerProtocol) share one group, each leading in turn, with
// the cooperative-sticky and the range assignors: the partitions are split
// between them, never owned twice, and all go to the survivor when one
// leaves.
func TestGroupInteropWithFranzGo(t *testing.T) {
	for _, tc := range []struct {
		name        string
		kepochFirst bool
		assignor    string
		balancer    kgo.GroupBalancer
	}{
		{"cooperative-sticky, kepoch leads", true, consumer.CooperativeStickyAssignor, kgo.CooperativeStickyBalancer()},
		{"cooperative-sticky, franz-go leads", false, consumer.CooperativeStickyAssignor, kgo.CooperativeStickyBalancer()},
		{"range, kepoch leads", true, consumer.RangeAssignor, kgo.RangeBalancer()},
		{"range, franz-go leads", false, consumer.RangeAssignor, kgo.RangeBalancer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 4)
			group := fmt.Sprintf("interop-%v-%s", tc.kepochFirst, tc.assignor)
			o := &owners{t: t, by: map[int32]string{}}
			var k *member
			var g *kgo.Client
			if tc.kepochFirst {
				k = kepochMember(t, c, group, o, consumer.Assignors(tc.assignor))
				waitFor(t, 10*time.Second, "kepoch owns 4", func() bool { return o.count("kepoch") == 4 })
				g = kgoMember(t, c, group, o, tc.balancer)
			} else {
				g = kgoMember(t, c, group, o, tc.balancer)
				waitFor(t, 10*time.Second, "franz-go owns 4", func() bool { return o.count("kgo") == 4 })
				k = kepochMember(t, c, group, o, consumer.Assignors(tc.assignor))
			}
			waitFor(t, 15*time.Second, "2 partitions each", func() bool { return o.count("kepoch") == 2 && o.count("kgo") == 2 })
			if tc.kepochFirst {
				// kepoch leaves: franz-go takes everything.
				k.closeNow(t)
				waitFor(t, 15*time.Second, "franz-go owns 4", func() bool { return o.count("kgo") == 4 })
			} else {
				g.LeaveGroup()
				waitFor(t, 15*time.Second, "kepoch owns 4", func() bool { return o.count("kepoch") == 4 })
			}
			if _, errs := k.got(); len(errs) > 0 {
				t.Fatal(errs)
			}
		})
	}
}
