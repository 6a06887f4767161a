package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// unstableOffsets answers an OffsetFetch with UNSTABLE_OFFSET_COMMIT for
// every partition it names (a transaction's offsets pending).
func unstableOffsets(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
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
	return resp
}

// TestGroup848NewAssignmentWhileReadingOffsets: a KIP-848 member whose
// reconciliation cannot read the committed offsets of the partitions it
// was given (OffsetFetch answered UNSTABLE_OFFSET_COMMIT for as long as a
// transaction stays open) takes a new assignment from the coordinator
// meanwhile: it gives up reading for the old one and reconciles the new
// one. It went on waiting, reporting the partitions as owned, so the
// coordinator could move none of them to the member that joined, which
// stayed idle until the first was fenced a rebalance timeout later and
// lost everything.
func TestGroup848NewAssignmentWhileReadingOffsets(t *testing.T) {
	c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	produceRange(t, c, 0, 0, 5)
	produceRange(t, c, 1, 0, 5)
	var held atomic.Int32
	c.ControlKey(int16(kmsg.OffsetFetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetFetchRequest)
		n := 0
		for _, rg := range req.Groups {
			for _, rt := range rg.Topics {
				n += len(rt.Partitions)
			}
		}
		// Only m1's first reconciliation reads both partitions: those
		// offsets stay unreadable for the whole test.
		if n != 2 {
			return nil, nil, false
		}
		held.Add(1)
		return unstableOffsets(req), nil, true
	})
	o := newOwnerLog()
	seq := 0
	opts := []consumer.Opt{consumer.WithGroupProtocol(consumer.ProtocolConsumer), consumer.RebalanceTimeout(60 * time.Second)}
	m1 := startMember(t, c, "m1", "g848new", &seq, append(opts, o.opts("m1")...)...)
	waitFor(t, 10*time.Second, "m1 reading its offsets", func() bool { return held.Load() > 0 })
	m2 := startMember(t, c, "m2", "g848new", &seq, append(opts, o.opts("m2")...)...)
	waitFor(t, 15*time.Second, "a partition each", func() bool {
		n, v := o.counts()
		if len(v) > 0 {
			t.Fatal(v)
		}
		return n["m1"] == 1 && n["m2"] == 1
	})
	waitBetween(t, 10*time.Second, 10, m1, m2)
	if _, v := o.counts(); len(v) > 0 {
		t.Fatal(v)
	}
}
