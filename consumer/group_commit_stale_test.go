package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestStaleEpochRetryResendsOnlyTheStale: a KIP-848 commit answered
// STALE_MEMBER_EPOCH for one partition and NONE for the other is sent
// again, with the new epoch, for the stale partition only. It was sent
// again whole, and when that second attempt failed, CommitSync reported
// the partition the coordinator had already stored as not committed.
func TestStaleEpochRetryResendsOnlyTheStale(t *testing.T) {
	c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	produceRange(t, c, 0, 0, 1)
	produceRange(t, c, 1, 0, 1)
	seq := 0
	m := startMember(t, c, "m", "stale-retry", &seq, consumer.WithGroupProtocol(consumer.ProtocolConsumer), consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "2 partitions", func() bool { return m.log.ownedCount() == 2 })
	waitFor(t, 10*time.Second, "a record of each", func() bool { r, _ := m.got(); return len(r) == 2 })
	id := c.TopicInfo(topic).TopicID
	var attempts atomic.Int32
	var second atomic.Pointer[map[int32]int64]
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		named := commitsOf(req, topic, id)
		if len(named) == 0 {
			c.KeepControl()
			return nil, nil, false
		}
		switch attempts.Add(1) {
		case 1:
			// Partition 1 is stored (answered NONE), partition 0's
			// epoch is stale.
			c.KeepControl()
			resp := refuseCommit(req, 0)
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if resp.Topics[i].Partitions[j].Partition == 0 {
						resp.Topics[i].Partitions[j].ErrorCode = kerr.StaleMemberEpoch.Code
					}
				}
			}
			return resp, nil, true
		default:
			second.Store(&named)
			return refuseCommit(req, kerr.UnknownServerError.Code), nil, true
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := m.cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{
		{Topic: topic, Partition: 0}: {Offset: 1, LeaderEpoch: 0},
		{Topic: topic, Partition: 1}: {Offset: 1, LeaderEpoch: 0},
	})
	if err == nil || !strings.Contains(err.Error(), "t[0]") {
		t.Fatalf("CommitSync: %v; want partition 0's second attempt refused", err)
	}
	if strings.Contains(err.Error(), "t[1]") {
		t.Fatalf("CommitSync reports partition 1, stored by the first attempt, as failed: %v", err)
	}
	if got := second.Load(); got == nil || len(*got) != 1 || (*got)[0] != 1 {
		t.Fatalf("second attempt named %v; want partition 0 only", got)
	}
}
