package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
)

// TestCommitAfterClose: CommitSync, CommitAsync and Committed on a closed
// consumer end with ErrClosed at once; they must not wait for a commit
// loop that is gone.
func TestCommitAfterClose(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons := newConsumer(t, c, consumer.Group("closed-g"))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := pollUntil(t, cons, 10, 10*time.Second)
	if len(recs) != 10 {
		t.Fatalf("got %d records", len(recs))
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := cons.Close(cctx); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := cons.CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{
		{Topic: topic, Partition: 0}: {Offset: 5, LeaderEpoch: 0},
	})
	if !errors.Is(err, errors.ErrClosed) {
		t.Errorf("CommitSync after Close: %v after %v; want ErrClosed at once", err, time.Since(start).Round(time.Millisecond))
	}

	done := make(chan error, 1)
	cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{
		{Topic: topic, Partition: 0}: {Offset: 5, LeaderEpoch: 0},
	}, func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { done <- err })
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) {
			t.Errorf("CommitAsync after Close: %v; want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("CommitAsync after Close: done never called")
	}

	// Committed too: it ended with kgo's "client closed" in a GroupError,
	// which matched no kepoch identity.
	if _, err := cons.Committed(ctx, consumer.TopicPartition{Topic: topic, Partition: 0}); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Committed after Close: %v; want ErrClosed", err)
	}
}

// TestPausedBufferStarvesOthers: an answer buffered for a partition
// that is then paused must not stop every other partition from being
// fetched. Here partition 0's answer is one batch larger than
// MaxBufferedBytes (KIP-74: the broker returns a first batch whatever its
// size); once partition 0 is paused, partition 1 gets nothing any more.
func TestPausedBufferStarvesOthers(t *testing.T) {
	c := newClusterWith(t, 2, kfake.NumBrokers(1))
	produceOneBatch(t, c, 0, 0, 800, compress.None)
	cons := newConsumer(t, c, consumer.FetchMaxPartitionBytes(1<<10), consumer.FetchMaxBytes(4<<10), consumer.MaxBufferedBytes(4<<10))
	assignAll(t, cons, 2, consumer.At(0))
	waitFor(t, 5*time.Second, "partition 0's answer buffered", func() bool {
		now, _ := consumer.BufferedBytes(cons)
		return now > 4<<10
	})
	cons.Pause(consumer.TopicPartition{Topic: topic, Partition: 0})
	produceRange(t, c, 1, 0, 10)
	recs, evs, errs := pollUntil(t, cons, 10, 5*time.Second)
	if len(recs) != 10 || len(evs)+len(errs) > 0 {
		t.Fatalf("partition 1 (not paused): %d records of 10, events %v, errors %v\n%s", len(recs), evs, errs, consumer.DebugConsumer(cons))
	}
	checkInOrder(t, recs, map[int32]int64{1: 0}, map[int32]int64{1: 10})
	// On resume partition 0 delivers everything, once.
	cons.Resume(consumer.TopicPartition{Topic: topic, Partition: 0})
	recs, _, _ = pollUntil(t, cons, 800, 5*time.Second)
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 800})
}

// TestPausedBuffersStarveOthers: the same without any oversized batch:
// four paused partitions, each holding an ordinary answer, fill
// MaxBufferedBytes, and the fifth partition is never fetched again.
func TestPausedBuffersStarveOthers(t *testing.T) {
	c := newClusterWith(t, 5, kfake.NumBrokers(1))
	for p := int32(0); p < 4; p++ {
		produceRange(t, c, p, 0, 400, kgo.ProducerBatchMaxBytes(512), kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	cons := newConsumer(t, c, consumer.FetchMaxPartitionBytes(2<<10), consumer.FetchMaxBytes(8<<10), consumer.MaxBufferedBytes(8<<10),
		consumer.MaxPollRecords(1))
	var tps []consumer.TopicPartition
	for p := int32(0); p < 4; p++ {
		tps = append(tps, consumer.TopicPartition{Topic: topic, Partition: p})
	}
	assignAll(t, cons, 5, consumer.At(0))
	waitFor(t, 5*time.Second, "answers buffered", func() bool {
		for p := int32(0); p < 4; p++ {
			if !strings.HasSuffix(consumer.DebugPartition(cons, topic, p), "buffered=true") {
				return false
			}
		}
		return true
	})
	cons.Pause(tps...)
	now, _ := consumer.BufferedBytes(cons)
	t.Logf("%d bytes buffered for the paused partitions", now)
	produceRange(t, c, 4, 0, 10)
	recs, evs, errs := pollUntil(t, cons, 10, 5*time.Second)
	if len(recs) != 10 || len(evs)+len(errs) > 0 {
		t.Fatalf("partition 4 (not paused): %d records of 10, events %v, errors %v\n%s", len(recs), evs, errs, consumer.DebugConsumer(cons))
	}
}

// TestLateTopic: a topic assigned before it exists is consumed once it
// is created.
func TestLateTopic(t *testing.T) {
	c := newCluster(t, 1)
	cons := newConsumer(t, c, consumer.MetadataMaxAge(500*time.Millisecond))
	if err := cons.Assign(consumer.Assignment{Topic: "late", Partition: 0, Start: consumer.Earliest()},
		consumer.Assignment{Topic: topic, Partition: 3, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	metas := countRequests(c, kmsg.Metadata)
	expectQuiet(t, cons, time.Second)
	t.Logf("%d metadata requests in ~1s while waiting", metas())
	createTopic(t, c, "late", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("late"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	recs, evs, errs := pollUntil(t, cons, 5, 5*time.Second)
	if len(recs) != 5 {
		t.Fatalf("late topic: %d records, events %v errors %v\n%s", len(recs), evs, errs, consumer.DebugConsumer(cons))
	}
}

// TestUnreachableSeeds: New, Poll and Close respect their contexts
// when no seed broker answers, and leave nothing running.
func TestUnreachableSeeds(t *testing.T) {
	noLeftovers(t)
	cons, err := consumer.New(consumer.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cons.Poll(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll: %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if _, err := cons.SeekToNearest(sctx, topic, 0, consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SeekToNearest: %v", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	if err := cons.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	noLeftovers(t)
}

// TestSeekToNearestNegative: a stored position with a negative offset
// is refused like Seek's, not answered with position -1.
func TestSeekToNearestNegative(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(5)}); err != nil {
		t.Fatal(err)
	}
	if err := cons.Seek(topic, 0, -1); err == nil {
		t.Fatal("Seek(-1) accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pos, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: -1, LeaderEpoch: 0})
	if err == nil {
		t.Fatalf("SeekToNearest(-1) returned position %v and no error", pos)
	}
}

// TestNegativeTimestamp: AtTimestamp(ms) starts at the first offset
// whose timestamp is ≥ ms. A negative ms is either refused or starts at
// the first record; it must not be sent as one of ListOffsets' special
// timestamps (-1 latest, -3 max timestamp), which skips records.
func TestNegativeTimestamp(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	for _, ts := range []int64{-1, -3} {
		cons := newConsumer(t, c)
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.AtTimestamp(ts)}); err != nil {
			continue // refused: fine
		}
		recs, evs, errs := pollUntil(t, cons, 10, 2*time.Second)
		if len(recs) != 10 {
			pos, _ := cons.Position(topic, 0)
			t.Errorf("AtTimestamp(%d) accepted, then %d records of 10 (position %v), events %v errors %v", ts, len(recs), pos, evs, errs)
		}
	}
}

// TestCloseUnderLoad: Close while other goroutines Poll, Seek,
// Assign, Pause, Resume, SeekToNearest and CommitSync: nothing panics,
// every call returns (ErrClosed once closed), nothing is left running.
func TestCloseUnderLoad(t *testing.T) {
	c := newCluster(t, 3)
	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 0, 200)
	}
	noLeftovers(t)
	for round := 0; round < 3; round++ {
		cons := newOwnConsumer(t, c.ListenAddrs(), consumer.Group("close-load"), consumer.MaxPollRecords(7))
		assignAll(t, cons, 3, consumer.At(0))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		loop := func(fn func(i int)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					fn(i)
				}
			}()
		}
		bg := context.Background()
		for range 2 {
			loop(func(int) {
				ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
				f, _ := cons.Poll(ctx)
				cancel()
				f.Release()
			})
		}
		loop(func(i int) { _ = cons.Seek(topic, int32(i%3), int64(i%50)) })
		loop(func(i int) {
			tp := consumer.TopicPartition{Topic: topic, Partition: int32(i % 3)}
			_ = cons.Pause(tp) // a concurrent Assign may have revoked it
			_ = cons.Resume(tp)
		})
		loop(func(i int) {
			if i%20 == 0 {
				var as []consumer.Assignment
				for p := int32(0); p < int32(1+i%3); p++ {
					as = append(as, consumer.Assignment{Topic: topic, Partition: p, Start: consumer.At(0)})
				}
				_ = cons.Assign(as...)
			}
			time.Sleep(time.Millisecond)
		})
		loop(func(i int) {
			ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
			_, _ = cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: int64(i % 100), LeaderEpoch: 0})
			cancel()
		})
		loop(func(int) {
			ctx, cancel := context.WithTimeout(bg, time.Second)
			_ = cons.CommitSync(ctx, nil)
			cancel()
		})
		time.Sleep(200 * time.Millisecond)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		if err := cons.Close(ctx); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		cancel()
		done := make(chan struct{})
		go func() { close(stop); wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: calls still blocked after Close", round)
		}
		if _, err := cons.Poll(bg); !errors.Is(err, errors.ErrClosed) {
			t.Fatalf("Poll after Close: %v", err)
		}
	}
	noLeftovers(t)
}

// TestConcurrentCloseKeepsFinalCommit: Close is idempotent; two
// Closes at once (a signal handler and a defer) must still commit what
// Poll returned before the consumer stops, as one Close does.
func TestConcurrentCloseKeepsFinalCommit(t *testing.T) {
	for _, closers := range []int{1, 2} {
		t.Run(fmt.Sprint(closers), func(t *testing.T) { concurrentClose(t, closers) })
	}
}

func concurrentClose(t *testing.T, closers int) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(300 * time.Millisecond) })
		return nil, nil, false
	})
	cons := newOwnConsumer(t, c.ListenAddrs(), consumer.Group("concurrent-close"), consumer.AutoCommitInterval(time.Hour))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := pollUntil(t, cons, 10, 5*time.Second)
	if len(recs) != 10 {
		t.Fatalf("%d records", len(recs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range closers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cons.Close(ctx); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
	}
	wg.Wait()
	check := newConsumer(t, c, consumer.Group("concurrent-close"))
	got, err := check.Committed(ctx, consumer.TopicPartition{Topic: topic, Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	if om := got[consumer.TopicPartition{Topic: topic, Partition: 0}]; om.Offset != 10 {
		t.Fatalf("committed %+v after %d concurrent Closes; want offset 10", got, closers)
	}
}

// TestAssignSupersedesNearest: re-assigning a partition while a
// SeekToNearest waits for the leader restarts it at the Assign's start;
// the SeekToNearest must not return that start as the nearest position
// of the stored offset, with no error.
func TestAssignSupersedesNearest(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 20)
	asked := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case asked <- struct{}{}:
		default:
		}
		return nil, nil, true // never answered
	})
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	type res struct {
		pos consumer.Position
		err error
	}
	done := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pos, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 15, LeaderEpoch: 0})
		done <- res{pos, err}
	}()
	select {
	case <-asked: // SeekToNearest waits for the leader
	case <-time.After(5 * time.Second):
		t.Fatal("the leader was never asked")
	}
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(3)}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, consumer.ErrSeekSuperseded) {
		t.Fatalf("SeekToNearest(15@0) superseded by Assign(At(3)) returned %v, %v; want ErrSeekSuperseded", r.pos, r.err)
	}
}
