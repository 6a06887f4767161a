package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// A partition whose leader answers none of its fetches (here kfake closes
// the connection of every Fetch) is reported in Poll's Errors once the
// run of failures lasted MissingPartitionReport: one retriable error
// matching ErrLeaderUnreachable, naming the partition, however long the
// run goes on; the partition is not halted, and is read as soon as the
// leader answers. A later run is reported again. The failures were only
// retried, and the partition looked like a quiet one for as long as the
// leader was unreachable.
func TestUnreachableLeaderReported(t *testing.T) {
	c := newClusterWith(t, 1, kfake.NumBrokers(1))
	var failing atomic.Bool
	var failed atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		failed.Add(1)
		return nil, errors.New("refused"), true // closes the connection
	})
	cons := newConsumer(t, c, consumer.MissingPartitionReport(200*time.Millisecond))
	assignAll(t, cons, 1, consumer.At(0))
	next := int64(0)
	for run := range 2 {
		failing.Store(true)
		before := failed.Load()
		// Reported once the run lasted the bound (the failures come a
		// retry backoff apart, 20 ms here).
		var reports []error
		for len(reports) == 0 {
			_, evs, errs := pollUntil(t, cons, 0, 5*time.Second)
			if len(evs) > 0 {
				t.Fatalf("run %d: events %v", run, evs)
			}
			if len(errs) == 0 {
				t.Fatalf("run %d: nothing reported after %d failed fetches\n%s", run, failed.Load()-before, consumer.DebugConsumer(cons))
			}
			reports = append(reports, errs...)
		}
		// The run goes on well past the report: not reported again.
		n := failed.Load()
		waitFor(t, 5*time.Second, "more failed fetches", func() bool { return failed.Load() >= n+10 })
		failing.Store(false)
		produceRange(t, c, 0, next, next+5)
		var recs []consumer.Record
		for len(recs) < 5 {
			got, evs, errs := pollUntil(t, cons, 5-len(recs), 5*time.Second)
			if len(got)+len(errs)+len(evs) == 0 {
				t.Fatalf("run %d: the leader answers again, but records %d of 5\n%s", run, len(recs), consumer.DebugConsumer(cons))
			}
			if len(evs) > 0 {
				t.Fatalf("run %d: events %v", run, evs)
			}
			recs, reports = append(recs, got...), append(reports, errs...)
		}
		checkInOrder(t, recs, map[int32]int64{0: next}, map[int32]int64{0: next + 5})
		next += 5
		if len(reports) != 1 {
			t.Fatalf("run %d: %d reports, want one: %v", run, len(reports), reports)
		}
		pe, ok := errors.AsType[*errors.PartitionError](reports[0])
		if !ok || !errors.Is(pe, errors.ErrLeaderUnreachable) || !errors.IsRetriable(pe) || pe.Topic != topic || pe.Partition != 0 || pe.Op != "fetch" {
			t.Fatalf("run %d: report %v (%T); want a retriable *PartitionError for %s[0] matching ErrLeaderUnreachable", run, reports[0], reports[0], topic)
		}
		t.Logf("run %d: %v", run, pe)
	}
}

// A partition validating its position with a leader that answers none of
// its OffsetForLeaderEpoch requests is reported the same way, once, and
// goes on once the leader answers: the position is validated and the
// records after it are read.
func TestUnreachableLeaderReportedWhileValidating(t *testing.T) {
	c := newClusterWith(t, 1, kfake.NumBrokers(1))
	produceRange(t, c, 0, 0, 5)
	var failing atomic.Bool
	failing.Store(true)
	var failed atomic.Int64
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		failed.Add(1)
		return nil, errors.New("refused"), true // closes the connection
	})
	cons := newConsumer(t, c, consumer.MissingPartitionReport(200*time.Millisecond))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.AtEpoch(5, 0)}); err != nil {
		t.Fatal(err)
	}
	_, evs, reports := pollUntil(t, cons, 0, 5*time.Second)
	if len(evs) > 0 || len(reports) == 0 {
		t.Fatalf("events %v, errors %v after %d failed validations; want a report\n%s", evs, reports, failed.Load(), consumer.DebugConsumer(cons))
	}
	n := failed.Load()
	waitFor(t, 5*time.Second, "more failed validations", func() bool { return failed.Load() >= n+10 })
	failing.Store(false)
	produceRange(t, c, 0, 5, 10)
	recs, evs, errs := pollUntil(t, cons, 5, 5*time.Second)
	reports = append(reports, errs...)
	if len(recs) != 5 || len(evs) > 0 || len(reports) != 1 {
		t.Fatalf("once the leader answers: %d records, events %v, reports %v; want 5 records and one report", len(recs), evs, reports)
	}
	checkInOrder(t, recs, map[int32]int64{0: 5}, map[int32]int64{0: 10})
	if pe, ok := errors.AsType[*errors.PartitionError](reports[0]); !ok || pe.Op != "validate" || !errors.Is(pe, errors.ErrLeaderUnreachable) || !errors.IsRetriable(pe) {
		t.Fatalf("report %v; want a retriable validate error matching ErrLeaderUnreachable", reports[0])
	}
}
