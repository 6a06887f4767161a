package producer_test

// Shared helpers of the producer's component tests on kfake: a recorder for
// outcomes and lost-write reports, produce-and-wait, and an exact log oracle
// (kgo's consumer reads a partition up to its high watermark, so duplicates
// and gaps show).

import (
	"context"
	"fmt"
	"runtime"
	"slices"
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

// recorder collects what the producer tells the application besides the
// delivery reports.
type recorder struct {
	mu       sync.Mutex
	outcomes []producer.Outcome
	lost     []producer.AckedWritesLost
}

func (r *recorder) opts() []producer.Opt {
	return []producer.Opt{
		producer.OnOutcome(func(o producer.Outcome) {
			r.mu.Lock()
			r.outcomes = append(r.outcomes, o)
			r.mu.Unlock()
		}),
		producer.OnAckedWritesLost(func(l producer.AckedWritesLost) {
			r.mu.Lock()
			r.lost = append(r.lost, l)
			r.mu.Unlock()
		}),
	}
}

func (r *recorder) Outcomes() []producer.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

func (r *recorder) Lost() []producer.AckedWritesLost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

// newRecorded is newProducer with a recorder attached.
func newRecorded(t *testing.T, c *kfake.Cluster, opts ...producer.Opt) (*producer.Producer, *recorder) {
	t.Helper()
	r := &recorder{}
	return newProducer(t, c, append(r.opts(), opts...)...), r
}

// kinds names the outcome types, for compact assertions.
func kinds(os []producer.Outcome) string {
	var b []string
	for _, o := range os {
		switch o.(type) {
		case producer.ProvenGap:
			b = append(b, "ProvenGap")
		case producer.PossibleGap:
			b = append(b, "PossibleGap")
		case producer.ResequencedNoLoss:
			b = append(b, "ResequencedNoLoss")
		case producer.PossibleDuplicate:
			b = append(b, "PossibleDuplicate")
		case producer.Failed:
			b = append(b, "Failed")
		default:
			b = append(b, fmt.Sprintf("%T", o))
		}
	}
	return strings.Join(b, ",")
}

// wantNoRecovery fails the test if the producer bumped its identity or
// reported an outcome.
func wantNoRecovery(t *testing.T, p *producer.Producer, rec *recorder) {
	t.Helper()
	if p.Bumps() != 0 || len(rec.Outcomes()) != 0 {
		t.Fatalf("%d bumps, outcomes %s", p.Bumps(), kinds(rec.Outcomes()))
	}
}

// wantOneEpochBump fails the test unless the producer's identity is before
// with the epoch bumped once, and returns that identity.
func wantOneEpochBump(t *testing.T, p *producer.Producer, before producer.ProducerID) producer.ProducerID {
	t.Helper()
	after := p.ProducerID()
	if after != (producer.ProducerID{ID: before.ID, Epoch: before.Epoch + 1}) || p.Bumps() != 1 {
		t.Fatalf("identity %v → %v, %d bumps; want one epoch bump", before, after, p.Bumps())
	}
	return after
}

// wantNoLost lets a pending acked-write check's answer be applied, then
// fails the test if acknowledged writes were reported lost.
func wantNoLost(t *testing.T, rec *recorder) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if l := rec.Lost(); len(l) != 0 {
		t.Fatalf("acknowledged writes reported lost: %+v", l)
	}
}

func prec(part int32, v string) *producer.Record {
	return &producer.Record{Topic: topic, Partition: part, ExplicitPartition: true, Value: []byte(v)}
}

func precs(part int32, prefix string, from, to int) []*producer.Record {
	var rs []*producer.Record
	for i := from; i < to; i++ {
		rs = append(rs, prec(part, fmt.Sprintf("%s%d", prefix, i)))
	}
	return rs
}

func vals(prefix string, from, to int) []string {
	var vs []string
	for i := from; i < to; i++ {
		vs = append(vs, fmt.Sprintf("%s%d", prefix, i))
	}
	return vs
}

// pending is the delivery reports of records produced with sendAsync.
type pendingResults struct {
	t       *testing.T
	mu      sync.Mutex
	results []producer.Result
	done    []bool
	n       int
	all     chan struct{}
}

// sendAsync produces rs (failing the test if Produce refuses one) and
// returns their future reports.
func sendAsync(t *testing.T, ctx context.Context, p *producer.Producer, rs ...*producer.Record) *pendingResults {
	t.Helper()
	pr := &pendingResults{t: t, results: make([]producer.Result, len(rs)), done: make([]bool, len(rs)), all: make(chan struct{})}
	if len(rs) == 0 {
		close(pr.all)
	}
	for i, r := range rs {
		if err := p.Produce(ctx, r, func(res producer.Result) {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			if pr.done[i] {
				t.Errorf("record %s reported twice", res.Record.Value)
				return
			}
			pr.done[i] = true
			pr.results[i] = res
			pr.n++
			if pr.n == len(rs) {
				close(pr.all)
			}
		}); err != nil {
			t.Fatalf("Produce %s: %v", r.Value, err)
		}
	}
	return pr
}

// wait returns the reports once all arrived, failing the test after d.
func (pr *pendingResults) wait(d time.Duration) []producer.Result {
	pr.t.Helper()
	select {
	case <-pr.all:
	case <-time.After(d):
		pr.mu.Lock()
		n := pr.n
		pr.mu.Unlock()
		pr.t.Fatalf("%d of %d delivery reports after %v", n, len(pr.results), d)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return slices.Clone(pr.results)
}

// sendAll produces rs, flushes, and returns every report.
func sendAll(t *testing.T, ctx context.Context, p *producer.Producer, rs ...*producer.Record) []producer.Result {
	t.Helper()
	pr := sendAsync(t, ctx, p, rs...)
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return pr.wait(5 * time.Second)
}

// mustOK fails the test unless every report is an acknowledgement.
func mustOK(t *testing.T, res []producer.Result) {
	t.Helper()
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("record %s: %v", r.Record.Value, r.Err)
		}
		if r.Offset < 0 {
			t.Fatalf("record %s acknowledged without an offset", r.Record.Value)
		}
	}
}

func oracle(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// endOffset is the partition's high watermark (or, committed, its last
// stable offset).
func endOffset(t *testing.T, c *kfake.Cluster, part int32, committed bool) int64 {
	t.Helper()
	cl := oracle(t, c)
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = part
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatal("ListOffsets: no answer")
	}
	ans := resp.Topics[0].Partitions[0]
	if ans.ErrorCode != 0 {
		t.Fatalf("ListOffsets: code %d", ans.ErrorCode)
	}
	return ans.Offset
}

// partitionLog reads partition part from offset 0 to its high watermark
// (every record, read_uncommitted). Control records of transactions take
// offsets without being returned, so for transactional logs use
// committedValues.
func partitionLog(t *testing.T, c *kfake.Cluster, part int32) []*kgo.Record {
	t.Helper()
	end := endOffset(t, c, part, false)
	if end == 0 {
		return nil
	}
	cl := oracle(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().AtStart()}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) == 0 || out[len(out)-1].Offset < end-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("partition %d: read %d records, high watermark %d", part, len(out), end)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func values(rs []*kgo.Record) []string {
	var vs []string
	for _, r := range rs {
		vs = append(vs, string(r.Value))
	}
	return vs
}

// wantLog fails the test unless partition part holds exactly want, in
// order, and returns its records.
func wantLog(t *testing.T, c *kfake.Cluster, part int32, want []string) []*kgo.Record {
	t.Helper()
	got := partitionLog(t, c, part)
	if !slices.Equal(values(got), want) {
		t.Fatalf("partition %d log:\n got %q\nwant %q", part, values(got), want)
	}
	return got
}

// committedValues reads the whole topic with read_committed: until it has
// at least want records (or 5 s pass), then until nothing more comes for a
// while, so that records beyond want (aborted ones leaking, duplicates)
// show.
func committedValues(t *testing.T, c *kfake.Cluster, want int) []string {
	t.Helper()
	cl := oracle(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	var vs []string
	deadline := time.Now().Add(5 * time.Second)
	for len(vs) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { vs = append(vs, string(r.Value)) })
		cancel()
	}
	for idle := 0; idle < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		n := 0
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { vs = append(vs, string(r.Value)); n++ })
		cancel()
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return vs
}

// wantCommitted fails the test unless read_committed sees exactly want, in
// order.
func wantCommitted(t *testing.T, c *kfake.Cluster, want ...string) {
	t.Helper()
	if got := committedValues(t, c, len(want)); !slices.Equal(got, want) {
		t.Fatalf("read_committed sees %q", got)
	}
}

// wantCommittedAnyOrder fails the test unless read_committed sees exactly
// want, in any order.
func wantCommittedAnyOrder(t *testing.T, c *kfake.Cluster, want ...string) {
	t.Helper()
	got := committedValues(t, c, len(want))
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed sees %q, want %q", got, want)
	}
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// producerGoroutines lists goroutines running kepoch producer or metadata
// code (the test's own goroutines excepted).
func producerGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kepoch/kepoch/producer_test.") || strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "kepoch/kepoch/producer.") {
			continue
		}
		if strings.Contains(g, "kepoch/kepoch/producer.") || strings.Contains(g, "kepoch/kepoch/metadata.") {
			out = append(out, g)
		}
	}
	return out
}

// noLeak fails the test if producer goroutines remain (after a grace period
// for goroutines that are returning).
func noLeak(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		gs := producerGoroutines()
		if len(gs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d producer goroutines left after Close:\n%s", len(gs), strings.Join(gs, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// produceRequests records, for every Produce request the cluster receives
// for partition part of topic, the (producer ID, epoch, base sequence,
// records) of its batch. It never answers a request.
type produceLog struct {
	mu   sync.Mutex
	seen []batchID
}

type batchID struct {
	PID     int64
	Epoch   int16
	Seq     int32
	Records int32
}

func (l *produceLog) batches() []batchID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// batchOf returns the batch header of partition part in a Produce request.
func batchOf(req *kmsg.ProduceRequest, part int32) (kmsg.RecordBatch, bool) {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition != part {
				continue
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(rp.Records); err != nil {
				return b, false
			}
			return b, true
		}
	}
	return kmsg.RecordBatch{}, false
}

func watchProduce(c *kfake.Cluster, part int32) *produceLog {
	l := &produceLog{}
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if b, ok := batchOf(kr.(*kmsg.ProduceRequest), part); ok {
			l.mu.Lock()
			l.seen = append(l.seen, batchID{b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.NumRecords})
			l.mu.Unlock()
		}
		return nil, nil, false
	})
	return l
}

// answerProduce builds a Produce response that answers code (with log
// start offset logStart) for the listed partitions (every partition if none
// is listed) and NOT_LEADER_OR_FOLLOWER, a refusal before appending, for
// the others: a test that answers a request itself never acknowledges
// anything.
func answerProduce(req *kmsg.ProduceRequest, code int16, logStart int64, parts ...int32) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			sp.ErrorCode = kerr.NotLeaderForPartition.Code
			if len(parts) == 0 || slices.Contains(parts, rp.Partition) {
				sp.ErrorCode = code
				sp.LogStartOffset = logStart
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// answerProduceOnce makes the cluster answer the next Produce request itself,
// with answerProduce(code, logStart, parts...).
func answerProduceOnce(c *kfake.Cluster, code int16, logStart int64, parts ...int32) {
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		return answerProduce(kr.(*kmsg.ProduceRequest), code, logStart, parts...), nil, true
	})
}

// observe counts the requests of key the cluster handles.
func observe(c *kfake.Cluster, key kmsg.Key) *kfake.FaultHandle {
	return c.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Observe: true, Count: -1})
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceFault answers the next Produce of partition part with code (kfake
// refuses the batch, or appends it first for the codes a broker may answer
// after appending).
func produceFault(part int32, code *kerr.Error) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{part}, Err: code}
}

// kfakeOOOSN refuses the next Produce of partition part with
// OUT_OF_ORDER_SEQUENCE_NUMBER.
func kfakeOOOSN(part int32) kfake.Fault {
	return produceFault(part, kerr.OutOfOrderSequenceNumber)
}
