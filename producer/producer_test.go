package producer_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/producer"
)

const topic = "t"

func newCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newProducer(t *testing.T, c *kfake.Cluster, opts ...producer.Opt) *producer.Producer {
	t.Helper()
	opts = append([]producer.Opt{producer.SeedBrokers(c.ListenAddrs()...), producer.RetryBackoff(10 * time.Millisecond)}, opts...)
	p, err := producer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

// readAll reads every record of the topic with kgo's consumer (an oracle).
func readAll(t *testing.T, c *kfake.Cluster, partitions int32, want int) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[int32][]*kgo.Record{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", n, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			n++
		})
	}
	return out
}

func TestProduceKeyedAcrossPartitions(t *testing.T) {
	for _, codec := range []compress.Codec{compress.None, compress.Zstd, compress.LZ4} {
		t.Run(codec.String(), func(t *testing.T) {
			c := newCluster(t, 3)
			p := newProducer(t, c, producer.Compression(codec))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 600
			var mu sync.Mutex
			results := map[string]producer.Result{}
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				r := &producer.Record{Topic: topic, Key: []byte(fmt.Sprintf("k%d", i%17)), Value: []byte(fmt.Sprintf("v%d", i))}
				if err := p.Produce(ctx, r, func(res producer.Result) {
					mu.Lock()
					results[string(res.Record.Value)] = res
					mu.Unlock()
					wg.Done()
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			got := readAll(t, c, 3, n)
			total := 0
			for part, rs := range got {
				lastByKey := map[string]int{}
				for _, r := range rs {
					total++
					res, ok := results[string(r.Value)]
					if !ok || res.Err != nil {
						t.Fatalf("record %s: report %+v", r.Value, res)
					}
					if res.Partition != part || res.Offset != r.Offset {
						t.Fatalf("record %s reported at %d/%d, read at %d/%d", r.Value, res.Partition, res.Offset, part, r.Offset)
					}
					if want := producer.KeyPartition(r.Key, 3); want != part {
						t.Fatalf("key %s in partition %d, want %d", r.Key, part, want)
					}
					var i int
					fmt.Sscanf(string(r.Value), "v%d", &i)
					if prev, ok := lastByKey[string(r.Key)]; ok && prev > i {
						t.Fatalf("key %s: v%d after v%d: reordered", r.Key, i, prev)
					}
					lastByKey[string(r.Key)] = i
					if r.ProducerID != p.ProducerID().ID {
						t.Fatalf("record written by producer %d, ours is %v", r.ProducerID, p.ProducerID())
					}
				}
			}
			if total != n {
				t.Fatalf("read %d records, produced %d", total, n)
			}
		})
	}
}

func TestKeyPartitionMatchesJavaAndKgo(t *testing.T) {
	// Values of Java's Utils.murmur2 (Kafka's UtilsTest).
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		n := int32(1 << 30)
		if got, w := producer.KeyPartition([]byte(key), n), (want&0x7fffffff)%n; got != w {
			t.Errorf("KeyPartition(%q) = %d, want %d", key, got, w)
		}
	}
	kp := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	for i := 0; i < 1000; i++ {
		key := []byte(fmt.Sprintf("key-%d-%x", i, i*7919))
		for _, n := range []int{1, 3, 7, 100} {
			if got, want := producer.KeyPartition(key, int32(n)), kp.Partition(&kgo.Record{Key: key}, n); int(got) != want {
				t.Fatalf("KeyPartition(%q, %d) = %d, kgo says %d", key, n, got, want)
			}
		}
	}
}

// TestUnknownProducerIDBumpsAndReports injects UNKNOWN_PRODUCER_ID (the
// broker forgot the producer) on one produce: the producer bumps its epoch,
// resends the batch under the new identity, reports the outcome, and every
// record is written exactly once.
func TestUnknownProducerIDBumpsAndReports(t *testing.T) {
	c := newCluster(t, 1)
	var mu sync.Mutex
	var outcomes []producer.Outcome
	var lost []producer.AckedWritesLost
	p := newProducer(t, c, producer.OnOutcome(func(o producer.Outcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}), producer.OnAckedWritesLost(func(l producer.AckedWritesLost) {
		mu.Lock()
		lost = append(lost, l)
		mu.Unlock()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := func(i int) *producer.Record {
		return &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(fmt.Sprintf("v%d", i))}
	}
	if _, err := p.ProduceSync(ctx, rec(0), rec(1)); err != nil {
		t.Fatal(err)
	}
	before := p.ProducerID()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.UnknownProducerID, Count: 1})
	res, err := p.ProduceSync(ctx, rec(2), rec(3))
	if err != nil {
		t.Fatal(err)
	}
	after := p.ProducerID()
	if after.ID != before.ID || after.Epoch != before.Epoch+1 || p.Bumps() != 1 {
		t.Fatalf("identity %v → %v after UNKNOWN_PRODUCER_ID, %d bumps; want one epoch bump", before, after, p.Bumps())
	}
	if _, ok := res[0].Recovery.(producer.ResequencedNoLoss); !ok {
		t.Fatalf("recovery outcome %#v; want ResequencedNoLoss", res[0].Recovery)
	}
	// The fault's answer carries no log start offset, so the producer
	// cannot rule out that acknowledged writes are gone: it says so
	// (PossibleGap), checks its ack ledger against the leader, and finds
	// nothing lost.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if len(outcomes) != 2 {
		t.Fatalf("outcomes %v; want a PossibleGap and a ResequencedNoLoss", outcomes)
	}
	if _, ok := outcomes[0].(producer.PossibleGap); !ok {
		t.Fatalf("first outcome %#v; want PossibleGap", outcomes[0])
	}
	if _, ok := outcomes[1].(producer.ResequencedNoLoss); !ok {
		t.Fatalf("second outcome %#v; want ResequencedNoLoss", outcomes[1])
	}
	if len(lost) != 0 {
		t.Fatalf("acked writes reported lost: %v", lost)
	}
	mu.Unlock()
	got := readAll(t, c, 1, 4)[0]
	for i, r := range got {
		if string(r.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("log %d = %s", i, r.Value)
		}
	}
	if len(got) != 4 {
		t.Fatalf("log has %d records, want 4", len(got))
	}
}

func TestRetriableErrorsKeepOrderWithoutBump(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 3})
	var rs []*producer.Record
	for i := 0; i < 50; i++ {
		rs = append(rs, &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if _, err := p.ProduceSync(ctx, rs...); err != nil {
		t.Fatal(err)
	}
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps for NOT_LEADER_OR_FOLLOWER", p.Bumps())
	}
	got := readAll(t, c, 1, 50)[0]
	for i, r := range got {
		if string(r.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("log %d = %s: reordered or duplicated", i, r.Value)
		}
	}
}

func TestNonRetriableFailsWithTypedError(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: 1})
	_, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("x")})
	var pe *errors.PartitionError
	if !errors.As(err, &pe) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("error %v; want a PartitionError wrapping TOPIC_AUTHORIZATION_FAILED", err)
	}
}

func TestAcksLeaderNonIdempotent(t *testing.T) {
	c := newCluster(t, 2)
	p := newProducer(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rs []*producer.Record
	for i := 0; i < 100; i++ {
		rs = append(rs, &producer.Record{Topic: topic, Value: []byte(fmt.Sprint(i))})
	}
	res, err := p.ProduceSync(ctx, rs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Offset < 0 {
			t.Fatalf("no offset: %+v", r)
		}
	}
	if p.ProducerID().Valid() {
		t.Fatal("non-idempotent producer has a producer ID")
	}
	got := readAll(t, c, 2, 100)
	if len(got[0])+len(got[1]) != 100 {
		t.Fatalf("read %d", len(got[0])+len(got[1]))
	}
}

func TestMisuse(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Produce(ctx, &producer.Record{}, nil); !errors.Is(err, errors.ErrInvalidArgument) {
		t.Errorf("record without topic: %v; want ErrInvalidArgument", err)
	}
	if err := p.Produce(ctx, &producer.Record{Topic: topic, Partition: 9, ExplicitPartition: true}, nil); err == nil {
		t.Error("record for a missing partition accepted")
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(ctx, &producer.Record{Topic: topic}, nil); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Produce after Close: %v", err)
	}
}

func TestTransactionsCommitAndAbort(t *testing.T) {
	c := newCluster(t, 2)
	p := newProducer(t, c, producer.TransactionalID("txn-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	txn := func(prefix string, n int, commit bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			r := &producer.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s%d", prefix, i))}
			if err := p.Produce(ctx, r, func(res producer.Result) {
				if commit && res.Err != nil {
					t.Errorf("%s: %v", res.Record.Value, res.Err)
				}
				wg.Done()
			}); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if commit {
			err = p.CommitTransaction(ctx)
		} else {
			// Flush first, so the aborted records are in the log and
			// read_committed must filter them out.
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			err = p.AbortTransaction(ctx)
		}
		if err != nil {
			t.Fatalf("end of transaction %s (commit %v): %v", prefix, commit, err)
		}
		wg.Wait()
	}
	txn("a", 10, true)
	txn("b", 5, false)
	txn("c", 3, true)
	if err := p.Produce(ctx, &producer.Record{Topic: topic, Value: []byte("outside")}, nil); !errors.Is(err, producer.ErrTxnState) {
		t.Fatalf("produce outside a transaction: %v", err)
	}
	read := func(committed bool) []string {
		opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
		if committed {
			opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var vs []string
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		for rctx.Err() == nil {
			cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) { vs = append(vs, string(r.Value)) })
		}
		return vs
	}
	if got := read(true); len(got) != 13 {
		t.Fatalf("read_committed sees %d records %v; want the 13 committed", len(got), got)
	}
	if got := read(false); len(got) != 18 {
		t.Fatalf("read_uncommitted sees %d records; want 18", len(got))
	}
}

func TestSendOffsetsToTransaction(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.TransactionalID("txn-offsets"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	fetchCommitted := func() (int64, int32, bool) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "g"
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = topic
		rt.Partitions = []int32{0}
		req.Topics = append(req.Topics, rt)
		req.RequireStable = true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range resp.Topics {
			for _, pp := range tt.Partitions {
				if pp.Offset >= 0 {
					return pp.Offset, pp.LeaderEpoch, true
				}
			}
		}
		return -1, -1, false
	}
	round := func(offset int64, commit bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("out")}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: "g", GenerationID: -1},
			map[string]map[int32]producer.OffsetAndEpoch{topic: {0: {Offset: offset, LeaderEpoch: 3}}}); err != nil {
			t.Fatal(err)
		}
		var err error
		if commit {
			err = p.CommitTransaction(ctx)
		} else {
			err = p.AbortTransaction(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	round(42, true)
	if o, e, ok := fetchCommitted(); !ok || o != 42 || e != 3 {
		t.Fatalf("committed %d@%d (%v); want 42@3", o, e, ok)
	}
	round(50, false)
	if o, _, _ := fetchCommitted(); o != 42 {
		t.Fatalf("aborted offsets became visible: %d", o)
	}
}

// TestProduceFollowsPartitionGrowth: a record for a partition the
// producer's metadata does not have waits, for MetadataWait at most, for a
// refresh to show it (as the Java client waits up to max.block.ms), and
// fails with ErrMetadataTimeout and "no such partition" if none does.
// Partitions added to the topic after the producer cached its count
// (CreatePartitions) are then used at once, with no periodic refresh to
// wait for, by explicit and keyed records alike.
func TestProduceFollowsPartitionGrowth(t *testing.T) {
	c := newCluster(t, 1)
	const wait = 300 * time.Millisecond
	p := newProducer(t, c, producer.MetadataMaxAge(time.Hour), producer.MetadataWait(wait))
	// q caches the count too, and has waited for nothing: its refresher
	// is not backing off when the partitions are added (p's, whose wait
	// found nothing, may be, for up to a second).
	q := newProducer(t, c, producer.MetadataMaxAge(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	to2 := func() *producer.Record {
		return &producer.Record{Topic: topic, Partition: 2, ExplicitPartition: true, Value: []byte("p2")}
	}
	if _, err := p.ProduceSync(ctx, prec(0, "p0")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ProduceSync(ctx, prec(0, "q0")); err != nil {
		t.Fatal(err)
	}
	metas := observe(c, kmsg.Metadata)
	began := time.Now()
	_, err := p.ProduceSync(ctx, to2())
	took := time.Since(began)
	asked := metas.Hits()
	pe, ok := errors.AsType[*errors.PartitionError](err)
	if !ok || pe.Partition != 2 || !errors.Is(err, errors.ErrMetadataTimeout) || !strings.Contains(err.Error(), "no such partition (topic has 1)") {
		t.Fatalf("partition 2 of a 1-partition topic: %v", err)
	}
	if took < wait || took > wait+5*time.Second {
		t.Fatalf("partition 2 of a 1-partition topic failed after %v; want MetadataWait (%v)", took, wait)
	}
	if asked == 0 || asked > 5 {
		// Refreshes spaced by the refresher's backoff (100 ms, then
		// doubling): a few in 300 ms, not one per poll.
		t.Fatalf("%d Metadata requests while waiting %v for partition 2", asked, took)
	}
	if err := p.Produce(ctx, &producer.Record{Topic: topic, Partition: -1, ExplicitPartition: true}, nil); !errors.Is(err, errors.ErrInvalidArgument) || errors.Is(err, errors.ErrMetadataTimeout) {
		t.Fatalf("partition -1: %v; want an immediate refusal matching ErrInvalidArgument", err)
	}
	adm := kadm.NewClient(oracle(t, c))
	if _, err := adm.CreatePartitions(ctx, 2, topic); err != nil {
		t.Fatal(err)
	}
	res, err := q.ProduceSync(ctx, to2())
	if err != nil || res[0].Partition != 2 {
		t.Fatalf("partition 2 after the topic grew: %+v, %v", res, err)
	}
	wantLog(t, c, 2, []string{"p2"})
	key := []byte("k")
	res, err = q.ProduceSync(ctx, &producer.Record{Topic: topic, Key: key, Value: []byte("keyed")})
	if err != nil || res[0].Partition != producer.KeyPartition(key, 3) {
		t.Fatalf("keyed record after growth: %+v, %v (want partition %d)", res, err, producer.KeyPartition(key, 3))
	}
}

// Once its callback has run, a record is not reachable from the producer:
// neither the Record nor its value is kept alive by the producer's reused
// queues and slices while it goes on producing, however much later
// traffic is smaller.
func TestDeliveredRecordsAreReleased(t *testing.T) {
	cases := map[string][]producer.Opt{
		"idempotent":      {producer.Compression(compress.None)},
		"idempotent-zstd": {producer.Compression(compress.Zstd)},
		"plain":           {producer.DisableIdempotence()},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			p := newProducer(t, c, append(opts, producer.Linger(5*time.Millisecond))...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			produce := func(n, size int) (records []weak.Pointer[producer.Record], values []weak.Pointer[byte]) {
				var wg sync.WaitGroup
				for i := 0; i < n; i++ {
					r := &producer.Record{Topic: topic, Value: make([]byte, size)}
					records, values = append(records, weak.Make(r)), append(values, weak.Make(&r.Value[0]))
					wg.Add(1)
					if err := p.Produce(ctx, r, func(res producer.Result) {
						if res.Err != nil {
							t.Error(res.Err)
						}
						wg.Done()
					}); err != nil {
						t.Fatal(err)
					}
				}
				wg.Wait()
				return records, values
			}
			records, values := produce(50, 64<<10)
			produce(1, 10) // a later, smaller round reuses what the first grew
			runtime.GC()
			runtime.GC()
			for i := range records {
				if records[i].Value() != nil || values[i].Value() != nil {
					t.Fatalf("record %d of the first round is still reachable (record %v, value %v)", i, records[i].Value() != nil, values[i].Value() != nil)
				}
			}
			runtime.KeepAlive(p)
		})
	}
}

// The partitioners asked for a partition of a topic with none answer -1 (no
// such partition) instead of panicking on a division by zero.
func TestPartitionOfNoPartitions(t *testing.T) {
	for _, n := range []int32{0, -1} {
		if got := producer.KeyPartition([]byte("k"), n); got != -1 {
			t.Errorf("KeyPartition(k, %d) = %d, want -1", n, got)
		}
		for _, key := range [][]byte{nil, []byte("k")} {
			if got := producer.DefaultPartitioner().Partition(&producer.Record{Topic: "t", Key: key}, n); got != -1 {
				t.Errorf("DefaultPartitioner().Partition(key %q, %d) = %d, want -1", key, n, got)
			}
		}
	}
}
