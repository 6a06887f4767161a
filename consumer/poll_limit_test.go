package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/compress"
)

// batches writes n batches of per records, offsets [0, n·per), to
// partition 0 of a new cluster, each batch a Produce of its own (so batch
// boundaries are at the multiples of per).
func batches(t *testing.T, n, per int64, codec compress.Codec) *kfake.Cluster {
	t.Helper()
	c := newCluster(t, 1)
	for i := range n {
		produceOneBatch(t, c, 0, per*i, per*i+per, codec)
	}
	return c
}

// pollOnce polls until a Poll returns records, and returns them.
func pollOnce(t *testing.T, cons *consumer.Consumer) consumer.Fetches {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Truncations)+len(f.Errors) > 0 {
			t.Fatalf("events %v errors %v", f.Truncations, f.Errors)
		}
		if len(f.Records) > 0 {
			return f
		}
	}
}

// MaxPollRecords bounds each Poll at a batch boundary, within one fetched
// answer: the rest of the answer waits for the next Poll rather than being
// fetched again, and every record still arrives once, in order.
func TestMaxPollRecordsSplitsAnswers(t *testing.T) {
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			c := batches(t, 20, 10, codec)
			log := observeFetches(c)
			cons := newConsumer(t, c, consumer.MaxPollRecords(25))
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			var all []consumer.Record
			polls := 0
			for len(all) < 200 {
				f := pollOnce(t, cons)
				polls++
				// 25 is reached within the third batch of 10:
				// whole batches, 30 records at most.
				if n := len(f.Records); n > 30 || n%10 != 0 || f.Records[0].Offset%10 != 0 {
					t.Fatalf("poll %d: %d records from offset %d; want whole batches, at most 30", polls, n, f.Records[0].Offset)
				}
				all = append(all, f.Records...)
			}
			checkInOrder(t, all, map[int32]int64{0: 0}, map[int32]int64{0: 200})
			asked := 0
			for _, r := range log.all() {
				if rp, ok := r.named[0]; ok && rp.FetchOffset < 200 {
					asked++
				}
			}
			if asked >= polls {
				t.Errorf("%d Fetches below the end for %d polls: the answers were not split across polls", asked, polls)
			}
			if now, _ := consumer.BufferedBytes(cons); now != 0 {
				t.Errorf("%d bytes still counted as buffered after everything was delivered", now)
			}
		})
	}
}

// Each Poll of a split answer owns the decompressed batches it delivered:
// releasing one Poll does not touch the records of the next, taken from
// the same answer.
func TestMaxPollRecordsReleaseIsPerPoll(t *testing.T) {
	// Batches of 100 records: large enough for zstd to shrink them (a
	// batch that does not shrink is written uncompressed, and its values
	// alias the fetch answer rather than a released buffer).
	c := batches(t, 10, 100, compress.Zstd)
	cons := newConsumer(t, c, consumer.MaxPollRecords(100), consumer.PoisonReleased())
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	first := pollOnce(t, cons)
	second := pollOnce(t, cons)
	if len(first.Records) != 100 || len(second.Records) != 100 || second.Records[0].Offset != 100 {
		t.Fatalf("polls of %d and %d records (second from %d); want one batch each", len(first.Records), len(second.Records), second.Records[0].Offset)
	}
	kept := first.Records[0]
	first.Release()
	if !bytes.Equal(kept.Value, bytes.Repeat([]byte{0xa5}, len(kept.Value))) {
		t.Fatalf("the released poll's value reads %q, not the poison", kept.Value)
	}
	for _, r := range second.Records {
		if want := fmt.Sprintf("p0-%d", r.Offset); string(r.Value) != want {
			t.Fatalf("after releasing the first poll, record %d of the second reads %q, want %q", r.Offset, r.Value, want)
		}
	}
	second.Release()
}

// A seek, and a pause, in the middle of a split answer: a seek drops the
// rest (nothing of it is delivered, nothing stays counted), a pause keeps
// it for after the resume.
func TestMaxPollRecordsSeekAndPauseMidAnswer(t *testing.T) {
	t.Run("seek", func(t *testing.T) {
		c := batches(t, 10, 10, compress.None)
		cons := newConsumer(t, c, consumer.MaxPollRecords(10))
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
			t.Fatal(err)
		}
		if f := pollOnce(t, cons); len(f.Records) != 10 {
			t.Fatalf("first poll: %d records", len(f.Records))
		}
		// Paused, so that the answer from 55 cannot be counted before
		// the check (unpaused, it sometimes was: seen once under -race).
		cons.Pause(tp0)
		if err := cons.Seek(topic, 0, 55); err != nil {
			t.Fatal(err)
		}
		if now, _ := consumer.BufferedBytes(cons); now != 0 {
			t.Errorf("%d bytes still counted as buffered after the seek", now)
		}
		cons.Resume(tp0)
		var rest []consumer.Record
		for len(rest) < 45 {
			rest = append(rest, pollOnce(t, cons).Records...)
		}
		checkInOrder(t, rest, map[int32]int64{0: 55}, map[int32]int64{0: 100})
	})
	t.Run("pause", func(t *testing.T) {
		c := batches(t, 10, 10, compress.None)
		log := observeFetches(c)
		cons := newConsumer(t, c, consumer.MaxPollRecords(10))
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
			t.Fatal(err)
		}
		all := pollOnce(t, cons).Records
		cons.Pause(tp0)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		f, err := cons.Poll(ctx)
		cancel()
		if err == nil && len(f.Records) > 0 {
			t.Fatalf("a paused partition delivered %d records", len(f.Records))
		}
		cons.Resume(tp0)
		for len(all) < 100 {
			all = append(all, pollOnce(t, cons).Records...)
		}
		checkInOrder(t, all, map[int32]int64{0: 0}, map[int32]int64{0: 100})
		for _, r := range log.all() {
			if rp, ok := r.named[0]; ok && rp.FetchOffset > 0 && rp.FetchOffset < 100 {
				t.Errorf("Fetch from %d: the rest of the paused answer was fetched again", rp.FetchOffset)
			}
		}
	})
}

// Polls running at once may each take a piece of the same answer: every
// record is delivered once, with its own value, whichever Poll makes it
// (the answer's Refs are pooled only after the last Poll reading them).
func TestMaxPollRecordsConcurrentPolls(t *testing.T) {
	const total = 3000
	c := batches(t, total/100, 100, compress.Zstd)
	cons := newConsumer(t, c, consumer.MaxPollRecords(100))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[int64]int{}
		bad  []string
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(seen) >= total
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				f, err := cons.Poll(pctx)
				pcancel()
				if err != nil {
					continue
				}
				mu.Lock()
				for _, r := range f.Records {
					seen[r.Offset]++
					if want := fmt.Sprintf("p0-%d", r.Offset); string(r.Value) != want {
						bad = append(bad, fmt.Sprintf("%d: %q", r.Offset, r.Value))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d records with another record's value, e.g. %s", len(bad), bad[0])
	}
	for o := int64(0); o < total; o++ {
		if seen[o] != 1 {
			t.Fatalf("offset %d delivered %d times", o, seen[o])
		}
	}
}

// A random walk of Polls with a random MaxPollRecords, seeks, pauses and
// releases, over two partitions of batches of random sizes (zstd and
// uncompressed): every Poll delivers each partition's records contiguously
// from where the last Poll or seek left it, with their own values; no
// paused partition delivers; releasing one Poll never disturbs the records
// of another still held; and once all is read nothing stays counted as
// buffered.
func TestPollLimitRandomWalk(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newCluster(t, 2)
			var total [2]int64
			for p := range int32(2) {
				for range 25 {
					n := 1 + rng.Int64N(40)
					codec := compress.None
					if rng.IntN(2) == 0 {
						codec = compress.Zstd
					}
					produceOneBatch(t, c, p, total[p], total[p]+n, codec)
					total[p] += n
				}
			}
			limit := 1 + rng.IntN(60)
			cons := newConsumer(t, c, consumer.MaxPollRecords(limit), consumer.PoisonReleased())
			var as []consumer.Assignment
			for p := range int32(2) {
				as = append(as, consumer.Assignment{Topic: topic, Partition: p, Start: consumer.At(0)})
			}
			if err := cons.Assign(as...); err != nil {
				t.Fatal(err)
			}
			var (
				next   [2]int64
				paused [2]bool
				held   []consumer.Fetches
			)
			check := func(what string, recs []consumer.Record) {
				t.Helper()
				for _, r := range recs {
					if want := value(r.Partition, r.Offset); string(r.Value) != want {
						t.Fatalf("seed %d limit %d, %s: record %d/%d reads %q, want %q", seed, limit, what, r.Partition, r.Offset, r.Value, want)
					}
				}
			}
			poll := func(d time.Duration) {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				f, err := cons.Poll(ctx)
				if err != nil {
					return
				}
				if len(f.Truncations)+len(f.Errors) > 0 {
					t.Fatalf("events %v errors %v", f.Truncations, f.Errors)
				}
				if n := len(f.Records); n > limit+39 {
					t.Fatalf("seed %d: a Poll of %d records with limit %d and batches of at most 40", seed, n, limit)
				}
				check("polled", f.Records)
				for _, r := range f.Records {
					if paused[r.Partition] {
						t.Fatalf("seed %d: paused partition %d delivered offset %d", seed, r.Partition, r.Offset)
					}
					if r.Offset != next[r.Partition] {
						t.Fatalf("seed %d limit %d: partition %d delivered %d, want %d", seed, limit, r.Partition, r.Offset, next[r.Partition])
					}
					next[r.Partition]++
				}
				held = append(held, f)
				for len(held) > 0 && (len(held) > 3 || rng.IntN(2) == 0) {
					i := rng.IntN(len(held))
					held[i].Release()
					held = append(held[:i], held[i+1:]...)
					for _, h := range held {
						check("held after another Poll's Release", h.Records)
					}
				}
			}
			for range 150 {
				p := int32(rng.IntN(2))
				switch r := rng.IntN(10); {
				case r < 7:
					poll(30 * time.Millisecond)
				case r == 7:
					to := rng.Int64N(total[p] + 1)
					if err := cons.Seek(topic, p, to); err != nil {
						t.Fatal(err)
					}
					next[p] = to
				case r == 8:
					cons.Pause(consumer.TopicPartition{Topic: topic, Partition: p})
					paused[p] = true
				default:
					cons.Resume(consumer.TopicPartition{Topic: topic, Partition: p})
					paused[p] = false
				}
			}
			cons.Resume(consumer.TopicPartition{Topic: topic, Partition: 0}, consumer.TopicPartition{Topic: topic, Partition: 1})
			paused = [2]bool{}
			deadline := time.Now().Add(10 * time.Second)
			for next != total {
				if time.Now().After(deadline) {
					t.Fatalf("seed %d: read up to %v of %v", seed, next, total)
				}
				poll(100 * time.Millisecond)
			}
			for _, h := range held {
				h.Release()
			}
			if now, _ := consumer.BufferedBytes(cons); now != 0 {
				t.Errorf("seed %d: %d bytes counted as buffered after everything was read", seed, now)
			}
		})
	}
}

// A cooperative rebalance while the first member is in the middle of its
// answers (a small MaxPollRecords, and a member that works on each Poll):
// the partitions that move drop what was left of theirs, the new owner
// starts at the commit made on revoke, and between them every record is
// delivered, none twice except those of a moved partition.
func TestMaxPollRecordsRebalanceMidAnswer(t *testing.T) {
	c := newCluster(t, 4)
	for p := range int32(4) {
		for i := range int64(40) {
			produceOneBatch(t, c, p, 3*i, 3*i+3, compress.None)
		}
	}
	seq := 0
	subscribe := func(cons *consumer.Consumer) error { return cons.Subscribe(topic) }
	m1 := startMemberPausing(t, c, "m1", "g-limit", &seq, subscribe, 5*time.Millisecond, consumer.MaxPollRecords(4))
	waitFor(t, 10*time.Second, "m1 owns 4", func() bool { return m1.log.ownedCount() == 4 })
	waitFor(t, 10*time.Second, "m1 read 40 records", func() bool { r, _ := m1.got(); return len(r) >= 40 })
	if r, _ := m1.got(); len(r) >= 480 {
		t.Fatal("m1 read everything before the rebalance; the test did not split answers across it")
	}
	m2 := startMember(t, c, "m2", "g-limit", &seq, consumer.MaxPollRecords(4))
	waitFor(t, 15*time.Second, "2 partitions each", func() bool { return m1.log.ownedCount() == 2 && m2.log.ownedCount() == 2 })
	waitBetween(t, 20*time.Second, 480, m1, m2)
	m1.halt()
	m2.halt()
	dups := checkDelivered(t, m1, m2, 4, 120)
	t.Logf("%d records delivered twice; m1 %v, m2 %v", dups, m1.log.log(), m2.log.log())
	// The partitions m1 kept never moved: each of their records once.
	a, _ := m1.got()
	b, _ := m2.got()
	seen := map[consumer.TopicPartition]map[int64]int{}
	for _, r := range append(a, b...) {
		tp := consumer.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if seen[tp] == nil {
			seen[tp] = map[int64]int{}
		}
		seen[tp][r.Offset]++
	}
	m1.log.mu.Lock()
	kept := maps.Clone(m1.log.owned)
	m1.log.mu.Unlock()
	for tp := range kept {
		for o, n := range seen[tp] {
			if n != 1 {
				t.Errorf("%v (kept by m1) delivered offset %d %d times", tp, o, n)
			}
		}
	}
	for _, m := range []*member{m1, m2} {
		if now, _ := consumer.BufferedBytes(m.cons); now != 0 {
			t.Errorf("%s: %d bytes counted as buffered after everything was read", m.name, now)
		}
	}
}
