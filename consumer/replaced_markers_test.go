package consumer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
)

// TestReplacedBatchesCompleteAcrossMarkers: a divergence whose replaced
// range starts or ends at a transaction marker (a control batch: it moves
// the position but holds no record delivered) is still described
// completely by the delivered batches. A transactional pipeline's position
// is always past a marker, so this is its usual truncation.
func TestReplacedBatchesCompleteAcrossMarkers(t *testing.T) {
	// Offsets: a0..a4 = 0..4, commit marker 5, b0..b4 = 6..10, commit
	// marker 11: the position is 12.
	for _, tc := range []struct {
		name      string
		divergeAt int64
		first     int64 // the first replaced batch's base
	}{
		{"range ends at a marker", 6, 6},
		{"range starts at a marker", 5, 6},
		{"range holds a marker", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1)
			txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("txn"),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			produceTxn(t, txn, true, "a0", "a1", "a2", "a3", "a4")
			produceTxn(t, txn, true, "b0", "b1", "b2", "b3", "b4")

			cons := newConsumer(t, c, consumer.ReadCommitted(), consumer.DisableFetchSessions())
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
			waitFor(t, 5*time.Second, "the position to pass the last marker", func() bool {
				more, e, er := pollUntil(t, cons, 1, 20*time.Millisecond)
				recs, evs, errs = append(recs, more...), append(evs, e...), append(errs, er...)
				pos, ok := cons.Position(topic, 0)
				return ok && pos.Offset == 12
			})
			if len(recs) != 10 || len(evs)+len(errs) > 0 {
				t.Fatalf("records %d, events %v, errors %v", len(recs), evs, errs)
			}
			pauseIdle(cons)
			answered := make(chan struct{})
			divergeInBand(c, tc.divergeAt, answered)
			cons.Resume(tp0)
			_, evs, errs = pollUntil(t, cons, 0, 10*time.Second)
			<-answered
			if len(evs) != 1 || len(errs) != 0 {
				t.Fatalf("events %v errors %v; want one truncation", evs, errs)
			}
			ev := evs[0]
			if ev.Kind != consumer.Diverged || ev.Replaced != (consumer.Range{From: tc.divergeAt, To: 12}) {
				t.Fatalf("event %v", ev)
			}
			bs := ev.ReplacedBatches
			if len(bs) == 0 || bs[0].Base != tc.first || bs[len(bs)-1].Last != 10 {
				t.Fatalf("replaced batches %+v", bs)
			}
			if !ev.ReplacedBatchesComplete {
				t.Fatalf("replaced batches %+v of %v reported incomplete: every record delivered in the range is described", bs, ev.Replaced)
			}
		})
	}
}
