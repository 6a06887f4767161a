package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// newConsumer makes a kepoch consumer of the local cluster, closed at the
// end of the test.
func newConsumer(t *testing.T, opts ...consumer.Opt) *consumer.Consumer {
	t.Helper()
	opts = append([]consumer.Opt{
		consumer.SeedBrokers(Seeds...),
		consumer.FetchMaxWait(100 * time.Millisecond),
		consumer.RetryBackoff(50 * time.Millisecond),
		consumer.RequestTimeout(5 * time.Second),
		consumer.MetadataMaxAge(time.Second),
	}, opts...)
	c, err := consumer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("consumer close: %v", err)
		}
	})
	return c
}

// polled is everything a consumer returned, in order.
type polled struct {
	records []consumer.Record
	events  []consumer.TruncationEvent
	errs    []error
	// order interleaves records and events as Poll returned them: an
	// event's index is its position among records when it was returned.
	eventAt []int
}

// pollFor polls until stop says so or ctx ends.
func (p *polled) pollFor(ctx context.Context, c *consumer.Consumer, stop func(*polled) bool) error {
	for !stop(p) {
		f, err := c.Poll(ctx)
		if err != nil {
			return fmt.Errorf("poll: %w (so far %d records, events %v, errors %v)", err, len(p.records), p.events, p.errs)
		}
		for range f.Truncations {
			p.eventAt = append(p.eventAt, len(p.records))
		}
		p.events = append(p.events, f.Truncations...)
		p.errs = append(p.errs, f.Errors...)
		// Copies are kept and the poll released: the real-cluster
		// scenarios run with recycled memory.
		for _, r := range f.Records {
			r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
			for i := range r.Headers {
				r.Headers[i].Value = bytes.Clone(r.Headers[i].Value)
			}
			p.records = append(p.records, r)
		}
		f.Release()
	}
	return nil
}

func values(rs []consumer.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}

// TestConsumerReportsUncleanTruncation is the KIP-320 core on a real
// cluster: consumers that read records acknowledged by the old leader alone,
// past what the new leader will have, see the unclean election reported
// with exactly the divergence point the new leader itself gives, before any
// record of the new lineage; with PolicyEarliest the new lineage then
// arrives exactly once, in order; with PolicyNone the partition halts until
// the application seeks; and a consumer started afterwards from the stored
// (offset, epoch) with SeekToNearest lands where KIP-320 says.
func TestConsumerReportsUncleanTruncation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	rewind := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyEarliest))
	latest := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyLatest))
	halt := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyNone))
	var rw, lt, hl polled
	var oldBatches []kmsg.RecordBatch
	const before, lost, after = 10, 10, 5
	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "consumer-unclean", Before: before, Lost: lost, After: after, Log: logf,
		BeforeKill: func(ctx context.Context, topic string) error {
			// The consumers read everything the old leader acknowledged.
			for _, cons := range []*consumer.Consumer{rewind, latest, halt} {
				if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
					return err
				}
			}
			for _, x := range []struct {
				c *consumer.Consumer
				p *polled
			}{{rewind, &rw}, {latest, &lt}, {halt, &hl}} {
				if err := x.p.pollFor(ctx, x.c, func(p *polled) bool { return len(p.records) >= before+lost }); err != nil {
					return err
				}
				if pos, ok := x.c.Position(topic, 0); !ok || pos.Offset != before+lost {
					return fmt.Errorf("consumer position %v before the kill; want %d", pos, before+lost)
				}
			}
			logf("the consumers read offsets 0..%d (position %d)", before+lost-1, before+lost)
			// The batches the old leader holds past the records both
			// replicas have: what a report must say was replaced.
			st, err := c.Describe(ctx, topic, 0)
			if err != nil {
				return err
			}
			oldBatches, err = c.BatchHeaders(ctx, st.Leader, topic, st.TopicID, 0, before)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The broker's own answer, sent raw to the new leader.
	truth := u.truth(ctx, t, c, logf)

	checkEvent := func(name string, ev consumer.TruncationEvent) {
		t.Helper()
		if ev.Topic != u.Topic || ev.Partition != 0 || ev.Kind != consumer.Diverged {
			t.Fatalf("%s: event %v", name, ev)
		}
		if ev.Divergent.Offset != truth.EndOffset || ev.Divergent.Epoch != truth.LeaderEpoch {
			t.Fatalf("%s: reported divergence %v; the new leader says %d@%d", name, ev.Divergent, truth.EndOffset, truth.LeaderEpoch)
		}
		if ev.Consumed.Offset != before+lost || ev.Consumed.Epoch != u.OldEpoch {
			t.Fatalf("%s: consumed %v; want %d@%d", name, ev.Consumed, before+lost, u.OldEpoch)
		}
		if ev.Replaced.From != truth.EndOffset || ev.Replaced.To != before+lost {
			t.Fatalf("%s: replaced %v; want [%d,%d)", name, ev.Replaced, truth.EndOffset, before+lost)
		}
		// The digests of the replaced batches are those of the batches
		// the old leader held there, as kmsg parses them from its own
		// Fetch answer before it died.
		if !ev.ReplacedBatchesComplete || len(ev.ReplacedBatches) != len(oldBatches) {
			t.Fatalf("%s: replaced batches %+v (complete %v); the old leader held %d batches past %d", name, ev.ReplacedBatches, ev.ReplacedBatchesComplete, len(oldBatches), before)
		}
		for i, got := range ev.ReplacedBatches {
			b := oldBatches[i]
			want := consumer.DeliveredBatch{Base: b.FirstOffset, Last: b.FirstOffset + int64(b.LastOffsetDelta), LeaderEpoch: b.PartitionLeaderEpoch,
				ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch, BaseSequence: b.FirstSequence,
				Transactional: b.Attributes&0x10 != 0, CRC: uint32(b.CRC), Records: b.NumRecords}
			if got != want {
				t.Fatalf("%s: replaced batch %d is %+v; the old leader held %+v", name, i, got, want)
			}
		}
		logf("%s: the %d replaced batches are the old leader's (first %+v)", name, len(oldBatches), ev.ReplacedBatches[0])
	}

	var want []string
	for i := 0; i < after; i++ {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	// PolicyEarliest and PolicyLatest: report, then the new lineage from
	// the divergence point (a located divergence is never skipped to the
	// log end, whatever the policy).
	for _, x := range []struct {
		name string
		c    *consumer.Consumer
		p    *polled
	}{{"PolicyEarliest", rewind, &rw}, {"PolicyLatest", latest, &lt}} {
		delivered := len(x.p.records)
		if err := x.p.pollFor(ctx, x.c, func(p *polled) bool { return len(p.records) >= delivered+after }); err != nil {
			t.Fatal(err)
		}
		if len(x.p.events) != 1 || len(x.p.errs) != 0 {
			t.Fatalf("%s consumer: events %v errors %v; want exactly one event", x.name, x.p.events, x.p.errs)
		}
		checkEvent(x.name, x.p.events[0])
		if x.p.eventAt[0] != delivered {
			t.Fatalf("%s consumer delivered %d records of the new lineage before the report", x.name, delivered-x.p.eventAt[0])
		}
		newLineage := x.p.records[delivered:]
		if got := values(newLineage); !slices.Equal(got, want) {
			t.Fatalf("%s: new lineage delivered %v; want %v exactly once, in order", x.name, got, want)
		}
		for i, r := range newLineage {
			if r.Offset != truth.EndOffset+int64(i) || r.LeaderEpoch != u.NewEpoch {
				t.Fatalf("%s: new-lineage record %d at %d@%d; want %d@%d", x.name, i, r.Offset, r.LeaderEpoch, truth.EndOffset+int64(i), u.NewEpoch)
			}
		}
		logf("%s: %v; then %v at offsets %d..%d epoch %d", x.name, x.p.events[0], want, truth.EndOffset, truth.EndOffset+after-1, u.NewEpoch)
	}

	// PolicyNone: report, LogTruncationError, halt.
	if err := hl.pollFor(ctx, halt, func(p *polled) bool { return len(p.events) > 0 }); err != nil {
		t.Fatal(err)
	}
	if len(hl.events) != 1 || len(hl.errs) != 1 || len(hl.records) != before+lost {
		t.Fatalf("halting consumer: %d records, events %v, errors %v", len(hl.records), hl.events, hl.errs)
	}
	checkEvent("halt", hl.events[0])
	var lte *errors.LogTruncationError
	if !errors.As(hl.errs[0], &lte) || !errors.Is(hl.errs[0], errors.ErrOffsetOutOfRange) {
		t.Fatalf("halting consumer error %v; want a LogTruncationError", hl.errs[0])
	}
	if d, _ := lte.For(u.Topic, 0); d.Divergent.Offset != truth.EndOffset {
		t.Fatalf("LogTruncationError divergence %+v", d)
	}
	// The new leader now writes past the halted position, so a partition
	// that kept fetching from it (or moved anywhere) would deliver records:
	// without them the quiet window below could not fail, since the log
	// ended below the position.
	more := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"}
	moreOffs, err := ProduceValues(ctx, AcksAll, u.Topic, 0, more...)
	if err != nil {
		t.Fatal(err)
	}
	if moreOffs[len(moreOffs)-1] < before+lost {
		t.Fatalf("records written at %v; want the log to reach past the halted position %d", moreOffs, before+lost)
	}
	quiet, qcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_ = hl.pollFor(quiet, halt, func(*polled) bool { return false })
	qcancel()
	if len(hl.records) != before+lost || len(hl.events) != 1 || len(hl.errs) != 1 {
		t.Fatalf("halted partition delivered %d more records, events %v, errors %v", len(hl.records)-before-lost, hl.events, hl.errs)
	}
	if pos, ok := halt.Position(u.Topic, 0); !ok || pos.Offset != before+lost {
		t.Fatalf("halted partition position %v (%v); want it to stay at %d", pos, ok, before+lost)
	}
	want = append(want, more...)
	// The application continues from the divergence point, in the new lineage.
	if err := halt.SeekTo(u.Topic, 0, consumer.AtEpoch(truth.EndOffset, truth.LeaderEpoch)); err != nil {
		t.Fatal(err)
	}
	if err := hl.pollFor(ctx, halt, func(p *polled) bool { return len(p.records) >= before+lost+len(want) }); err != nil {
		t.Fatal(err)
	}
	if got := values(hl.records[before+lost:]); !slices.Equal(got, want) || len(hl.events) != 1 {
		t.Fatalf("after seeking to the divergence: %v (events %v); want %v", got, hl.events, want)
	}
	logf("PolicyNone: halted with %v; after SeekTo(%d@%d) read %v", hl.errs[0], truth.EndOffset, truth.LeaderEpoch, want)

	// A fresh consumer from the stored position (20, old epoch).
	fresh := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyNone))
	if err := fresh.Assign(consumer.Assignment{Topic: u.Topic, Partition: 0, Start: consumer.Latest()}); err != nil {
		t.Fatal(err)
	}
	pos, err := fresh.SeekToNearest(ctx, u.Topic, 0, consumer.OffsetAndMetadata{Offset: before + lost, LeaderEpoch: u.OldEpoch})
	if err != nil {
		t.Fatal(err)
	}
	if pos.Offset != truth.EndOffset {
		t.Fatalf("SeekToNearest(%d@%d) = %v; the old epoch ends at %d, the first offset of the next epoch", before+lost, u.OldEpoch, pos, truth.EndOffset)
	}
	var fr polled
	if err := fr.pollFor(ctx, fresh, func(p *polled) bool { return len(p.records) >= len(want) }); err != nil {
		t.Fatal(err)
	}
	if got := values(fr.records); !slices.Equal(got, want) {
		t.Fatalf("after SeekToNearest read %v; want %v", got, want)
	}
	// A stored position that still exists stays where it is.
	if pos, err = fresh.SeekToNearest(ctx, u.Topic, 0, consumer.OffsetAndMetadata{Offset: 7, LeaderEpoch: u.OldEpoch}); err != nil || pos.Offset != 7 {
		t.Fatalf("SeekToNearest(7@%d) = %v, %v; want 7", u.OldEpoch, pos, err)
	}
	logf("SeekToNearest(%d@%d) → %v; SeekToNearest(7@%d) → 7", before+lost, u.OldEpoch, truth.EndOffset, u.OldEpoch)
}

// TestConsumerCleanLeaderChangesReportNothing consumes while the leader is
// stopped gracefully and then killed, with acks=all and min.insync.replicas
// 2: nothing acknowledged is lost, so the consumer must report no
// truncation, and must deliver every record exactly once, in order, with
// the leader epochs the batches were written in.
func TestConsumerCleanLeaderChangesReportNothing(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := TopicName("consumer-clean")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	cons := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyNone))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	var got polled
	var want []string
	write := func(prefix string, n int) {
		t.Helper()
		vs := make([]string, n)
		for i := range vs {
			vs[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		if _, err := ProduceValues(ctx, AcksAll, topic, 0, vs...); err != nil {
			t.Fatal(err)
		}
		want = append(want, vs...)
	}
	read := func() {
		t.Helper()
		if err := got.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= len(want) || len(p.events) > 0 }); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 20)
	read()
	st, err := c.Describe(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, st.Leader); err != nil { // controlled shutdown: a clean election
		t.Fatal(err)
	}
	write("b", 20)
	read()
	st2, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader >= 0 && s.Leader != st.Leader })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, st.Leader); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return len(s.ISR) == 3 }); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, st2.Leader); err != nil { // a crash of the new leader
		t.Fatal(err)
	}
	write("c", 20)
	read()
	st3, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader >= 0 && s.Leader != st2.Leader })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leaders %d@%d → %d@%d → %d@%d", st.Leader, st.LeaderEpoch, st2.Leader, st2.LeaderEpoch, st3.Leader, st3.LeaderEpoch)
	if len(got.events) != 0 || len(got.errs) != 0 {
		t.Fatalf("clean leader changes reported %v, errors %v", got.events, got.errs)
	}
	if g := values(got.records); !slices.Equal(g, want) {
		t.Fatalf("delivered %v; want %v", g, want)
	}
	epochs := map[int32]bool{}
	for i, r := range got.records {
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d", i, r.Offset)
		}
		epochs[r.LeaderEpoch] = true
	}
	// Three leaders wrote (a, b, c): each phase's records carry its own
	// epoch. Fewer distinct epochs means a phase was not written by the
	// leader the scenario says, or the epochs are not the batches'.
	if len(epochs) < 3 || !(st.LeaderEpoch < st2.LeaderEpoch && st2.LeaderEpoch < st3.LeaderEpoch) {
		t.Fatalf("records carry epochs %v, leaders at epochs %d, %d, %d; the leader changed twice", epochs, st.LeaderEpoch, st2.LeaderEpoch, st3.LeaderEpoch)
	}
}
