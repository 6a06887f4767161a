package producer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// A compacted topic and two leader changes: the first (same broker, epoch
// 0 -> 1) goes unnoticed, so the acked ranges carry epoch 0 while their
// batches were appended under 1 (inexact); compaction then removes one whole
// batch of the producer (offset 2: its key was written again at 3). After
// the second change (epoch 2, another broker) the ledger asks about epoch 0
// (it ended at 1), so [1, 5) is suspect and probed. The probe confirms
// offset 1, then meets the compaction gap at 2: it must settle the range
// (the records were compacted, not lost), not fetch at offset 2 forever.
func TestProbeCompactionGapEnds(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl := oracle(t, c)
	defer cl.Close()
	ctx := testCtx(t, 20*time.Second)
	{
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		v := "compact"
		cfg.Name, cfg.Value = "cleanup.policy", &v
		r.Configs = append(r.Configs, cfg)
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("alter configs: %v %+v", err, resp)
		}
	}
	var fetches atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
		return nil, nil, false
	})
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(time.Hour))
	send := func(k, v string) {
		t.Helper()
		mustOK(t, sendAll(t, ctx, p, &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Key: []byte(k), Value: []byte(v)}))
	}
	leader := c.LeaderFor(topic, 0)
	send("a", "0")                                                 // offset 0, epoch 0
	if err := c.MoveTopicPartition(topic, 0, leader); err != nil { // epoch 1, unnoticed
		t.Fatal(err)
	}
	send("b", "1") // 1
	send("c", "2") // 2: superseded by 3
	send("c", "3") // 3
	send("d", "4") // 4
	c.Compact()
	if got := values(partitionLog(t, c, 0)); len(got) != 4 {
		t.Fatalf("log after compaction %v; want offset 2 gone", got)
	}
	if err := c.MoveTopicPartition(topic, 0, (leader+1)%3); err != nil { // epoch 2
		t.Fatal(err)
	}
	before := fetches.Load()
	send("e", "5") // NOT_LEADER, metadata refresh, epoch 2 observed
	time.Sleep(2 * time.Second)
	n := fetches.Load() - before
	if n > 20 {
		t.Fatalf("%d probe fetches in 2 s: the probe never ends (lost reports %+v)", n, rec.Lost())
	}
	wantNoLost(t, rec)
}

// Retention removed [0, 5) (log start 5) by the time the probe fetches: a
// Kafka broker answers a Fetch below the log start with OFFSET_OUT_OF_RANGE
// and log_start_offset = -1 (ReplicaManager.createLogReadResult(e): every
// offset field UnifiedLog.UnknownOffset); ListOffsets(EARLIEST) would say 5.
// The ranges are inexact (produce answers carry no epoch), so they are
// probed whatever the epoch answer says, and never found: retention removed
// them, or an unclean election cut them before it. Nothing may be reported
// lost, [0, 5) is reported Unconfirmed (the ledger cannot know), and the
// probe must end.
func TestProbeBelowLogStartKafkaAnswerEnds(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	for i := range 5 {
		mustOK(t, sendAll(t, ctx, p, prec(0, fmt.Sprintf("v%d", i))))
	}
	{ // retention: the log now starts at 5
		cl := oracle(t, c)
		defer cl.Close()
		req := kmsg.NewPtrDeleteRecordsRequest()
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = 0, 5
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("delete records: %v %+v", err, resp)
		}
	}
	var on atomic.Bool
	var fetches atomic.Int64
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition = rp.Partition
				if rp.LeaderEpoch == rp.CurrentLeaderEpoch {
					sp.LeaderEpoch, sp.EndOffset = rp.LeaderEpoch, 5 // log end
				} else {
					sp.LeaderEpoch, sp.EndOffset = 0, 2 // epoch 0 ended at 2
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		fetches.Add(1)
		req := kr.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OffsetOutOfRange.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	on.Store(true)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if n := fetches.Load(); n > 3 {
		t.Fatalf("%d probe fetches in 3 s: the probe never ends (lost reports %+v)", n, rec.Lost())
	}
	var got [][2]int64
	for _, l := range rec.Lost() {
		if !l.Unconfirmed || l.Untracked || l.Err != nil {
			t.Fatalf("report %+v; want Unconfirmed only", l)
		}
		got = append(got, [2]int64{l.From, l.To})
	}
	if len(got) != 1 || got[0] != [2]int64{0, 5} {
		t.Fatalf("reports %v; want [0, 5) Unconfirmed", got)
	}
}
