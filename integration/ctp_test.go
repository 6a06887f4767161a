package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// committedOffset reads a group's committed (offset, leader epoch) for
// topic/0 with a raw OffsetFetch (-1, -1 when nothing is committed).
func (c *Cluster) committedOffset(ctx context.Context, group, topic string) (int64, int32, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.RequireStable = true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{0}
	req.Topics = append(req.Topics, rt)
retry:
	for {
		resp, err := req.RequestWith(ctx, c.Client)
		if err != nil {
			if errors.IsRetriable(err) && ctx.Err() == nil { // e.g. the offsets topic is still being created
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return -1, -1, err
		}
		if err := errCode(resp.ErrorCode); err != nil {
			if errors.IsRetriable(err) || errors.Is(err, errors.FromCode(88)) { // UNSTABLE_OFFSET_COMMIT: a transaction is pending
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return -1, -1, err
		}
		for _, t := range resp.Topics {
			if len(t.Partitions) == 0 {
				continue
			}
			p := t.Partitions[0] // the one partition asked for
			if err := errCode(p.ErrorCode); err != nil {
				if errors.Is(err, errors.FromCode(88)) && ctx.Err() == nil {
					// UNSTABLE_OFFSET_COMMIT for the partition: ask
					// again (a bare continue went on to the next
					// partition and returned -1, "nothing committed").
					time.Sleep(100 * time.Millisecond)
					continue retry
				}
				return -1, -1, err
			}
			return p.Offset, p.LeaderEpoch, nil
		}
		return -1, -1, nil
	}
}

// TestConsumeTransformProduceExactlyOnce reads an input topic and writes a
// transformed copy to an output topic in transactions that also commit the
// consumed offsets (with their leader epochs), while the output leader is
// killed and the application crashes twice mid-transaction and restarts
// from its committed offsets: the committed output equals the input,
// record for record, in order, with no duplicate, and read_committed never
// shows an aborted record.
func TestConsumeTransformProduceExactlyOnce(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	in, out := TopicName("ctp-in"), TopicName("ctp-out")
	group, txnID := TopicName("ctp-group"), TopicName("ctp-txn")
	if _, err := c.CreateTopic(ctx, in, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, out, [][]int32{{2, 3, 1}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	var input []string
	for i := 0; i < n; i++ {
		input = append(input, fmt.Sprintf("m%04d", i))
	}
	// The input is written under two leader epochs (a clean leader change
	// halfway), so the epoch committed with the last offset is not 0, the
	// value an unset epoch field would also hold.
	if _, err := ProduceValues(ctx, AcksAll, in, 0, input[:n/2]...); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, 1); err != nil { // the input's leader
		t.Fatal(err)
	}
	if _, err := c.WaitPartition(ctx, in, 0, func(s PartitionState) bool { return s.Leader > 0 && s.Leader != 1 }); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPartition(ctx, in, 0, func(s PartitionState) bool { return len(s.ISR) == 3 }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPartition(ctx, out, 0, func(s PartitionState) bool { return len(s.ISR) == 3 }); err != nil {
		t.Fatal(err)
	}
	if _, err := ProduceValues(ctx, AcksAll, in, 0, input[n/2:]...); err != nil {
		t.Fatal(err)
	}
	inSt, err := c.Describe(ctx, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	inLog, err := c.FetchAll(ctx, inSt.Leader, in, inSt.TopicID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(inLog) != n {
		t.Fatalf("input log: %d records; want %d", len(inLog), n)
	}
	if inLog[n-1].LeaderEpoch <= inLog[0].LeaderEpoch {
		t.Fatalf("input log epochs %d..%d; want the second half under a later epoch", inLog[0].LeaderEpoch, inLog[n-1].LeaderEpoch)
	}
	lastInputEpoch := inLog[n-1].LeaderEpoch

	killedOut := int32(-1)
	crashed := 0
	var zombie []string // records of the transactions a crash left open
	// run processes until done, or until crashAfter transactions (then it
	// abandons an open transaction without committing, like a crash).
	run := func(crashAfter int) (done bool) {
		off, epoch, err := c.committedOffset(ctx, group, in)
		if err != nil {
			t.Fatal(err)
		}
		start := consumer.Earliest()
		if off >= 0 {
			start = consumer.AtEpoch(off, epoch)
		}
		cons, err := consumer.New(consumer.SeedBrokers(Seeds...), consumer.TruncationPolicy(consumer.PolicyNone),
			consumer.FetchMaxWait(100*time.Millisecond), consumer.MaxPollRecords(100))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close(context.Background())
		if err := cons.Assign(consumer.Assignment{Topic: in, Partition: 0, Start: start}); err != nil {
			t.Fatal(err)
		}
		p, err := producer.New(producer.SeedBrokers(Seeds...), producer.TransactionalID(txnID),
			producer.RequestTimeout(5*time.Second), producer.DeliveryTimeout(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			p.Close(cctx)
		}()
		if err := p.InitTransactions(ctx); err != nil { // fences and aborts a crashed predecessor's transaction
			t.Fatal(err)
		}
		t.Logf("started at %d@%d as %v", off, epoch, p.ProducerID())
		var queue []consumer.Record
		for txns := 0; ; txns++ {
			for len(queue) == 0 {
				if pos, ok := cons.Position(in, 0); ok && pos.Offset >= n {
					return true
				}
				pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
				f, err := cons.Poll(pctx)
				pcancel()
				if err != nil {
					t.Fatalf("poll: %v", err)
				}
				if len(f.Errors) > 0 || len(f.Truncations) > 0 {
					t.Fatalf("input errors %v truncations %v", f.Errors, f.Truncations)
				}
				queue = f.Records
			}
			// Transactions of at most 50 records.
			batch := queue[:min(50, len(queue))]
			queue = queue[len(batch):]
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for _, r := range batch {
				if err := p.Produce(ctx, &producer.Record{Topic: out, Partition: 0, ExplicitPartition: true, Value: append([]byte("out-"), r.Value...)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			last := batch[len(batch)-1]
			if txns == crashAfter {
				if err := p.Flush(ctx); err != nil { // the records are in the log, the transaction never ends
					// Not a crash with records in the log: the next run
					// crashes instead.
					t.Logf("crash after %d transactions: flush failed (%v); not counted", txns, err)
					return false
				}
				for _, r := range batch {
					zombie = append(zombie, "out-"+string(r.Value))
				}
				// Close with an ended context leaves the transaction
				// open, as a crash does (a Close given time aborts
				// it): the next run's InitTransactions must abort it.
				ended, cancelEnded := context.WithCancel(ctx)
				cancelEnded()
				p.Close(ended)
				crashed++
				t.Logf("crash after %d transactions, with an open transaction up to offset %d", txns, last.Offset)
				return false
			}
			err = p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: group, GenerationID: -1},
				map[string]map[int32]producer.OffsetAndEpoch{in: {0: {Offset: last.Offset + 1, LeaderEpoch: last.LeaderEpoch}}})
			if err == nil {
				err = p.CommitTransaction(ctx)
			}
			if err != nil {
				if !errors.Is(err, producer.ErrAbortRequired) {
					t.Fatalf("transaction %d: %v", txns, err)
				}
				t.Logf("transaction %d aborted: %v; restarting from the committed offsets", txns, err)
				if err := p.AbortTransaction(ctx); err != nil {
					t.Fatal(err)
				}
				return false
			}
			if txns == 4 && killedOut < 0 {
				st, err := c.Describe(ctx, out, 0)
				if err != nil {
					t.Fatal(err)
				}
				if st.Leader > 0 {
					if err := c.Kill(ctx, st.Leader); err != nil {
						t.Fatal(err)
					}
					killedOut = st.Leader
					t.Logf("killed output leader %d", st.Leader)
				}
			}
		}
	}
	crashes := []int{7, 5}
	for attempt := 0; ; attempt++ {
		// A run that ended in an abort instead of its crash does not
		// use up a crash: the next run crashes instead.
		crash := -1
		if crashed < len(crashes) {
			crash = crashes[crashed]
		}
		if run(crash) {
			break
		}
		if attempt > 8 {
			t.Fatal("too many restarts")
		}
	}
	if err := c.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	// The faults the test claims happened: the output leader was killed,
	// the application crashed twice with a transaction open, and those
	// transactions' records are in the output log (read_uncommitted), for
	// read_committed to leave out.
	if killedOut < 0 || crashed != len(crashes) {
		t.Fatalf("output leader killed: %d; crashes: %d of %d", killedOut, crashed, len(crashes))
	}
	requireInLog(ctx, t, c, out, zombie)

	cons := newConsumer(t, consumer.ReadCommitted())
	if err := cons.Assign(consumer.Assignment{Topic: out, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var got polled
	if err := got.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= n }); err != nil {
		t.Fatal(err)
	}
	quiet, qcancel := context.WithTimeout(ctx, time.Second)
	_ = got.pollFor(quiet, cons, func(*polled) bool { return false })
	qcancel()
	want := make([]string, n)
	for i, v := range input {
		want[i] = "out-" + v
	}
	if g := values(got.records); !slices.Equal(g, want) {
		t.Fatalf("committed output has %d records; want the %d transformed inputs in order (first difference at %d)", len(g), n, firstDiff(g, want))
	}
	off, epoch, err := c.committedOffset(ctx, group, in)
	if err != nil || off != n || epoch != lastInputEpoch {
		t.Fatalf("committed input offset %d@%d (%v); want %d with the epoch of record %d, %d", off, epoch, err, n, n-1, lastInputEpoch)
	}
}
