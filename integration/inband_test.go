package integration

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// requestCounter counts the requests of one kind a client wrote.
type requestCounter struct {
	key int16
	n   atomic.Int64
}

func (r *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == r.key && err == nil {
		r.n.Add(1)
	}
}

// TestConsumerInBandReportsUncleanTruncation is the unclean election of
// TestConsumerReportsUncleanTruncation read by two consumers that differ in
// one option: one validates a leader change with OffsetForLeaderEpoch first
// (the default), the other with the new leader's answer to its Fetch
// (ValidateInBand: LastFetchedEpoch sent, DivergingEpoch read). Both report
// exactly the divergence the new leader answers to a raw
// OffsetForLeaderEpoch, before any record of the new lineage, which then
// arrives exactly once; the in-band consumer never sent an
// OffsetForLeaderEpoch, so its report came from the broker's DivergingEpoch.
// Both read the first records from broker 1 while it is a follower (rack
// r1), so they know it answers Fetch v12+ when it becomes the leader.
func TestConsumerInBandReportsUncleanTruncation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	sides := inBandSides(t, consumer.Rack("r1"), consumer.TruncationPolicy(consumer.PolicyEarliest))
	const before, lost, after = 10, 10, 5
	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "inband-unclean", Before: before, Lost: lost, After: after, Log: logf,
		BeforeStop: func(ctx context.Context, topic string) error {
			for _, s := range sides {
				if err := s.c.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
					return err
				}
				readFrom(ctx, t, s.c, &s.p, topic, 0, valuesOf("a", before), 1)
			}
			logf("both read offsets 0..%d from follower 1", before-1)
			return nil
		},
		BeforeKill: func(ctx context.Context, topic string) error {
			for _, s := range sides {
				readFrom(ctx, t, s.c, &s.p, topic, before, valuesOf("b", lost), 2)
			}
			logf("follower 1 stopped: both read offsets %d..%d from leader 2", before, before+lost-1)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	truth := u.truth(ctx, t, c, logf)
	for _, s := range sides {
		delivered := len(s.p.records)
		readFrom(ctx, t, s.c, &s.p, u.Topic, truth.EndOffset, valuesOf("c", after), u.NewLeader)
		if len(s.p.events) != 1 || len(s.p.errs) != 0 || s.p.eventAt[0] != delivered {
			t.Fatalf("%s: events %v at %v (delivered %d), errors %v; want one event before the new lineage", s.name, s.p.events, s.p.eventAt, delivered, s.p.errs)
		}
		ev := s.p.events[0]
		if ev.Kind != consumer.Diverged || ev.Divergent.Offset != truth.EndOffset || ev.Divergent.Epoch != truth.LeaderEpoch ||
			ev.Consumed.Offset != before+lost || ev.Consumed.Epoch != u.OldEpoch ||
			ev.Replaced.From != truth.EndOffset || ev.Replaced.To != before+lost ||
			!ev.ReplacedBatchesComplete || len(ev.ReplacedBatches) == 0 {
			t.Fatalf("%s: event %+v; the new leader says %d@%d, consumed %d@%d", s.name, ev, truth.EndOffset, truth.LeaderEpoch, before+lost, u.OldEpoch)
		}
		logf("%s: %v, after %d OffsetForLeaderEpoch requests", s.name, ev, s.ofle.n.Load())
	}
	if n := sides[0].ofle.n.Load(); n == 0 {
		t.Fatalf("the validate-first consumer sent no OffsetForLeaderEpoch")
	}
	if n := sides[1].ofle.n.Load(); n != 0 {
		t.Fatalf("the in-band consumer sent %d OffsetForLeaderEpoch requests; want its report from the Fetch answer alone", n)
	}
	a, b := sides[0].p.events[0], sides[1].p.events[0]
	if fmt.Sprint(a.ReplacedBatches) != fmt.Sprint(b.ReplacedBatches) || a.Resume != b.Resume || a.Exact != b.Exact {
		t.Fatalf("reports differ:\nvalidate first %+v\nin band        %+v", a, b)
	}
}

// TestConsumerInBandCleanLeaderChange moves a partition's leader cleanly
// (no broker stopped) under two consumers that read every partition of a
// topic led by all three brokers: the validate-first consumer asks the new
// leader OffsetForLeaderEpoch, the in-band one asks nothing and goes on
// with its Fetch; neither reports anything, and both deliver every record
// exactly once, in order.
func TestConsumerInBandCleanLeaderChange(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := TopicName("inband-clean")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}, nil); err != nil {
		t.Fatal(err)
	}
	a := valuesOf("a", 10)
	for p := int32(0); p < 3; p++ {
		if _, err := ProduceValues(ctx, AcksAll, topic, p, a...); err != nil {
			t.Fatal(err)
		}
	}
	sides := inBandSides(t)
	for _, s := range sides {
		var as []consumer.Assignment
		for p := int32(0); p < 3; p++ {
			as = append(as, consumer.Assignment{Topic: topic, Partition: p, Start: consumer.Earliest()})
		}
		if err := s.c.Assign(as...); err != nil {
			t.Fatal(err)
		}
		if err := s.p.pollFor(ctx, s.c, func(p *polled) bool { return len(p.records) >= 3*len(a) }); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.MoveLeader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := valuesOf("b", 10)
	if _, err := ProduceValues(ctx, AcksAll, topic, 0, b...); err != nil {
		t.Fatal(err)
	}
	for _, s := range sides {
		if err := s.p.pollFor(ctx, s.c, func(p *polled) bool { return len(p.records) >= 3*len(a)+len(b) }); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range s.p.records {
			if r.Partition == 0 {
				got = append(got, string(r.Value))
				if r.Offset >= int64(len(a)) && r.LeaderEpoch != st.LeaderEpoch {
					t.Fatalf("%s: record %q at %d in epoch %d; written in %d", s.name, r.Value, r.Offset, r.LeaderEpoch, st.LeaderEpoch)
				}
			}
		}
		if want := append(slices.Clone(a), b...); !slices.Equal(got, want) || len(s.p.records) != 3*len(a)+len(b) {
			t.Fatalf("%s: partition 0 delivered %v (%d records in all); want %v", s.name, got, len(s.p.records), want)
		}
		if len(s.p.events) != 0 || len(s.p.errs) != 0 {
			t.Fatalf("%s: events %v, errors %v", s.name, s.p.events, s.p.errs)
		}
		t.Logf("%s: leader moved (%v), %d OffsetForLeaderEpoch requests, nothing reported", s.name, st, s.ofle.n.Load())
	}
	if n := sides[0].ofle.n.Load(); n == 0 {
		t.Fatalf("the validate-first consumer sent no OffsetForLeaderEpoch after the leader moved")
	}
	if n := sides[1].ofle.n.Load(); n != 0 {
		t.Fatalf("the in-band consumer sent %d OffsetForLeaderEpoch requests", n)
	}
}

// inBandSide is one of two consumers a scenario runs side by side, alike
// but for ValidateInBand, each counting the OffsetForLeaderEpoch
// requests it sends.
type inBandSide struct {
	name string
	c    *consumer.Consumer
	p    polled
	ofle requestCounter
}

// inBandSides returns the two sides, validating first and in band, made
// with opts besides.
func inBandSides(t *testing.T, opts ...consumer.Opt) []*inBandSide {
	var sides []*inBandSide
	for _, inBand := range []bool{false, true} {
		s := &inBandSide{name: "validate first", ofle: requestCounter{key: kmsg.OffsetForLeaderEpoch.Int16()}}
		if inBand {
			s.name = "in band"
		}
		s.c = newConsumer(t, append(opts[:len(opts):len(opts)], consumer.ValidateInBand(inBand), consumer.TransportOpts(kgo.WithHooks(&s.ofle)))...)
		sides = append(sides, s)
	}
	return sides
}
