package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

const topic = "t"

func newCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func produce(t *testing.T, c *kfake.Cluster, partition int32, prefix string, n int, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s%d", prefix, i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func newConsumer(t *testing.T, c *kfake.Cluster, opts ...consumer.Opt) *consumer.Consumer {
	t.Helper()
	opts = append([]consumer.Opt{consumer.SeedBrokers(c.ListenAddrs()...), consumer.FetchMaxWait(50 * time.Millisecond), consumer.RetryBackoff(20 * time.Millisecond)}, opts...)
	cons, err := consumer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cons.Close(ctx); closeFailed(err) {
			t.Errorf("close: %v", err)
		} else if err != nil {
			t.Logf("close: %v", err)
		}
	})
	return cons
}

// closeFailed reports whether Close's error is more than its final commit
// refused because the group was rebalancing (Close reports that: a test
// may end while its members rebalance).
func closeFailed(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err != nil
	}
	var pe *errors.PartitionError
	if !errors.As(err, &pe) || pe.Op != "commit" {
		return true
	}
	for _, e := range []*kerr.Error{kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// pollUntil polls until n records were returned (or the deadline), and
// returns the records, truncation events and errors seen. With n == 0 it
// polls until the first truncation event or error.
func pollUntil(t *testing.T, cons *consumer.Consumer, n int, d time.Duration) ([]consumer.Record, []consumer.TruncationEvent, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var recs []consumer.Record
	var evs []consumer.TruncationEvent
	var errs []error
	for {
		f, err := cons.Poll(ctx)
		if err != nil {
			break
		}
		// The records are kept as copies and the poll released: every
		// test that polls through here runs with recycled memory.
		for _, r := range f.Records {
			r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
			hs := make([]consumer.Header, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = consumer.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
			}
			if r.Headers != nil {
				r.Headers = hs
			}
			recs = append(recs, r)
		}
		f.Release()
		evs = append(evs, f.Truncations...)
		errs = append(errs, f.Errors...)
		if n > 0 && len(recs) >= n || n == 0 && len(evs)+len(errs) > 0 {
			break
		}
	}
	return recs, evs, errs
}

func TestConsumeEverythingInOrder(t *testing.T) {
	c := newCluster(t, 2)
	produce(t, c, 0, "a", 300)
	produce(t, c, 1, "b", 200, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()},
		consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(50)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 450, 10*time.Second)
	if len(evs) > 0 || len(errs) > 0 {
		t.Fatalf("unexpected events %v errors %v", evs, errs)
	}
	next := map[int32]int64{0: 0, 1: 50}
	for _, r := range recs {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		prefix := "a"
		if r.Partition == 1 {
			prefix = "b"
		}
		if want := fmt.Sprintf("%s%d", prefix, r.Offset); string(r.Value) != want {
			t.Fatalf("partition %d offset %d: value %q want %q", r.Partition, r.Offset, r.Value, want)
		}
		if r.LeaderEpoch != 0 {
			t.Fatalf("record at %d has leader epoch %d", r.Offset, r.LeaderEpoch)
		}
		next[r.Partition]++
	}
	if next[0] != 300 || next[1] != 200 {
		t.Fatalf("consumed to %v; want 300 and 200", next)
	}
	if pos, ok := cons.Position(topic, 0); !ok || pos.Offset != 300 || pos.Epoch != 0 {
		t.Fatalf("position %v %v; want 300@0", pos, ok)
	}
}

// TestCommittedPositionAcrossALeaderMove starts from a committed (offset,
// epoch) after a clean leader change: the position validates and the
// records of the new epoch follow. (kfake answers OffsetForLeaderEpoch with
// -1/-1 for an old epoch while the new one holds no records, unlike Kafka,
// so the move happens before the consumer starts; the real-cluster tests
// cover a live move.)
func TestCommittedPositionAcrossALeaderMove(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, c, 0, "a", 20)
	to := (c.LeaderFor(topic, 0) + 1) % 3
	if err := c.MoveTopicPartition(topic, 0, to); err != nil {
		t.Fatal(err)
	}
	produce(t, c, 0, "a", 10)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.AtEpoch(20, 0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(evs) > 0 || len(errs) > 0 {
		t.Fatalf("clean leader change reported %v %v", evs, errs)
	}
	if len(recs) != 10 || recs[0].Offset != 20 || recs[0].LeaderEpoch != 1 {
		t.Fatalf("after the move got %d records, first %+v", len(recs), recs)
	}
}

// truncate installs kfake controls that make partition 0 look truncated to
// end at offset `to` in epoch 0: OffsetForLeaderEpoch(0) answers (0, to).
func truncate(c *kfake.Cluster, to int64) {
	answerEpochEnds(c, func(rp kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64) {
		if rp.LeaderEpoch == 0 {
			return 0, to
		}
		return rp.LeaderEpoch, 1 << 40
	})
}

// answerEpochEnds answers every OffsetForLeaderEpoch itself: each partition
// with the (epoch, end offset) end gives for it.
func answerEpochEnds(c *kfake.Cluster, end func(kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64)) {
	answerEpochs(c, nil, func(rp kmsg.OffsetForLeaderEpochRequestTopicPartition) (int16, int32, int64) {
		epoch, offset := end(rp)
		return 0, epoch, offset
	})
}

// answerEpochs answers the OffsetForLeaderEpoch requests that come while
// when says so (always: nil) itself, each partition with the (error code,
// epoch, end offset) part gives for it; kfake answers the others.
func answerEpochs(c *kfake.Cluster, when func() bool, part func(kmsg.OffsetForLeaderEpochRequestTopicPartition) (int16, int32, int64)) {
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if when != nil && !when() {
			return nil, nil, false
		}
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode, sp.LeaderEpoch, sp.EndOffset = part(rp)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

func TestTruncationPolicyNoneHaltsWithLeadersAnswer(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, c, 0, "a", 30)
	cons := newConsumer(t, c, consumer.TruncationPolicy(consumer.PolicyNone))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := pollUntil(t, cons, 30, 5*time.Second); len(recs) != 30 {
		t.Fatalf("got %d records", len(recs))
	}
	truncate(c, 12)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 0, 10*time.Second)
	if len(recs) != 0 {
		t.Fatalf("delivered %d records after the truncation", len(recs))
	}
	if len(evs) != 1 || len(errs) != 1 {
		t.Fatalf("events %v errors %v; want one each", evs, errs)
	}
	ev := evs[0]
	if ev.Kind != consumer.Diverged || ev.Consumed.Offset != 30 || ev.Consumed.Epoch != 0 || ev.Divergent.Offset != 12 || !ev.Halted {
		t.Fatalf("event %v", ev)
	}
	if ev.Replaced.From != 12 || ev.Replaced.To != 30 {
		t.Fatalf("replaced %v; want [12,30)", ev.Replaced)
	}
	var lte *errors.LogTruncationError
	if !errors.As(errs[0], &lte) || !errors.Is(errs[0], errors.ErrOffsetOutOfRange) || !errors.Is(errs[0], errors.ErrLogTruncation) {
		t.Fatalf("error %v is not a LogTruncationError matching both identities", errs[0])
	}
	if d, ok := lte.For(topic, 0); !ok || d.Divergent.Offset != 12 || d.Consumed.Offset != 30 {
		t.Fatalf("divergence %+v", d)
	}
	// Halted: nothing more until a seek.
	produce(t, c, 0, "b", 5)
	if recs, _, _ := pollUntil(t, cons, 1, 500*time.Millisecond); len(recs) != 0 {
		t.Fatalf("halted partition delivered %d records", len(recs))
	}
	// Accept the loss: continue at the consumed position without revalidating.
	if err := cons.Seek(topic, 0, 30); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs = pollUntil(t, cons, 5, 5*time.Second)
	if len(evs) != 0 || len(errs) != 0 || len(recs) != 5 || recs[0].Offset != 30 {
		t.Fatalf("after seek: %d records (first %+v), events %v, errors %v", len(recs), recs, evs, errs)
	}
}

func TestTruncationPolicyEarliestRewindsToDivergence(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, c, 0, "a", 30)
	var cb []consumer.TruncationEvent
	cons := newConsumer(t, c, consumer.OnTruncation(func(e consumer.TruncationEvent) { cb = append(cb, e) }))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := pollUntil(t, cons, 30, 5*time.Second); len(recs) != 30 {
		t.Fatalf("got %d records", len(recs))
	}
	truncate(c, 12)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	// kfake does not really truncate, so the rewind re-reads 12..29.
	recs, evs, errs := pollUntil(t, cons, 18, 10*time.Second)
	if len(errs) != 0 || len(evs) != 1 || len(cb) != 1 {
		t.Fatalf("events %v (callback %v), errors %v", evs, cb, errs)
	}
	if evs[0].Divergent.Offset != 12 || evs[0].Halted {
		t.Fatalf("event %v", evs[0])
	}
	if len(recs) != 18 || recs[0].Offset != 12 {
		t.Fatalf("after the rewind: %d records, first %+v", len(recs), recs[0])
	}
}

func TestSeekToNearest(t *testing.T) {
	c := newCluster(t, 1)
	produce(t, c, 0, "a", 10) // epoch 0: [0,10)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	produce(t, c, 0, "b", 10) // epoch 1: [10,20)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Latest()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Offset 15 claimed in epoch 0, which ended at 10: nearest is 10.
	pos, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 15, LeaderEpoch: 0})
	if err != nil {
		t.Fatal(err)
	}
	if pos.Offset != 10 {
		t.Fatalf("SeekToNearest(15@0) = %v; want offset 10", pos)
	}
	// Offset 5 in epoch 0 still exists: kept.
	if pos, err = cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 0}); err != nil || pos.Offset != 5 {
		t.Fatalf("SeekToNearest(5@0) = %v, %v; want offset 5", pos, err)
	}
	recs, _, _ := pollUntil(t, cons, 15, 5*time.Second)
	if len(recs) != 15 || recs[0].Offset != 5 {
		t.Fatalf("after SeekToNearest: %d records", len(recs))
	}
}

// TestSeekToNearestEnds: a SeekToNearest returns however its resolution
// ends, never only when its context does: nothing to resolve (a stored
// position at offset 0), an epoch the leader cannot locate (the break's
// error, as Poll reports it), the partition sought again
// (ErrSeekSuperseded) or no longer assigned.
func TestSeekToNearestEnds(t *testing.T) {
	setup := func(t *testing.T) (*kfake.Cluster, *consumer.Consumer) {
		c := newCluster(t, 2)
		produce(t, c, 0, "a", 10)
		cons := newConsumer(t, c)
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Latest()},
			consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.Latest()}); err != nil {
			t.Fatal(err)
		}
		return c, cons
	}
	// hang makes every OffsetForLeaderEpoch go unanswered and returns
	// what a SeekToNearest of partition 0 to 5@0, started in the
	// background, returns.
	hang := func(t *testing.T, c *kfake.Cluster, cons *consumer.Consumer) chan error {
		asked := make(chan struct{}, 1)
		c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			select {
			case asked <- struct{}{}:
			default:
			}
			return nil, nil, true // no answer
		})
		res := make(chan error, 1)
		go func() {
			_, err := cons.SeekToNearest(context.Background(), topic, 0, consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 0})
			res <- err
		}()
		select {
		case <-asked:
		case <-time.After(5 * time.Second):
			t.Fatal("the leader was never asked")
		}
		return res
	}
	wait := func(t *testing.T, res chan error) error {
		t.Helper()
		select {
		case err := <-res:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("SeekToNearest still waiting")
			return nil
		}
	}

	t.Run("offset zero", func(t *testing.T) {
		_, cons := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pos, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 0, LeaderEpoch: 0})
		if err != nil || pos.Offset != 0 {
			t.Fatalf("SeekToNearest(0@0) = %v, %v; want offset 0", pos, err)
		}
		recs, _, _ := pollUntil(t, cons, 10, 5*time.Second)
		if len(recs) != 10 || recs[0].Offset != 0 {
			t.Fatalf("after SeekToNearest(0@0): %d records", len(recs))
		}
	})
	t.Run("unlocated", func(t *testing.T) {
		c, cons := setup(t)
		answerEpochEnds(c, func(kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64) { return -1, -1 })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 0})
		var lte *errors.LogTruncationError
		if !errors.As(err, &lte) || len(lte.Divergences) != 1 || !lte.Divergences[0].Unknown {
			t.Fatalf("SeekToNearest to an epoch the leader cannot locate: %v; want an unlocated *LogTruncationError", err)
		}
		// Poll reports the same break, and the policy (earliest) goes
		// on from the log start.
		recs, evs, _ := pollUntil(t, cons, 10, 5*time.Second)
		if len(evs) != 1 || evs[0].Kind != consumer.Unlocated || len(recs) != 10 {
			t.Fatalf("after the unlocated SeekToNearest: events %v, %d records", evs, len(recs))
		}
	})
	t.Run("superseded", func(t *testing.T) {
		c, cons := setup(t)
		res := hang(t, c, cons)
		if err := cons.Seek(topic, 0, 3); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, res); !errors.Is(err, consumer.ErrSeekSuperseded) {
			t.Fatalf("SeekToNearest sought over: %v; want ErrSeekSuperseded", err)
		}
		if pos, _ := cons.Position(topic, 0); pos.Offset != 3 {
			t.Fatalf("position %v after the later Seek to 3", pos)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		c, cons := setup(t)
		res := hang(t, c, cons)
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.Latest()}); err != nil {
			t.Fatal(err)
		}
		var pe *errors.PartitionError
		if err := wait(t, res); !errors.As(err, &pe) || pe.Partition != 0 {
			t.Fatalf("SeekToNearest of a partition unassigned meanwhile: %v; want a *PartitionError", err)
		}
	})
}

// TestGCReserve: a consumer holds its GC reserve (an eighth of
// MaxBufferedBytes, at most 32 MiB, unless GCReserve says otherwise) from
// New until Close.
func TestGCReserve(t *testing.T) {
	c := newCluster(t, 1)
	for name, tc := range map[string]struct {
		opts []consumer.Opt
		want int
	}{
		"default":         {nil, 64 << 20 / 8},
		"buffer's eighth": {[]consumer.Opt{consumer.MaxBufferedBytes(128 << 20)}, 16 << 20},
		"capped":          {[]consumer.Opt{consumer.MaxBufferedBytes(1 << 30)}, 32 << 20},
		"set above cap":   {[]consumer.Opt{consumer.GCReserve(40 << 20)}, 40 << 20},
		"set":             {[]consumer.Opt{consumer.GCReserve(3 << 20)}, 3 << 20},
		"none":            {[]consumer.Opt{consumer.GCReserve(0)}, 0},
	} {
		cons := newConsumer(t, c, tc.opts...)
		if got := consumer.GCReserveHeld(cons); got != tc.want {
			t.Errorf("%s: holds %d bytes, want %d", name, got, tc.want)
		}
		if err := cons.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := consumer.GCReserveHeld(cons); got != 0 {
			t.Errorf("%s: holds %d bytes after Close", name, got)
		}
	}
}

func TestMisuse(t *testing.T) {
	c := newCluster(t, 1)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0}); err == nil {
		t.Error("Assign without a start accepted")
	}
	if err := cons.Seek(topic, 7, 0); err == nil {
		t.Error("Seek on an unassigned partition accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Poll(ctx); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Poll after Close: %v", err)
	}
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Assign after Close: %v", err)
	}
}

// TestDecompressParallelism: a consumer that decompresses several batches
// of an answer at once delivers exactly what one that decompresses them one
// by one does: every record once, in order, with its own bytes, from the
// start and from an offset in the middle of a batch.
func TestDecompressParallelism(t *testing.T) {
	if _, err := consumer.New(consumer.SeedBrokers("127.0.0.1:1"), consumer.DecompressParallelism(0)); err == nil {
		t.Fatal("DecompressParallelism(0) accepted")
	}
	c := newCluster(t, 1)
	const n = 2000
	big := func(i int64) []byte {
		rng := rand.New(rand.NewPCG(uint64(i), 99))
		words := []string{"id", "user", "event", "click", "view", "amount", "true", "null", "{", "}", ":", ","}
		v := fmt.Appendf(nil, "%d:", i)
		for len(v) < 2048 {
			v = append(v, words[rng.IntN(len(words))]...)
			v = fmt.Appendf(v, "%d", rng.IntN(1000))
		}
		return v
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerBatchMaxBytes(64<<10), kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := int64(0); i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: big(i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	for _, start := range []int64{0, 777} {
		for _, par := range []int{1, 2, 8} {
			cons := newConsumer(t, c, consumer.DecompressParallelism(par))
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(start)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, n-int(start), 10*time.Second)
			if len(evs)+len(errs) > 0 || len(recs) != n-int(start) {
				t.Fatalf("parallel %d from %d: %d records, events %v errors %v", par, start, len(recs), evs, errs)
			}
			for k, r := range recs {
				i := start + int64(k)
				if r.Offset != i || string(r.Key) != fmt.Sprintf("k%d", i) || !bytes.Equal(r.Value, big(i)) {
					t.Fatalf("parallel %d from %d: record %d is offset %d key %q value %.20q…", par, start, k, r.Offset, r.Key, r.Value)
				}
			}
		}
	}
}
