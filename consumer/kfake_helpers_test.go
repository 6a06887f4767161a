package consumer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/internal/wire"
)

// newClusterWith is newCluster with extra kfake options.
func newClusterWith(t *testing.T, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// value is the value produceRange writes for record i of a partition.
func value(partition int32, i int64) string { return fmt.Sprintf("p%d-%d", partition, i) }

// produceRange writes records [from, to) to partition, values value(p, i),
// asynchronously in batches; it returns once all are acknowledged.
func produceRange(t *testing.T, c *kfake.Cluster, partition int32, from, to int64, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
	)
	for i := from; i < to; i++ {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(value(partition, i))}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if first != nil {
		t.Fatal(first)
	}
}

// checkInOrder checks that recs hold, per partition, exactly the offsets
// [from[p], to[p]) once each, in order, with the values produceRange wrote.
func checkInOrder(t *testing.T, recs []consumer.Record, from, to map[int32]int64) {
	t.Helper()
	next := map[int32]int64{}
	for p, o := range from {
		next[p] = o
	}
	for _, r := range recs {
		n, ok := next[r.Partition]
		if !ok {
			t.Fatalf("record of unexpected partition %d (offset %d)", r.Partition, r.Offset)
		}
		if r.Offset != n {
			t.Fatalf("partition %d: offset %d, want %d (lost or duplicated)", r.Partition, r.Offset, n)
		}
		if want := value(r.Partition, r.Offset); string(r.Value) != want {
			t.Fatalf("partition %d offset %d: value %q, want %q", r.Partition, r.Offset, r.Value, want)
		}
		next[r.Partition] = n + 1
	}
	for p, end := range to {
		if next[p] != end {
			t.Fatalf("partition %d consumed to %d, want %d", p, next[p], end)
		}
	}
}

// fetchSeen is one Fetch request as a broker received it.
type fetchSeen struct {
	node         int32
	version      int16
	sessionID    int32
	sessionEpoch int32
	isolation    int8
	rack         string
	named        map[int32]kmsg.FetchRequestTopicPartition // partitions of topic `topic`
	forgotten    []int32
}

// fetchLog records every Fetch request the cluster receives, without
// answering any.
type fetchLog struct {
	mu   sync.Mutex
	reqs []fetchSeen
}

// observeFetches installs the observer. Install it before any control that
// answers Fetch requests, so that it sees those too.
func observeFetches(c *kfake.Cluster) *fetchLog {
	l := &fetchLog{}
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		s := fetchSeen{
			node: c.CurrentNode(), version: req.Version, sessionID: req.SessionID, sessionEpoch: req.SessionEpoch,
			isolation: req.IsolationLevel, rack: req.Rack, named: map[int32]kmsg.FetchRequestTopicPartition{},
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				s.named[rp.Partition] = rp
			}
		}
		for _, ft := range req.ForgottenTopics {
			s.forgotten = append(s.forgotten, ft.Partitions...)
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, s)
		l.mu.Unlock()
		return nil, nil, false
	})
	return l
}

func (l *fetchLog) all() []fetchSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

func (l *fetchLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// fetchedSince returns the requests from index i on, each with named
// replaced by the partitions the broker fetches for it: those the request
// names and, for an incremental request, those its session holds from
// earlier requests to that node, with the parameters they were last named
// with (KIP-227: an unchanged partition is left out, not dropped).
func (l *fetchLog) fetchedSince(i int) []fetchSeen {
	all := l.all()
	held := map[int32]map[int32]kmsg.FetchRequestTopicPartition{} // node → partition → parameters
	for j, r := range all {
		cur := held[r.node]
		if r.sessionEpoch <= 0 || cur == nil {
			cur = map[int32]kmsg.FetchRequestTopicPartition{}
			held[r.node] = cur
		}
		for _, p := range r.forgotten {
			delete(cur, p)
		}
		maps.Copy(cur, r.named)
		all[j].named = maps.Clone(cur)
	}
	return all[i:]
}

// nodesOf records the node of every request of one key the cluster
// receives, in order.
func nodesOf(c *kfake.Cluster, key kmsg.Key) func() []int32 {
	var (
		mu    sync.Mutex
		nodes []int32
	)
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		n := c.CurrentNode()
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil, nil, false
	})
	return func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(nodes)
	}
}

// countRequests counts requests of one key the cluster receives.
func countRequests(c *kfake.Cluster, key kmsg.Key) func() int {
	var (
		mu sync.Mutex
		n  int
	)
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		n++
		mu.Unlock()
		return nil, nil, false
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

func assignAll(t *testing.T, cons *consumer.Consumer, partitions int32, start consumer.Start) {
	t.Helper()
	var as []consumer.Assignment
	for p := int32(0); p < partitions; p++ {
		as = append(as, consumer.Assignment{Topic: topic, Partition: p, Start: start})
	}
	if err := cons.Assign(as...); err != nil {
		t.Fatal(err)
	}
}

// expectQuiet polls for d and fails on any record, event or error.
func expectQuiet(t *testing.T, cons *consumer.Consumer, d time.Duration) {
	t.Helper()
	recs, evs, errs := pollUntil(t, cons, 1, d)
	if len(recs)+len(evs)+len(errs) > 0 {
		t.Fatalf("expected nothing, got %d records (first %+v), events %v, errors %v", len(recs), first(recs), evs, errs)
	}
}

func first(recs []consumer.Record) any {
	if len(recs) == 0 {
		return nil
	}
	return recs[0]
}

// waitFor polls cond every 5ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// produceOneBatch writes records [from, to) to partition as one record
// batch compressed with codec, values value(p, i), with a raw Produce to the
// partition's leader: the batch is compressed whatever its size (kgo sends
// a batch that compression does not shrink uncompressed, and how it splits
// records into batches depends on timing).
func produceOneBatch(t *testing.T, c *kfake.Cluster, partition int32, from, to int64, codec compress.Codec) {
	t.Helper()
	b := batch.NewBuilder(nil)
	spec := batch.DefaultSpec()
	spec.Codec = codec
	b.Reset(spec)
	now := time.Now().UnixMilli()
	for i := from; i < to; i++ {
		if err := b.Append(now, nil, []byte(value(partition, i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rp, err := wire.Produce(ctx, cl.Broker(int(c.LeaderFor(topic, partition))), topic, c.TopicInfo(topic).TopicID, partition, enc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil || rp.BaseOffset != from {
		t.Fatalf("Produce: base offset %d, error %v; want base offset %d", rp.BaseOffset, err, from)
	}
}
