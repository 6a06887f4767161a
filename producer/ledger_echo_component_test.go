package producer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// An OffsetForLeaderEpoch answer naming the epoch asked about may be the
// leader's echo of an epoch it no longer keeps (a Kafka broker answers an
// epoch older than its whole trimmed cache with its log start). [0, 5) is
// acknowledged under epoch 0 and confirmed by the tail probe after a first
// leader change (kfake answers -1/-1 while epoch 1 is empty); DeleteRecords
// then moves the log start to 5, and after a second change the leader
// answers (0, 5), as one that never had epoch 0 (an unclean election) would
// once its log start is 5. The producer must ask the log start
// (ListOffsets) and report [0, 5) Unconfirmed: it survived in silence.
func TestEchoAnswerAsksLogStart(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 15*time.Second)
	var on atomic.Bool
	var fetches, lists atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lists.Add(1)
		return nil, nil, false
	})
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
				sp.LeaderEpoch, sp.EndOffset = rp.LeaderEpoch, 5 // the echo: its log start
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	for i := range 5 {
		mustOK(t, sendAll(t, ctx, p, prec(0, fmt.Sprintf("v%d", i))))
	}
	leader := c.LeaderFor(topic, 0)
	if err := c.MoveTopicPartition(topic, 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	for fetches.Load() == 0 { // the tail probe
		if ctx.Err() != nil {
			t.Fatal("no probe after the first leader change")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	wantNoLost(t, rec)
	{ // DeleteRecords: the log now starts at 5
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
	on.Store(true)
	if err := c.MoveTopicPartition(topic, 0, leader); err != nil {
		t.Fatal(err)
	}
	for len(rec.Lost()) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no report after the echo (ListOffsets asked %d times)", lists.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if lists.Load() == 0 {
		t.Fatal("the log start was not asked")
	}
	var got [][2]int64
	for _, l := range rec.Lost() {
		if !l.Unconfirmed || l.Untracked || l.Err != nil || l.LeaderEpoch != 0 {
			t.Fatalf("report %+v; want Unconfirmed only", l)
		}
		got = append(got, [2]int64{l.From, l.To})
	}
	if len(got) != 1 || got[0] != [2]int64{0, 5} {
		t.Fatalf("reports %v; want [0, 5) Unconfirmed", got)
	}
}
