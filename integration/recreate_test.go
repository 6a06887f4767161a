package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestConsumerReportsTopicRecreation deletes a topic a consumer has read and
// creates it again under the same name: the consumer reports the recreation
// once (Recreated, the delivered offsets replaced), before any record of the
// new topic, whose records then arrive exactly once from offset 0; brokers
// that still answer with the old topic ID for a while never take it back to
// the deleted incarnation (no second report, no record delivered twice).
func TestConsumerReportsTopicRecreation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	topic := TopicName("recreate")
	oldID, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := valuesOf("a", 10)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, a...); err != nil {
		t.Fatal(err)
	}
	cons := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyEarliest), consumer.MissingPartitionReport(time.Minute))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var p polled
	readFrom(ctx, t, cons, &p, topic, 0, a, 1)
	logf("read %d records of %s (topic ID %x)", len(a), topic, oldID[:4])

	newID, err := c.RecreateTopic(ctx, topic, [][]int32{{2, 3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if newID == oldID {
		t.Fatalf("recreated topic kept its ID %x", newID)
	}
	b := valuesOf("b", 3)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, b...); err != nil {
		t.Fatal(err)
	}
	logf("deleted and created again (topic ID %x), wrote %v", newID[:4], b)

	delivered := len(p.records)
	readFrom(ctx, t, cons, &p, topic, 0, b, 2)
	if len(p.events) != 1 || len(p.errs) != 0 || p.eventAt[0] != delivered {
		t.Fatalf("events %v at %v (delivered %d), errors %v; want one report before the new topic's records", p.events, p.eventAt, delivered, p.errs)
	}
	ev := p.events[0]
	if ev.Kind != consumer.Recreated || ev.Consumed.Offset != int64(len(a)) ||
		ev.Replaced.From != 0 || ev.Replaced.To != int64(len(a)) || !errors.Is(ev.Err(), errors.ErrTopicIDChanged) {
		t.Fatalf("event %v (%v); want Recreated, consumed to %d, replaced [0,%d)", ev, ev.Err(), len(a), len(a))
	}
	logf("reported %v; then %v at offsets 0..%d", ev, b, len(b)-1)

	// More records later: they, and only they, arrive, with no new report
	// (a cache taken back to the old incarnation would report again and
	// reposition).
	time.Sleep(2 * time.Second)
	d := valuesOf("d", 3)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, d...); err != nil {
		t.Fatal(err)
	}
	readFrom(ctx, t, cons, &p, topic, int64(len(b)), d, 2)
	if len(p.events) != 1 || len(p.errs) != 0 {
		t.Fatalf("events %v, errors %v after the recreation was reported", p.events, p.errs)
	}
	if got := values(p.records[delivered:]); !slices.Equal(got, append(slices.Clone(b), d...)) {
		t.Fatalf("new topic delivered %v", got)
	}
}
