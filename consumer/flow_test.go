package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
)

// produceTxn writes values in one transaction of a transactional producer
// and commits or aborts it.
func produceTxn(t *testing.T, cl *kgo.Client, commit bool, values ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// TestReadCommitted: a committed and an aborted transaction. read_committed
// delivers only the committed records, read_uncommitted both; either way
// the position moves past the transaction markers (control batches), so the
// next record is delivered at its offset.
func TestReadCommitted(t *testing.T) {
	for _, committed := range []bool{true, false} {
		name := "read_uncommitted"
		if committed {
			name = "read_committed"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeFetches(c)
			txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("txn"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			// Offsets: c0..c4 = 0..4, commit marker 5, a0..a4 = 6..10,
			// abort marker 11.
			produceTxn(t, txn, true, "c0", "c1", "c2", "c3", "c4")
			produceTxn(t, txn, false, "a0", "a1", "a2", "a3", "a4")

			var opts []consumer.Opt
			if committed {
				opts = append(opts, consumer.ReadCommitted())
			}
			cons := newConsumer(t, c, opts...)
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
				t.Fatal(err)
			}
			want := []string{"c0", "c1", "c2", "c3", "c4"}
			wantOffsets := []int64{0, 1, 2, 3, 4}
			if !committed {
				want = append(want, "a0", "a1", "a2", "a3", "a4")
				wantOffsets = append(wantOffsets, 6, 7, 8, 9, 10)
			}
			recs, evs, errs := pollUntil(t, cons, len(want), 10*time.Second)
			// Drive delivery until the position passes the abort marker.
			waitFor(t, 5*time.Second, "the position to pass the abort marker", func() bool {
				more, e, er := pollUntil(t, cons, 1, 20*time.Millisecond)
				recs, evs, errs = append(recs, more...), append(evs, e...), append(errs, er...)
				pos, ok := cons.Position(topic, 0)
				return ok && pos.Offset == 12
			})
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			if len(recs) != len(want) {
				t.Fatalf("got %d records %v; want %v", len(recs), recs, want)
			}
			for i, r := range recs {
				if string(r.Value) != want[i] || r.Offset != wantOffsets[i] {
					t.Fatalf("record %d: %q at %d; want %q at %d", i, r.Value, r.Offset, want[i], wantOffsets[i])
				}
			}
			if pos, _ := cons.Position(topic, 0); pos.Epoch != 0 {
				t.Fatalf("position %v; want epoch 0", pos)
			}
			for _, r := range log.all() {
				if _, ok := r.named[0]; ok && (r.isolation == 1) != committed {
					t.Fatalf("fetch with isolation level %d", r.isolation)
				}
			}

			// A plain record after the markers arrives at offset 12.
			produce(t, c, 0, "plain", 1)
			more, _, _ := pollUntil(t, cons, 1, 5*time.Second)
			if len(more) != 1 || more[0].Offset != 12 || string(more[0].Value) != "plain0" {
				t.Fatalf("after the markers: %+v", more)
			}
		})
	}
}

// TestBackpressure: with a small MaxBufferedBytes, lots of data on brokers
// that would answer at once, and a slow Poll, the bytes buffered for Poll
// never exceed the bound by more than one Fetch response, and everything is
// delivered, once, in order.
func TestBackpressure(t *testing.T) {
	const (
		n        = 6 // partitions, two per broker
		records  = 2000
		partMax  = 2 << 10
		maxBytes = 4 << 10
		bound    = 4 << 10
	)
	c := newCluster(t, n)
	log := observeFetches(c)
	for p := int32(0); p < n; p++ {
		produceRange(t, c, p, 0, records, kgo.ProducerBatchMaxBytes(1<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	cons := newConsumer(t, c, consumer.FetchMaxPartitionBytes(partMax), consumer.FetchMaxBytes(maxBytes), consumer.MaxBufferedBytes(bound))
	assignAll(t, cons, n, consumer.At(0))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var recs []consumer.Record
	polls := 0
	for len(recs) < n*records {
		f, err := cons.Poll(ctx)
		if err != nil {
			all := log.all()
			for _, r := range all[max(0, len(all)-8):] {
				t.Logf("%+v", r)
			}
			t.Fatalf("poll: %v after %d records\n%s", err, len(recs), consumer.DebugConsumer(cons))
		}
		if len(f.Truncations)+len(f.Errors) > 0 {
			t.Fatalf("events %v errors %v", f.Truncations, f.Errors)
		}
		recs = append(recs, f.Records...)
		polls++
		time.Sleep(2 * time.Millisecond) // a slow application
		if _, peak := consumer.BufferedBytes(cons); peak > bound+maxBytes {
			t.Fatalf("%d bytes buffered; the bound is %d plus one response of at most %d", peak, bound, maxBytes)
		}
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	for p := int32(0); p < n; p++ {
		from[p], to[p] = 0, records
	}
	checkInOrder(t, recs, from, to)
	_, peak := consumer.BufferedBytes(cons)
	t.Logf("%d records in %d polls; peak buffered %d bytes", len(recs), polls, peak)
	if peak < bound/2 {
		t.Fatalf("peak %d: the buffer never filled; the test does not exercise backpressure", peak)
	}
}

// TestPauseResume: a paused partition gets no records while the other goes
// on; on resume the rest arrives, in order. Pausing right after a Poll (the
// fetch the machine asked for is not sent yet) must not lose that fetch.
func TestPauseResume(t *testing.T) {
	c := newCluster(t, 2)
	produceRange(t, c, 0, 0, 20)
	produceRange(t, c, 1, 0, 20)
	cons := newConsumer(t, c)
	assignAll(t, cons, 2, consumer.At(0))
	recs, _, _ := pollUntil(t, cons, 40, 10*time.Second)
	checkInOrder(t, recs, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 20, 1: 20})

	for round := int64(1); round <= 3; round++ {
		cons.Pause(tp0) // straight after Poll
		produceRange(t, c, 0, 20*round, 20*(round+1))
		produceRange(t, c, 1, 20*round, 20*(round+1))
		got, _, _ := pollUntil(t, cons, 20, 10*time.Second)
		// Give partition 0 every chance to show up.
		more, _, _ := pollUntil(t, cons, 1, 200*time.Millisecond)
		got = append(got, more...)
		checkInOrder(t, got, map[int32]int64{1: 20 * round}, map[int32]int64{1: 20 * (round + 1)})

		cons.Resume(tp0)
		got, _, _ = pollUntil(t, cons, 20, 10*time.Second)
		checkInOrder(t, got, map[int32]int64{0: 20 * round}, map[int32]int64{0: 20 * (round + 1)})
	}

	// Records buffered when the pause comes are held, not delivered, and
	// come first on resume.
	produceRange(t, c, 0, 80, 100)
	waitFor(t, 5*time.Second, "a buffered answer", func() bool {
		now, _ := consumer.BufferedBytes(cons)
		return now > 0
	})
	cons.Pause(tp0)
	expectQuiet(t, cons, 200*time.Millisecond)
	cons.Resume(tp0)
	got, _, _ := pollUntil(t, cons, 20, 10*time.Second)
	checkInOrder(t, got, map[int32]int64{0: 80}, map[int32]int64{0: 100})
}

// TestStartInsideABatch: a start in the middle of a batch gets the records
// from the start on, none before, from uncompressed and compressed batches,
// whether Poll returns one partition's answer or several.
func TestStartInsideABatch(t *testing.T) {
	c := newCluster(t, 2)
	// One batch of 20 records per partition (linger groups them), the
	// second partition compressed.
	produceRange(t, c, 0, 0, 20, kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	produceRange(t, c, 1, 0, 20, kgo.ProducerLinger(50*time.Millisecond), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	for _, both := range []bool{false, true} {
		cons := newConsumer(t, c)
		as := []consumer.Assignment{{Topic: topic, Partition: 0, Start: consumer.At(7)}}
		if both {
			as = append(as, consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(13)})
		}
		if err := cons.Assign(as...); err != nil {
			t.Fatal(err)
		}
		from, to := map[int32]int64{0: 7}, map[int32]int64{0: 20}
		n := 13
		if both {
			from[1], to[1] = 13, 20
			n += 7
		}
		recs, evs, errs := pollUntil(t, cons, n, 10*time.Second)
		if len(evs)+len(errs) > 0 {
			t.Fatalf("events %v errors %v", evs, errs)
		}
		checkInOrder(t, recs, from, to)
		if both {
			// Values of compressed batches outlive the decoding of
			// the batches after them.
			produceRange(t, c, 1, 20, 200, kgo.ProducerBatchMaxBytes(512), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
			more, _, _ := pollUntil(t, cons, 180, 10*time.Second)
			checkInOrder(t, append(recs, more...), from, map[int32]int64{0: 20, 1: 200})
		}
	}
}
