package producer_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/producer"
)

// A non-idempotent producer's acknowledged batches carry no producer
// identity; the ack ledger finds them by their newest batch's offsets and
// CRC. A clean leader change reports nothing, with one Fetch for the
// partition (every range was reported Unconfirmed at every leader change).
func TestLedgerNoIdentityCleanLeaderChange(t *testing.T) {
	c := newCluster(t, 2)
	p, rec := newRecorded(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence())
	ctx := testCtx(t, 20*time.Second)
	for _, v := range []string{"a", "b", "c"} {
		mustOK(t, sendAll(t, ctx, p, prec(0, v)))
	}
	mustOK(t, sendAll(t, ctx, p, prec(1, "x")))

	var mu sync.Mutex
	fetches := map[int32]int{}
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range kr.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				fetches[rp.Partition]++
			}
		}
		return nil, nil, false
	})
	seen := func(part int32) int {
		mu.Lock()
		defer mu.Unlock()
		return fetches[part]
	}
	move := func(part int32) {
		t.Helper()
		if err := c.MoveTopicPartition(topic, part, (c.LeaderFor(topic, part)+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	move(0)
	mustOK(t, sendAll(t, ctx, p, prec(0, "after"))) // the producer learns of the change
	eventually(t, 5*time.Second, "no probe of partition 0", func() bool { return seen(0) > 0 })
	// A barrier: partition 1's check comes after everything partition 0
	// asked (one check at a time, in order).
	move(1)
	mustOK(t, sendAll(t, ctx, p, prec(1, "after")))
	eventually(t, 5*time.Second, "no probe of partition 1", func() bool { return seen(1) > 0 })
	if n := seen(0); n != 1 {
		t.Fatalf("partition 0: %d Fetch requests; want one (the tail)", n)
	}
	wantNoLost(t, rec)
}

// A non-idempotent producer's acknowledged records cut by an unclean
// election are reported lost, exactly them: its batch below the cut is
// found by its CRC, not reported Unconfirmed.
func TestLedgerNoIdentityTruncation(t *testing.T) {
	c := newCluster(t, 1)
	opts := []producer.Opt{producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence()}
	p, rec := newRecorded(t, c, opts...)
	other := newProducer(t, c, opts...)
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))     // offset 0
	mustOK(t, sendAll(t, ctx, other, prec(0, "o1"))) // 1: another producer's
	mustOK(t, sendAll(t, ctx, p, prec(0, "v2")))     // 2
	mustOK(t, sendAll(t, ctx, p, prec(0, "v3")))     // 3 (one range with 2)

	// The new leader's log ends at 2.
	var truncated atomic.Bool
	truncated.Store(true)
	truncateLeader(t, c, &truncated, nil, 2, func(e int32) int32 { return e })
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "after")))
	eventually(t, 5*time.Second, "no lost-write report", func() bool { return len(rec.Lost()) > 0 })
	time.Sleep(50 * time.Millisecond)
	truncated.Store(false)
	lost := rec.Lost()
	if len(lost) != 1 || lost[0].From != 2 || lost[0].To != 4 || lost[0].Unconfirmed || lost[0].Producer.Valid() {
		t.Fatalf("lost %+v; want offsets [2, 4), confirmed lost", lost)
	}
}

// An acknowledgement that arrives after the producer saw a new leader
// epoch, of a batch sent under the old one (a deposed leader that still
// took it, acks=1), is checked at once: the new leader does not have it,
// and it is reported lost. It waited, unchecked, for the next leader
// change, which may never come.
func TestLedgerLateAckOfOldEpochReported(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"))) // offset 0, epoch 0
	id := p.ProducerID()
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "b"))) // offset 1, epoch 1: the change is seen
	eventually(t, 5*time.Second, "leader epoch 1 not seen", func() bool { return producer.LedgerLeaderEpoch(p, topic, 0) == 1 })
	wantNoLost(t, rec)
	// The deposed leader of epoch 0 acknowledges [5, 7), which the log
	// of epoch 1 never had.
	producer.HoldLock(p, func() {
		if err := producer.RecordAckLocked(p, topic, 0, producer.AckedRange{From: 5, To: 7, LeaderEpoch: 0, Producer: id, FirstSequence: 2}); err != nil {
			t.Fatal(err)
		}
	})
	eventually(t, 5*time.Second, "the late acknowledgement's loss not reported", func() bool { return len(rec.Lost()) > 0 })
	if lost := rec.Lost(); len(lost) != 1 || lost[0].From != 5 || lost[0].To != 7 || lost[0].Unconfirmed {
		t.Fatalf("lost %+v; want [5, 7)", lost)
	}
}
