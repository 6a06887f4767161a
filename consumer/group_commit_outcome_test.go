package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// A commit whose OffsetCommit was written and left unanswered may have been
// stored: its failure matches errors.ErrUnknownOutcome. One refused by the
// coordinator, or never sent, does not.

var outcomeTP = consumer.TopicPartition{Topic: topic, Partition: 0}

// TestCommitAnswerLateIsUnknownOutcome: the coordinator holds the answer
// past CommitSync's ctx and then stores the commit.
func TestCommitAnswerLateIsUnknownOutcome(t *testing.T) {
	c := newClusterWith(t, 1)
	release := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if held.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false // stored
	})
	cons := newConsumer(t, c, consumer.Group("late"), consumer.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{outcomeTP: {Offset: 5, LeaderEpoch: 0}})
	close(release)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("CommitSync: %v; want the deadline, matching ErrUnknownOutcome", err)
	}
	waitFor(t, 5*time.Second, "the late commit stored", func() bool {
		return committedOf(t, c, "late", outcomeTP)[outcomeTP].Offset == 5
	})
}

// TestCommitConnectionLostIsUnknownOutcome: the coordinator stores the
// commit and the connection breaks before the answer, every time the
// transport tries again.
func TestCommitConnectionLostIsUnknownOutcome(t *testing.T) {
	c := newClusterWith(t, 1)
	side, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	var (
		applied atomic.Bool
		sideErr atomic.Value
		passing atomic.Bool // the side client's request: stored
	)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		if passing.Load() {
			return nil, nil, false
		}
		if applied.CompareAndSwap(false, true) {
			// Stored, as the coordinator would before its answer was lost.
			c.SleepControl(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				cp := *req
				passing.Store(true)
				resp, err := cp.RequestWith(ctx, side)
				passing.Store(false)
				if err == nil {
					err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
				}
				if err != nil {
					sideErr.Store(fmt.Sprint(err))
				}
			})
		}
		return nil, fmt.Errorf("connection lost"), true
	})
	cons := newConsumer(t, c, consumer.Group("lost"), consumer.DisableAutoCommit(), consumer.TransportOpts(kgo.RequestRetries(1)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{outcomeTP: {Offset: 7, LeaderEpoch: 0}})
	if e := sideErr.Load(); e != nil {
		t.Fatalf("storing the commit: %v", e)
	}
	if err == nil || !errors.Is(err, errors.ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CommitSync: %v; want the transport's failure, matching ErrUnknownOutcome", err)
	}
	if got := committedOf(t, c, "lost", outcomeTP)[outcomeTP].Offset; got != 7 {
		t.Fatalf("committed %d, want 7 (stored before the connection broke)", got)
	}
}

// TestCommitRefusedOrUnsentIsNotUnknownOutcome: a commit the coordinator
// refused with a code, or one that never left the queue, was not stored.
func TestCommitRefusedOrUnsentIsNotUnknownOutcome(t *testing.T) {
	c := newClusterWith(t, 1)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return refuseCommit(kr.(*kmsg.OffsetCommitRequest), kerr.OffsetMetadataTooLarge.Code), nil, true
	})
	cons := newConsumer(t, c, consumer.Group("refused"), consumer.DisableAutoCommit())
	offs := map[consumer.TopicPartition]consumer.OffsetAndMetadata{outcomeTP: {Offset: 3, LeaderEpoch: 0}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cons.CommitSync(ctx, offs)
	if !errors.Is(err, kerr.OffsetMetadataTooLarge) || errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("refused CommitSync: %v; want OFFSET_METADATA_TOO_LARGE, not an unknown outcome", err)
	}

	// Queued behind a commit that holds the commit goroutine: its ctx
	// ends before it is sent.
	release := blockCommits(t, cons)
	qctx, qcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer qcancel()
	err = cons.CommitSync(qctx, offs)
	release()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("queued CommitSync: %v; want the deadline, not an unknown outcome", err)
	}
}
