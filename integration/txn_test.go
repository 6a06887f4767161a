package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// TestTransactionsUnderBrokerBounces runs transactions (every third one
// aborted after its records are in the log) while the partition leader is
// killed and restarted: a read_committed kepoch consumer sees exactly the
// committed records, in order, each once, and never an aborted one.
func TestTransactionsUnderBrokerBounces(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	topic := TopicName("txn-bounce")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, producer.TransactionalID(TopicName("txn-id")), producer.DeliveryTimeout(60*time.Second))
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	var committed, aborted, flushedAborted []string
	const txns, per = 24, 20
	var killed int32 = -1
	for i := 0; i < txns; i++ {
		switch i {
		case 8:
			st, err := c.Describe(ctx, topic, 0)
			if err != nil {
				t.Fatal(err)
			}
			killed = st.Leader
			if err := c.Kill(ctx, killed); err != nil {
				t.Fatal(err)
			}
			t.Logf("transaction %d: killed leader %d", i, killed)
		case 14:
			if err := c.Start(ctx, killed); err != nil {
				t.Fatal(err)
			}
			t.Logf("transaction %d: restarted broker %d", i, killed)
		}
		abort := i%3 == 2
		for attempt := 0; ; attempt++ {
			if err := p.BeginTransaction(); err != nil {
				t.Fatalf("begin %d: %v", i, err)
			}
			var vals []string
			for j := 0; j < per; j++ {
				v := fmt.Sprintf("t%02d-a%d-r%02d", i, attempt, j)
				vals = append(vals, v)
				if err := p.Produce(ctx, &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte(v)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if abort {
				if err = p.Flush(ctx); err == nil {
					err = p.AbortTransaction(ctx)
				}
				if err == nil {
					aborted = append(aborted, vals...)
					flushedAborted = append(flushedAborted, vals...)
					break
				}
			} else if err = p.CommitTransaction(ctx); err == nil {
				committed = append(committed, vals...)
				break
			}
			if !errors.Is(err, producer.ErrAbortRequired) || attempt > 3 {
				t.Fatalf("transaction %d attempt %d: %v", i, attempt, err)
			}
			t.Logf("transaction %d attempt %d must abort: %v", i, attempt, err)
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("abort after an abortable error: %v", err)
			}
			aborted = append(aborted, vals...)
		}
	}
	t.Logf("%d committed records, %d aborted; producer %v", len(committed), len(aborted), p.ProducerID())

	// The aborted transactions' records are in the log (read_uncommitted,
	// raw Fetch): otherwise "read_committed never shows an aborted record"
	// could not fail.
	requireInLog(ctx, t, c, topic, flushedAborted)
	checkReadCommitted(ctx, t, topic, committed)
	// Again with answers of one batch each (the broker returns at least
	// one whole batch whatever the limit): every aborted transaction's
	// records and its marker come in different answers, each of which must
	// carry the aborted transactions it needs.
	checkReadCommitted(ctx, t, topic, committed, consumer.FetchMaxBytes(1), consumer.FetchMaxPartitionBytes(1))
}

// requireInLog reads partition 0 of topic from its leader with raw Fetch
// requests (read_uncommitted, decoded by kgo) and requires every value of
// want to be there, and want not to be empty.
func requireInLog(ctx context.Context, t *testing.T, c *Cluster, topic string, want []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("no aborted records to look for: the scenario aborted nothing after writing")
	}
	st, err := c.Describe(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.FetchAll(ctx, st.Leader, topic, st.TopicID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, r := range got {
		in[r.Value] = true
	}
	for _, v := range want {
		if !in[v] {
			t.Fatalf("aborted record %q is not in the log (%d records read uncommitted): nothing for read_committed to filter", v, len(got))
		}
	}
}

// checkReadCommitted reads partition 0 of topic with a read_committed kepoch
// consumer (with opts) and requires exactly want, in order, and nothing
// more after a quiet second (no aborted record after the last commit).
func checkReadCommitted(ctx context.Context, t *testing.T, topic string, want []string, opts ...consumer.Opt) {
	t.Helper()
	cons := newConsumer(t, append([]consumer.Opt{consumer.ReadCommitted()}, opts...)...)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var got polled
	if err := got.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= len(want) }); err != nil {
		t.Fatal(err)
	}
	quiet, qcancel := context.WithTimeout(ctx, time.Second)
	_ = got.pollFor(quiet, cons, func(*polled) bool { return false })
	qcancel()
	if g := values(got.records); !slices.Equal(g, want) {
		t.Fatalf("read_committed consumer read %d records; want the %d committed ones in order (first difference at %d)", len(g), len(want), firstDiff(g, want))
	}
	if len(got.events) != 0 || len(got.errs) != 0 {
		t.Fatalf("events %v errors %v", got.events, got.errs)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
