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

// TestConsumerRestartFromEpochHistory is the external-offset-store story on
// a real cluster: an application consumes, stores its offset and the
// partition's epoch history (encoded) together, and stops; an unclean
// election then truncates records it had consumed. Restarted from the
// stored (offset, history) alone, a consumer derives the epoch from the
// history, and reports the truncation before any record, with exactly the
// divergence point the new leader's raw OffsetForLeaderEpoch gives, and
// exact (the history reaches below it); its own history is cut there, and
// seeking to the reported Resume reads the new lineage once. A consumer
// restarted from an earlier stored offset with the same history validates
// cleanly and reads the surviving records and the new lineage once, in
// order.
func TestConsumerRestartFromEpochHistory(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	const before, lost, after = 10, 10, 5
	var stored []byte // the encoded history, stored with offset before+lost
	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{
		Prefix: "epoch-history", Before: before, Lost: lost, After: after, Log: logf,
		BeforeKill: func(ctx context.Context, topic string) error {
			app := newConsumer(t)
			if err := app.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
				return err
			}
			var p polled
			if err := p.pollFor(ctx, app, func(p *polled) bool { return len(p.records) >= before+lost }); err != nil {
				return err
			}
			if len(p.events)+len(p.errs) > 0 {
				return fmt.Errorf("first run: events %v, errors %v", p.events, p.errs)
			}
			h, ok := app.EpochHistory(topic, 0)
			if !ok || h.End() != before+lost {
				return fmt.Errorf("first run: history %v", h)
			}
			var err error
			if stored, err = h.MarshalBinary(); err != nil {
				return err
			}
			logf("application stored offset %d with history %v (%d bytes)", before+lost, h, len(stored))
			return app.Close(ctx)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	truth := u.truth(ctx, t, c, logf)

	restartAt := func(offset int64) (*consumer.Consumer, consumer.Start) {
		h := consumer.NewEpochHistory(0)
		if err := h.UnmarshalBinary(stored); err != nil {
			t.Fatal(err)
		}
		s := consumer.AtHistory(offset, h)
		if s.Unvalidated() || s.Epoch != u.OldEpoch {
			t.Fatalf("AtHistory(%d) from %v: epoch %d, want %d", offset, h, s.Epoch, u.OldEpoch)
		}
		cons := newConsumer(t, consumer.TruncationPolicy(consumer.PolicyNone))
		if err := cons.Assign(consumer.Assignment{Topic: u.Topic, Partition: 0, Start: s}); err != nil {
			t.Fatal(err)
		}
		return cons, s
	}
	var want []string
	for i := range after {
		want = append(want, fmt.Sprintf("c%d", i))
	}

	// From the stored position: the truncation, before any record.
	cons, _ := restartAt(before + lost)
	var p polled
	if err := p.pollFor(ctx, cons, func(p *polled) bool { return len(p.events) > 0 }); err != nil {
		t.Fatal(err)
	}
	if len(p.records) != 0 || len(p.events) != 1 || len(p.errs) != 1 {
		t.Fatalf("restart: %d records, events %v, errors %v", len(p.records), p.events, p.errs)
	}
	ev := p.events[0]
	if ev.Kind != consumer.Diverged || !ev.Halted || ev.EpochPruned ||
		ev.Divergent.Offset != truth.EndOffset || ev.Divergent.Epoch != truth.LeaderEpoch {
		t.Fatalf("report %v; the new leader says %d@%d", ev, truth.EndOffset, truth.LeaderEpoch)
	}
	if ev.Consumed.Offset != before+lost || ev.Consumed.Epoch != u.OldEpoch || ev.Replaced.From != truth.EndOffset || ev.Replaced.To != before+lost {
		t.Fatalf("report %v: consumed %v replaced %v", ev, ev.Consumed, ev.Replaced)
	}
	if !ev.Exact {
		t.Fatalf("report %v: the history reaches below the divergence, which is exact", ev)
	}
	var lte *errors.LogTruncationError
	if !errors.As(p.errs[0], &lte) {
		t.Fatalf("error %v; want a LogTruncationError", p.errs[0])
	}
	if h, _ := cons.EpochHistory(u.Topic, 0); h.End() != truth.EndOffset {
		t.Fatalf("history after the report %v; want it cut at %d", h, truth.EndOffset)
	}
	logf("restart from (%d, history): %v", before+lost, ev)
	if err := cons.SeekTo(u.Topic, 0, consumer.AtEpoch(ev.Resume.Offset, ev.Resume.Epoch)); err != nil {
		t.Fatal(err)
	}
	if err := p.pollFor(ctx, cons, func(p *polled) bool { return len(p.records) >= after }); err != nil {
		t.Fatal(err)
	}
	if got := values(p.records); !slices.Equal(got, want) || len(p.events) != 1 {
		t.Fatalf("after SeekTo(%v): %v (events %v); want %v", ev.Resume, got, p.events, want)
	}

	// From an earlier stored position that survived: validated, then the
	// rest of the old lineage's survivors and the new lineage, once.
	early, _ := restartAt(7)
	var q polled
	if err := q.pollFor(ctx, early, func(p *polled) bool { return len(p.records) >= before-7+after }); err != nil {
		t.Fatal(err)
	}
	wantEarly := append([]string{"a7", "a8", "a9"}, want...)
	if got := values(q.records); !slices.Equal(got, wantEarly) || len(q.events)+len(q.errs) > 0 {
		t.Fatalf("restart from 7: %v (events %v, errors %v); want %v", got, q.events, q.errs, wantEarly)
	}
	logf("restart from (7, history): validated, read %v", wantEarly)
}
