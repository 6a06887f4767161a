package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/compress"
)

// A partition whose next batch is larger than FetchMaxPartitionBytes is
// read: Kafka (Fetch v3+, KIP-74) returns such a batch whole only to the
// first partition of the response that has data, and nothing (not a cut
// batch) to a later one, so the partition must come first, or alone, in a
// request now and then. Here partition 0 always has data and the broker
// is made to read it first (the requests are reordered on their way out);
// partition 1's single batch is four times the partition limit. It is read
// because a partition whose answer waits for Poll wants no fetch (its
// machine asks for the next once Poll hands the answer out): the request
// the fetch loop sends right after partition 0's answer names partition 1
// alone. (Without the reordering the order is random as well: the request
// is built from a map.)
func TestOversizedBatchBehindAnotherPartitionIsRead(t *testing.T) {
	c := newClusterWith(t, 2, kfake.NumBrokers(1))
	const per, batches = 5, 40
	for i := int64(0); i < batches; i++ {
		produceOneBatch(t, c, 0, per*i, per*i+per, compress.None)
	}
	produceOneBatch(t, c, 1, 0, 300, compress.None) // ~4KiB
	var (
		mu      sync.Mutex
		starved int // answers without partition 1's records while it was named after partition 0, which had records
	)
	cons := newConsumer(t, c, consumer.FetchMaxPartitionBytes(1024))
	consumer.InterceptFetches(cons, func(ctx context.Context, _ int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
		for i := range req.Topics {
			slices.SortFunc(req.Topics[i].Partitions, func(a, b kmsg.FetchRequestTopicPartition) int { return int(a.Partition - b.Partition) })
		}
		resp, err := send(ctx)
		if err != nil || fetchOffset(req, 0) < 0 || fetchOffset(req, 1) < 0 {
			return resp, err
		}
		got := map[int32]bool{}
		for _, rt := range resp.(*kmsg.FetchResponse).Topics {
			for _, rp := range rt.Partitions {
				got[rp.Partition] = len(rp.RecordBatches) > 0
			}
		}
		if got[0] && !got[1] {
			mu.Lock()
			starved++
			mu.Unlock()
		}
		return resp, nil
	})
	assignAll(t, cons, 2, consumer.At(0))
	recs, evs, errs := pollUntil(t, cons, per*batches+300, 20*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v, errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: per * batches, 1: 300})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers leaving partition 1's oversized batch out behind partition 0: %d", starved)
}
