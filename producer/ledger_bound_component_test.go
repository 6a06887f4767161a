package producer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/producer"
)

// With the ack ledger's bound reached (AckLedgerRanges), a truncation that
// takes the oldest range it still holds is reported with the offsets the
// bound dropped below it: OnAckedWritesLost hears of them as Unconfirmed
// and Untracked, instead of nothing (they may be gone, and the ledger can
// no longer tell).
func TestLedgerBoundReportsDroppedOffsets(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond), producer.AckLedgerRanges(1))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))
	// Another producer's record between ours: two ranges, the first
	// dropped by the bound.
	if err := oracle(t, c).ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 1, 3)...))
	id := p.ProducerID()
	var truncated atomic.Bool
	truncated.Store(true)
	// The new leader's log is empty: epoch 0 ended at 0.
	truncateLeader(t, c, &truncated, nil, 0, func(e int32) int32 { return min(e, 1) })
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no reports", func() bool { return len(rec.Lost()) >= 2 })
	truncated.Store(false)
	l := rec.Lost()
	if len(l) != 2 {
		t.Fatalf("reports %+v", l)
	}
	if x := l[0]; x.From != 2 || x.To != 4 || x.Producer != id || x.Unconfirmed || x.Untracked {
		t.Fatalf("lost %+v; want offsets [2, 4) of %v", x, id)
	}
	if x := l[1]; x.From != 0 || x.To != 1 || !x.Unconfirmed || !x.Untracked || x.Producer.Valid() || x.CurrentLeaderEpoch != 1 {
		t.Fatalf("untracked %+v; want the dropped offsets [0, 1), unconfirmed", x)
	}
}

// A new leader that cannot place the epoch acknowledged writes were made in
// (OffsetForLeaderEpoch answers -1/-1: the whole epoch may be gone) and
// whose log no longer holds them: the ranges are probed at their offsets
// and reported lost, exactly, instead of left unchecked until another
// leader change.
func TestUndefinedEpochEndProbesAckedWrites(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	for i := range 3 {
		mustOK(t, sendAll(t, ctx, p, prec(0, fmt.Sprintf("v%d", i))))
	}
	id := p.ProducerID()
	var truncated atomic.Bool
	truncated.Store(true)
	// The new leader (epoch 1) has an empty log and knows no epoch
	// before its own: (-1, 0) for epoch 0, (1, 0) for epoch 1.
	truncateLeader(t, c, &truncated, nil, 0, func(e int32) int32 {
		if e < 1 {
			return -1
		}
		return e
	})
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no lost-write report", func() bool { return len(rec.Lost()) > 0 })
	truncated.Store(false)
	l := rec.Lost()
	if len(l) != 1 || l[0].From != 0 || l[0].To != 3 || l[0].Producer != id || l[0].Unconfirmed || l[0].CurrentLeaderEpoch != 1 {
		t.Fatalf("lost %+v; want offsets [0, 3) of %v", l, id)
	}
}
