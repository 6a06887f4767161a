package producer_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A clean leader change after many megabytes acknowledged by one producer
// identity costs one OffsetForLeaderEpoch and one Fetch for the partition:
// the identity's newest batch is read, not the whole range (which, read by
// 4 MiB fetches, took two fetches here, and an OffsetForLeaderEpoch more).
func TestLedgerCleanLeaderChangeCostsOneFetch(t *testing.T) {
	c := newCluster(t, 2)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)
	big := strings.Repeat("x", 128<<10)
	for range 40 { // 5 MiB in 40 batches
		mustOK(t, sendAll(t, ctx, p, prec(0, big)))
	}
	mustOK(t, sendAll(t, ctx, p, prec(1, "b")))

	var mu sync.Mutex
	count := map[[2]int32]int{} // (key, partition) → requests
	for _, key := range []kmsg.Key{kmsg.OffsetForLeaderEpoch, kmsg.Fetch} {
		c.ControlKey(int16(key), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			mu.Lock()
			defer mu.Unlock()
			switch req := kr.(type) {
			case *kmsg.OffsetForLeaderEpochRequest:
				for _, rt := range req.Topics {
					for _, rp := range rt.Partitions {
						count[[2]int32{int32(key), rp.Partition}]++
					}
				}
			case *kmsg.FetchRequest:
				for _, rt := range req.Topics {
					for _, rp := range rt.Partitions {
						count[[2]int32{int32(key), rp.Partition}]++
					}
				}
			}
			return nil, nil, false
		})
	}
	seen := func(key kmsg.Key, part int32) int {
		mu.Lock()
		defer mu.Unlock()
		return count[[2]int32{int32(key), part}]
	}
	move := func(part int32) {
		t.Helper()
		if err := c.MoveTopicPartition(topic, part, (c.LeaderFor(topic, part)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	move(0)
	mustOK(t, sendAll(t, ctx, p, prec(0, "after"))) // the producer learns of the change
	eventually(t, 5*time.Second, "no probe of partition 0", func() bool { return seen(kmsg.Fetch, 0) > 0 })
	// A barrier: partition 1's check, queued after everything partition 0
	// asked (one check at a time, in order).
	move(1)
	mustOK(t, sendAll(t, ctx, p, prec(1, "after")))
	eventually(t, 5*time.Second, "no probe of partition 1", func() bool { return seen(kmsg.Fetch, 1) > 0 })
	if o, f := seen(kmsg.OffsetForLeaderEpoch, 0), seen(kmsg.Fetch, 0); o != 1 || f != 1 {
		t.Fatalf("partition 0: %d OffsetForLeaderEpoch, %d Fetch requests; want one each", o, f)
	}
	wantNoLost(t, rec)
}
