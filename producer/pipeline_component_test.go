package producer_test

// Component tests of pipelining on kfake: many partitions over three
// brokers, up to MaxInFlight requests per broker, random faults and leader
// moves; the acks=1 and acks=0 (non-idempotent) paths.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// inflightHook measures the most Produce requests written to one broker
// and not yet answered.
type inflightHook struct {
	mu  sync.Mutex
	cur map[int32]int
	max int
}

func (h *inflightHook) OnBrokerWrite(m kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != 0 || err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		h.cur = map[int32]int{}
	}
	h.cur[m.NodeID]++
	h.max = max(h.max, h.cur[m.NodeID])
}

func (h *inflightHook) OnBrokerRead(m kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key != 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur[m.NodeID] > 0 {
		h.cur[m.NodeID]--
	}
}

// keyedRecords makes n records over keys keys; each value is "key-counter",
// the counter counting that key's records.
func keyedRecords(n, keys int) []*producer.Record {
	next := make([]int, keys)
	var rs []*producer.Record
	for i := range n {
		k := i % keys
		rs = append(rs, &producer.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", k)), Value: fmt.Appendf(nil, "k%d-%d", k, next[k])})
		next[k]++
	}
	return rs
}

// checkKeyedLogs reads every partition and checks that each key's records
// are all there, once, in order, in the partition KeyPartition names.
func checkKeyedLogs(t *testing.T, c *kfake.Cluster, parts int32, rs []*producer.Record, res []producer.Result) {
	t.Helper()
	want := map[string]int{}
	for _, r := range rs {
		want[string(r.Key)]++
	}
	next := map[string]int{}
	total := 0
	reported := map[string]producer.Result{}
	for _, r := range res {
		reported[string(r.Record.Value)] = r
	}
	for part := range parts {
		for _, r := range partitionLog(t, c, part) {
			total++
			if kp := producer.KeyPartition(r.Key, parts); kp != part {
				t.Fatalf("key %s in partition %d, want %d", r.Key, part, kp)
			}
			if wantV := fmt.Sprintf("%s-%d", r.Key, next[string(r.Key)]); string(r.Value) != wantV {
				t.Fatalf("partition %d offset %d: %s, want %s (reordered, duplicated or lost)", part, r.Offset, r.Value, wantV)
			}
			next[string(r.Key)]++
			if rep := reported[string(r.Value)]; rep.Offset >= 0 && (rep.Offset != r.Offset || rep.Partition != part) {
				t.Fatalf("%s reported at %d/%d, in the log at %d/%d", r.Value, rep.Partition, rep.Offset, part, r.Offset)
			}
		}
	}
	for k, n := range want {
		if next[k] != n {
			t.Fatalf("key %s: %d records in the log, produced %d", k, next[k], n)
		}
	}
	if total != len(rs) {
		t.Fatalf("%d records in the log, produced %d", total, len(rs))
	}
}

// Many partitions, many records, up to 5 requests in flight per broker,
// random refusals and after-append timeouts, and leader moves: every record
// once, in order per key, no bump, reports matching the log.
func TestPipelinedManyPartitionsWithFaults(t *testing.T) {
	const parts = 12
	c := newCluster(t, parts)
	hook := &inflightHook{}
	p, rec := newRecorded(t, c, producer.MaxInFlight(5), producer.BatchMaxBytes(1024),
		producer.TransportOpts(kgo.WithHooks(hook)))
	ctx := testCtx(t, 25*time.Second)
	pick := func(pct int) func(kmsg.Request) bool {
		return func(kmsg.Request) bool { return rand.IntN(100) < pct }
	}
	faults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1, When: pick(8)},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: -1, When: pick(5)})
	requests := observe(c, kmsg.Produce)
	rs := keyedRecords(6000, 97)
	order := &callbackOrder{t: t}
	pr := order.sendAsync(ctx, p, rs[:3000]...)
	for i := int32(0); i < 3; i++ {
		if err := c.MoveTopicPartition(topic, i, (c.LeaderFor(topic, i)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	pr2 := order.sendAsync(ctx, p, rs[3000:]...)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res := append(pr.wait(10*time.Second), pr2.wait(10*time.Second)...)
	mustOK(t, res)
	if p.Bumps() != 0 || len(rec.Outcomes()) != 0 {
		for _, o := range rec.Outcomes() {
			t.Logf("%#v", o)
		}
		t.Fatalf("%d bumps, outcomes %s", p.Bumps(), kinds(rec.Outcomes()))
	}
	// The leader moves were checked against the ack ledger: nothing lost.
	if l := rec.Lost(); len(l) != 0 {
		t.Fatalf("acknowledged writes reported lost after clean leader moves: %+v", l)
	}
	hook.mu.Lock()
	maxInFlight := hook.max
	hook.mu.Unlock()
	t.Logf("%d produce requests, %d faulted, at most %d in flight to one broker", requests.Hits(), faults.Hits(), maxInFlight)
	if faults.Hits() < 5 {
		t.Fatalf("only %d faults injected", faults.Hits())
	}
	if maxInFlight < 2 || maxInFlight > 5 {
		t.Fatalf("at most %d produce requests in flight to one broker; want pipelining up to 5", maxInFlight)
	}
	checkKeyedLogs(t, c, parts, rs, res)
}

// acks=1 without idempotence: one request per broker at a time, retried
// after refusals, order kept, offsets reported.
func TestAcksLeaderKeepsOrderUnderRefusals(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts)
	p, _ := newRecorded(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence(), producer.BatchMaxBytes(1024))
	ctx := testCtx(t, 20*time.Second)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1,
		When: func(kmsg.Request) bool { return rand.IntN(100) < 10 }})
	rs := keyedRecords(2000, 31)
	res := sendAll(t, ctx, p, rs...)
	mustOK(t, res)
	if p.ProducerID().Valid() {
		t.Fatalf("non-idempotent producer has identity %v", p.ProducerID())
	}
	checkKeyedLogs(t, c, parts, rs, res)
}

// acks=0: nothing is answered; every record is reported without an offset
// and lands once.
func TestAcksNone(t *testing.T) {
	const parts = 3
	c := newCluster(t, parts)
	p, _ := newRecorded(t, c, producer.RequiredAcks(producer.AcksNone), producer.DisableIdempotence(), producer.BatchMaxBytes(1024))
	ctx := testCtx(t, 20*time.Second)
	rs := keyedRecords(1500, 23)
	res := sendAll(t, ctx, p, rs...)
	for _, r := range res {
		if r.Err != nil || r.Offset != -1 {
			t.Fatalf("report %+v", r)
		}
	}
	eventually(t, 5*time.Second, "records still arriving", func() bool {
		n := int64(0)
		for part := range int32(parts) {
			n += endOffset(t, c, part, false)
		}
		return n == int64(len(rs))
	})
	checkKeyedLogs(t, c, parts, rs, res)
}

// callbackOrder checks the delivery-report contract: per partition, reports
// come one at a time (never two callbacks of a partition at once) and in
// offset order.
type callbackOrder struct {
	t    *testing.T
	mu   sync.Mutex
	busy map[int32]bool
	last map[int32]int64
}

func (o *callbackOrder) sendAsync(ctx context.Context, p *producer.Producer, rs ...*producer.Record) *pendingResults {
	o.t.Helper()
	pr := &pendingResults{t: o.t, results: make([]producer.Result, len(rs)), done: make([]bool, len(rs)), all: make(chan struct{})}
	for i, r := range rs {
		if err := p.Produce(ctx, r, func(res producer.Result) {
			o.mu.Lock()
			if o.busy == nil {
				o.busy, o.last = map[int32]bool{}, map[int32]int64{}
			}
			if o.busy[res.Partition] {
				o.t.Errorf("two callbacks of partition %d at once", res.Partition)
			}
			if last, ok := o.last[res.Partition]; ok && res.Err == nil && res.Offset <= last {
				o.t.Errorf("partition %d: report for offset %d after offset %d", res.Partition, res.Offset, last)
			}
			if res.Err == nil {
				o.last[res.Partition] = res.Offset
			}
			o.busy[res.Partition] = true
			o.mu.Unlock()
			time.Sleep(time.Microsecond)
			o.mu.Lock()
			o.busy[res.Partition] = false
			o.mu.Unlock()

			pr.mu.Lock()
			defer pr.mu.Unlock()
			pr.results[i] = res
			pr.n++
			if pr.n == len(rs) {
				close(pr.all)
			}
		}); err != nil {
			o.t.Fatalf("Produce: %v", err)
		}
	}
	return pr
}

// requestSizeHook records the largest Produce request written.
type requestSizeHook struct {
	mu  sync.Mutex
	max int
}

func (h *requestSizeHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key != 0 || err != nil {
		return
	}
	h.mu.Lock()
	h.max = max(h.max, n)
	h.mu.Unlock()
}

func (h *requestSizeHook) Max() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// A Produce request stays within MaxRequestBytes however many partitions of
// its broker have a batch ready (a broker closes the connection on one
// above its socket.request.max.bytes, and the same request would be resent
// until the delivery timeout); the batches left out go in the next
// requests, and every record is written once, in order.
func TestRequestBytesBounded(t *testing.T) {
	const parts = 12
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const batch, limit = 4 << 10, 10 << 10
	hook := &requestSizeHook{}
	// One request in flight: while it is, every partition's batches wait,
	// and the next request could take one of each (12 × 4 KiB).
	p := newProducer(t, c, producer.BatchMaxBytes(batch), producer.MaxRequestBytes(limit), producer.MaxInFlight(1),
		producer.TransportOpts(kgo.WithHooks(hook)))
	ctx := testCtx(t, 20*time.Second)
	var rs []*producer.Record
	for n := range 400 {
		for part := range int32(parts) {
			rs = append(rs, &producer.Record{Topic: topic, Partition: part, ExplicitPartition: true, Value: fmt.Appendf(nil, "p%d-%04d-%s", part, n, make([]byte, 80))})
		}
	}
	res, err := p.ProduceSync(ctx, rs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%.8s: %v", r.Record.Value, r.Err)
		}
	}
	// The request's own framing (header, topic, each partition's fields)
	// comes on top of the batches.
	if got := hook.Max(); got > limit+512 {
		t.Errorf("largest Produce request %d bytes, MaxRequestBytes %d", got, limit)
	}
	for part := range int32(parts) {
		log := partitionLog(t, c, part)
		if len(log) != 400 {
			t.Fatalf("partition %d: %d records, want 400", part, len(log))
		}
		for i, r := range log {
			if want := fmt.Sprintf("p%d-%04d-", part, i); string(r.Value[:len(want)]) != want {
				t.Fatalf("partition %d offset %d: %.10s, want %s", part, i, r.Value, want)
			}
		}
	}
}

// MaxRequestBytes below BatchMaxBytes is refused.
func TestMaxRequestBytesBelowBatch(t *testing.T) {
	_, err := producer.New(producer.SeedBrokers("127.0.0.1:1"), producer.BatchMaxBytes(64<<10), producer.MaxRequestBytes(32<<10))
	if err == nil || !strings.Contains(err.Error(), "MaxRequestBytes") {
		t.Fatalf("New: %v, want MaxRequestBytes refused", err)
	}
}
