package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// ownerLog tracks, across members, who owns each partition according to
// the callbacks, and records every assignment of a partition another
// member still owns.
type ownerLog struct {
	mu         sync.Mutex
	by         map[consumer.TopicPartition]map[string]bool
	violations []string
	events     []string
}

func newOwnerLog() *ownerLog {
	return &ownerLog{by: map[consumer.TopicPartition]map[string]bool{}}
}

func (o *ownerLog) opts(name string) []consumer.Opt {
	drop := func(_ context.Context, tps []consumer.TopicPartition) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.events = append(o.events, fmt.Sprintf("%s %s drop %v", time.Now().Format("05.000"), name, tps))
		for _, tp := range tps {
			delete(o.by[tp], name)
		}
	}
	return []consumer.Opt{
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.events = append(o.events, fmt.Sprintf("%s %s assigned %v", time.Now().Format("05.000"), name, tps))
			for _, tp := range tps {
				for cur := range o.by[tp] {
					if cur != name {
						o.violations = append(o.violations, fmt.Sprintf("%v assigned to %s while %s owns it", tp, name, cur))
					}
				}
				if o.by[tp] == nil {
					o.by[tp] = map[string]bool{}
				}
				o.by[tp][name] = true
			}
		}),
		consumer.OnRevoked(drop),
		consumer.OnLost(drop),
	}
}

// counts returns how many partitions each member owns, and the
// violations so far.
func (o *ownerLog) counts() (map[string]int, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for _, ns := range o.by {
		for n := range ns {
			out[n]++
		}
	}
	return out, append([]string(nil), o.violations...)
}

// TestGroup848OwnedWhileAssigning: a KIP-848 member whose reconciliation
// is still reading the committed offsets of newly assigned partitions
// (OffsetFetch answered UNSTABLE_OFFSET_COMMIT, a transaction's offsets
// pending) reports them as owned in its heartbeats. When the coordinator
// moves one of them to a new member meanwhile, it must wait for this one
// to revoke it: no partition is ever owned by two members (it once read
// the report without them as the revocation done and handed the
// partition on while the first member still assigned it).
func TestGroup848OwnedWhileAssigning(t *testing.T) {
	c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	var hold atomic.Bool
	hold.Store(true)
	var fetches atomic.Int32
	c.ControlKey(int16(kmsg.OffsetFetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetFetchRequest)
		n := 0
		for _, rg := range req.Groups {
			for _, rt := range rg.Topics {
				n += len(rt.Partitions)
			}
		}
		// Only m1's first reconciliation reads both partitions.
		if !hold.Load() || n != 2 {
			return nil, nil, false
		}
		fetches.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		for _, rg := range req.Groups {
			sg := kmsg.NewOffsetFetchResponseGroup()
			sg.Group = rg.Group
			for _, rt := range rg.Topics {
				st := kmsg.NewOffsetFetchResponseGroupTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, p := range rt.Partitions {
					sp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					sp.Partition, sp.Offset, sp.LeaderEpoch = p, -1, -1
					sp.ErrorCode = kerr.UnstableOffsetCommit.Code
					st.Partitions = append(st.Partitions, sp)
				}
				sg.Topics = append(sg.Topics, st)
			}
			resp.Groups = append(resp.Groups, sg)
		}
		return resp, nil, true
	})
	o := newOwnerLog()
	c.ControlKey(int16(kmsg.ConsumerGroupHeartbeat), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ConsumerGroupHeartbeatRequest)
		var ps []int32
		for _, t := range req.Topics {
			ps = append(ps, t.Partitions...)
		}
		o.mu.Lock()
		o.events = append(o.events, fmt.Sprintf("%s hb %s epoch %d owned %v", time.Now().Format("05.000"), req.MemberID[:4], req.MemberEpoch, ps))
		o.mu.Unlock()
		return nil, nil, false
	})
	seq := 0
	proto := consumer.WithGroupProtocol(consumer.ProtocolConsumer)
	startMember(t, c, "m1", "g848own", &seq, append([]consumer.Opt{proto}, o.opts("m1")...)...)
	waitFor(t, 10*time.Second, "m1 reading its offsets", func() bool { return fetches.Load() > 0 })
	startMember(t, c, "m2", "g848own", &seq, append([]consumer.Opt{proto}, o.opts("m2")...)...)
	time.Sleep(1500 * time.Millisecond) // m2 joins, m1 heartbeats meanwhile
	hold.Store(false)
	defer func() {
		if t.Failed() {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, e := range o.events {
				t.Log(e)
			}
		}
	}()
	waitFor(t, 15*time.Second, "one partition each", func() bool {
		n, _ := o.counts()
		return n["m1"] == 1 && n["m2"] == 1
	})
	time.Sleep(300 * time.Millisecond)
	if _, v := o.counts(); len(v) > 0 {
		t.Fatalf("a partition owned twice: %v", v)
	}
}

// TestGroupClassicOnAssignedContext: OnAssigned's ctx ends when the
// consumer closes (OnAssigned's doc), not when another member's join
// starts a rebalance while the callback runs (a classic member passed its
// session's context).
func TestGroupClassicOnAssignedContext(t *testing.T) {
	c := newCluster(t, 2)
	seq := 0
	var once sync.Once
	entered := make(chan struct{})
	errc := make(chan error, 1)
	slow := consumer.OnAssigned(func(ctx context.Context, _ []consumer.TopicPartition) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		close(entered)
		time.Sleep(1500 * time.Millisecond) // the application loads its state
		errc <- ctx.Err()
	})
	startMember(t, c, "m1", "ctxgroup", &seq, slow)
	<-entered
	startMember(t, c, "m2", "ctxgroup", &seq)
	if err := <-errc; err != nil {
		t.Fatalf("OnAssigned's ctx ended while the consumer is open: %v", err)
	}
}
