package kepochtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/kepochtest"
)

// testCtx is a context bounded by the test's deadline budget.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// values returns prefix-from .. prefix-(to-1).
func values(prefix string, from, to int) []string {
	var vs []string
	for i := from; i < to; i++ {
		vs = append(vs, fmt.Sprintf("%s-%d", prefix, i))
	}
	return vs
}

// produce writes values as one batch, failing the test on error.
func produce(t *testing.T, c *kepochtest.Cluster, topic string, partition int32, vs ...string) []int64 {
	t.Helper()
	offs, err := c.Produce(testCtx(t), topic, partition, vs...)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// newConsumer is a kepoch consumer on the harness with short timings.
func newConsumer(t *testing.T, c *kepochtest.Cluster, opts ...consumer.Opt) *consumer.Consumer {
	t.Helper()
	cons, err := consumer.New(append([]consumer.Opt{
		consumer.SeedBrokers(c.Seeds()...),
		consumer.FetchMaxWait(50 * time.Millisecond),
		consumer.RetryBackoff(20 * time.Millisecond),
		consumer.MetadataMaxAge(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cons.Close(ctx)
	})
	return cons
}

// polled is everything Poll returned, in order.
type polled struct {
	records []consumer.Record
	events  []consumer.TruncationEvent
	errs    []error
	// eventAt[i] is how many records had been returned before events[i].
	eventAt []int
}

// pollFor polls until done holds or d passes (then it fails the test).
func pollFor(t *testing.T, cons *consumer.Consumer, d time.Duration, what string, done func(*polled) bool) *polled {
	t.Helper()
	var p polled
	deadline := time.Now().Add(d)
	for !done(&p) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %d records, events %v, errors %v", what, len(p.records), p.events, p.errs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		f, err := cons.Poll(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll: %v", err)
		}
		// A break is reported before any record of the new lineage,
		// so within one Fetches the events precede its records.
		for _, e := range f.Truncations {
			p.events = append(p.events, e)
			p.eventAt = append(p.eventAt, len(p.records))
		}
		p.records = append(p.records, f.Records...)
		p.errs = append(p.errs, f.Errors...)
	}
	return &p
}

// consume polls until n records arrived, failing on any event or error.
func consume(t *testing.T, cons *consumer.Consumer, n int) []consumer.Record {
	t.Helper()
	p := pollFor(t, cons, 20*time.Second, fmt.Sprintf("%d records", n), func(p *polled) bool { return len(p.records) >= n })
	if len(p.events) != 0 || len(p.errs) != 0 || len(p.records) != n {
		t.Fatalf("want %d records and nothing else; got %d records, events %v, errors %v", n, len(p.records), p.events, p.errs)
	}
	return p.records
}

// checkRecords fails unless recs are exactly the offsets from.. with the
// given values, once each, in order, all in leader epoch epoch (-1: any).
func checkRecords(t *testing.T, recs []consumer.Record, from int64, epoch int32, vs []string) {
	t.Helper()
	if len(recs) != len(vs) {
		t.Fatalf("%d records, want %d (%v)", len(recs), len(vs), vs)
	}
	for i, r := range recs {
		if r.Offset != from+int64(i) || string(r.Value) != vs[i] || (epoch >= 0 && r.LeaderEpoch != epoch) {
			t.Fatalf("record %d: %d@%d %q; want %d@%d %q", i, r.Offset, r.LeaderEpoch, r.Value, from+int64(i), epoch, vs[i])
		}
	}
}
