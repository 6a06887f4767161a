package consumer_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/consumer"
)

// divergeInBand installs a Fetch control that answers, once, the first
// request naming partition 0 with LastFetchedEpoch 0 at an offset past `to`
// with DivergingEpoch{0, to}: what a v12+ leader whose epoch 0 ends at `to`
// says (kfake does not implement it).
func divergeInBand(c *kfake.Cluster, to int64, answered chan<- struct{}) {
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition != 0 || rp.LastFetchedEpoch != 0 || rp.FetchOffset <= to {
					continue
				}
				resp := fetchAnswer(req, rp.FetchOffset, nil)
				resp.Topics[0].Topic, resp.Topics[0].TopicID = rt.Topic, rt.TopicID
				resp.Topics[0].Partitions[0].DivergingEpoch.Epoch = 0
				resp.Topics[0].Partitions[0].DivergingEpoch.EndOffset = to
				resp.SessionID = 0 // kfake did not see this request: start a new session
				close(answered)
				return resp, nil, true
			}
		}
		c.KeepControl()
		return nil, nil, false
	})
}

// TestDivergingEpochInBand: a Fetch answered with DivergingEpoch is a
// truncation with the same report as the OffsetForLeaderEpoch path gives
// for the same log, and the consumer rewinds to the divergence point. Every
// fetch after the first batch carries LastFetchedEpoch.
func TestDivergingEpochInBand(t *testing.T) {
	const to = 12
	report := map[string]consumer.TruncationEvent{}
	for _, path := range []string{"DivergingEpoch", "OffsetForLeaderEpoch"} {
		t.Run(path, func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeFetches(c)
			produceRange(t, c, 0, 0, 30)
			// Without fetch sessions every Fetch names the partition,
			// so the control sees the first one after the resume (an
			// incremental request may leave an unchanged partition out).
			cons := newConsumer(t, c, consumer.DisableFetchSessions())
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
				t.Fatal(err)
			}
			if recs, _, _ := pollUntil(t, cons, 30, 10*time.Second); len(recs) != 30 {
				t.Fatalf("got %d records", len(recs))
			}
			pauseIdle(cons)
			answered := make(chan struct{})
			if path == "DivergingEpoch" {
				divergeInBand(c, to, answered)
			} else {
				// The same log seen through validation: an
				// OFFSET_OUT_OF_RANGE makes the consumer ask
				// OffsetForLeaderEpoch(0), answered (0, 12).
				truncate(c, to)
				h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Partitions: []int32{0}, Err: kerr.OffsetOutOfRange})
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if h.Wait(ctx, 1) == nil {
						close(answered)
					}
				}()
			}
			cons.Resume(tp0)
			recs, evs, errs := pollUntil(t, cons, 18, 10*time.Second)
			select {
			case <-answered:
			case <-time.After(time.Second):
				t.Fatal("the control never answered")
			}
			if len(evs) != 1 || len(errs) != 0 {
				t.Fatalf("events %v errors %v; want one truncation", evs, errs)
			}
			ev := evs[0]
			if ev.Kind != consumer.Diverged || ev.Consumed != (consumer.Position{Offset: 30, Epoch: 0}) || ev.Divergent.Offset != to ||
				ev.Replaced != (consumer.Range{From: to, To: 30}) || ev.Halted {
				t.Fatalf("event %v (%+v)", ev, ev)
			}
			checkReplacedBatches(t, ev)
			// The two runs produce on clusters of their own: the
			// batches' identities and CRCs differ.
			ev.ReplacedBatches = nil
			report[path] = ev
			// kfake did not really truncate: the rewind reads 12..29 again.
			checkInOrder(t, recs, map[int32]int64{0: to}, map[int32]int64{0: 30})

			// LastFetchedEpoch: -1 before the first batch (the start came
			// from ListOffsets), the position's epoch on every fetch after.
			for i, r := range log.all() {
				rp, ok := r.named[0]
				if !ok {
					continue
				}
				if rp.FetchOffset == 0 && rp.LastFetchedEpoch != -1 {
					t.Errorf("request %d: first fetch with LastFetchedEpoch %d", i, rp.LastFetchedEpoch)
				}
				if rp.FetchOffset > 0 && rp.LastFetchedEpoch != 0 {
					t.Errorf("request %d: fetch at %d with LastFetchedEpoch %d, want 0", i, rp.FetchOffset, rp.LastFetchedEpoch)
				}
			}
		})
	}
	if a, b := report["DivergingEpoch"], report["OffsetForLeaderEpoch"]; !reflect.DeepEqual(a, b) {
		t.Fatalf("the two paths disagree:\n  in-band    %+v\n  validation %+v", a, b)
	}
}

// TestOlderBrokerFetchV11: against a broker with Fetch v11 (Kafka 2.6: no
// LastFetchedEpoch, no topic ids) the consumer consumes, and a truncation
// is still detected through OffsetForLeaderEpoch after a leader change.
func TestOlderBrokerFetchV11(t *testing.T) {
	c := newClusterWith(t, 1, kfake.MaxVersions(kversion.V2_6_0()))
	log := observeFetches(c)
	produceRange(t, c, 0, 0, 30)
	cons := newConsumer(t, c)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 30, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 30})
	for _, r := range log.all() {
		if r.version > 11 {
			t.Fatalf("Fetch v%d sent to a 2.6 broker", r.version)
		}
	}
	if pos, ok := cons.Position(topic, 0); !ok || pos != (consumer.Position{Offset: 30, Epoch: 0}) {
		t.Fatalf("position %v", pos)
	}

	truncate(c, 12)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs = pollUntil(t, cons, 18, 10*time.Second)
	if len(evs) != 1 || len(errs) != 0 {
		t.Fatalf("events %v errors %v; want one truncation", evs, errs)
	}
	if ev := evs[0]; ev.Kind != consumer.Diverged || ev.Consumed.Offset != 30 || ev.Divergent.Offset != 12 || ev.Replaced != (consumer.Range{From: 12, To: 30}) {
		t.Fatalf("event %v", ev)
	}
	checkInOrder(t, recs, map[int32]int64{0: 12}, map[int32]int64{0: 30})
}

// checkReplacedBatches requires ev.ReplacedBatches to be complete and to
// cover exactly the batches holding ev.Replaced, in order and without
// overlaps, each with its producer identity and CRC.
func checkReplacedBatches(t *testing.T, ev consumer.TruncationEvent) {
	t.Helper()
	bs := ev.ReplacedBatches
	if !ev.ReplacedBatchesComplete || len(bs) == 0 {
		t.Fatalf("replaced batches %+v, complete %v", bs, ev.ReplacedBatchesComplete)
	}
	if bs[0].Base > ev.Replaced.From || bs[0].Last < ev.Replaced.From || bs[len(bs)-1].Last != ev.Replaced.To-1 {
		t.Fatalf("replaced batches %+v do not span %v", bs, ev.Replaced)
	}
	for i, b := range bs {
		if b.Records < 1 || b.Last < b.Base || b.CRC == 0 || b.ProducerID < 0 || b.BaseSequence < 0 || b.LeaderEpoch != 0 {
			t.Fatalf("replaced batch %d: %+v", i, b)
		}
		if i > 0 && b.Base != bs[i-1].Last+1 {
			t.Fatalf("replaced batches %d and %d do not follow each other: %+v", i-1, i, bs)
		}
	}
}
