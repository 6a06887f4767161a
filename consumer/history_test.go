package consumer

import (
	"testing"

	"github.com/kepoch/kepoch/seek"
)

func batchAt(base, last int64) DeliveredBatch {
	return DeliveredBatch{Base: base, Last: last, ProducerID: 7, BaseSequence: int32(base), CRC: uint32(base + 1), Records: int32(last - base + 1)}
}

func TestDeliveryHistory(t *testing.T) {
	var p part
	for b := int64(0); b < 50; b += 10 {
		p.remember(batchAt(b, b+9), 4)
	}
	// The limit drops the oldest: [10..49] remain.
	if len(p.history) != 4 || p.history[0].Base != 10 {
		t.Fatalf("history %+v", p.history)
	}
	// Reading again from 25 (a seek back): the batch holding 25 comes
	// again, and replaces everything from it on.
	p.remember(batchAt(20, 29), 4)
	if len(p.history) != 2 || p.history[0].Base != 10 || p.history[1].Base != 20 {
		t.Fatalf("history after a seek back %+v", p.history)
	}
	p.remember(batchAt(30, 39), 4)

	// A divergence at 32 replacing [32,40): the batch holding those
	// offsets, complete; the history keeps what is still in the log.
	bs, complete := p.replaced(Range{From: 32, To: 40})
	if !complete || len(bs) != 1 || bs[0] != batchAt(30, 39) {
		t.Fatalf("replaced %+v complete %v", bs, complete)
	}
	if len(p.history) != 2 || p.history[1].Last != 29 {
		t.Fatalf("history after the report %+v", p.history)
	}

	// A replaced range older than the history reaches: incomplete.
	bs, complete = p.replaced(Range{From: 5, To: 25})
	if complete || len(bs) != 2 {
		t.Fatalf("replaced %+v complete %v; want both batches, incomplete", bs, complete)
	}
	// Nothing delivered in the range (delivered before a restart).
	var fresh part
	if bs, complete := fresh.replaced(Range{From: 10, To: 20}); complete || bs != nil {
		t.Fatalf("fresh partition: %+v %v", bs, complete)
	}
	if bs, complete := fresh.replaced(Range{}); !complete || bs != nil {
		t.Fatalf("empty range: %+v %v", bs, complete)
	}
	// DeliveryHistory(0) keeps nothing.
	fresh.remember(batchAt(0, 9), 0)
	if len(fresh.history) != 0 {
		t.Fatal("history kept with a limit of 0")
	}
}

// Offsets between delivered batches that held no delivered record (a
// transaction marker, an aborted transaction, a compaction gap) do not make
// a replaced range incomplete; records delivered that the history no
// longer lists do.
func TestDeliveryHistoryGaps(t *testing.T) {
	var p part
	p.remember(batchAt(0, 4), 4)   // marker at 5
	p.remember(batchAt(6, 10), 4)  // marker at 11, aborted 12..14
	p.remember(batchAt(20, 24), 4) // compacted 15..19
	for _, r := range []Range{{From: 5, To: 25}, {From: 11, To: 25}, {From: 3, To: 12}, {From: 12, To: 15}} {
		if _, complete := p.clone().replaced(r); !complete {
			t.Fatalf("%v: incomplete", r)
		}
	}
	// The limit drops batch 0..4: records 0..4 are no longer listed.
	p.remember(batchAt(25, 29), 3)
	if _, complete := p.clone().replaced(Range{From: 4, To: 30}); complete {
		t.Fatal("a range reaching a dropped batch is complete")
	}
	if _, complete := p.clone().replaced(Range{From: 5, To: 30}); !complete {
		t.Fatal("a range past the dropped batch is incomplete")
	}
	// A divergence inside batch 20..24 drops it: its records 20..21 stay
	// in the log but are no longer listed.
	if _, complete := p.replaced(Range{From: 22, To: 30}); !complete {
		t.Fatal("incomplete")
	}
	if _, complete := p.clone().replaced(Range{From: 21, To: 22}); complete {
		t.Fatal("a range holding records of the dropped batch is complete")
	}
	// A seek back below everything starts the history again there.
	p.remember(batchAt(0, 4), 3)
	if bs, complete := p.clone().replaced(Range{From: 2, To: 5}); !complete || len(bs) != 1 {
		t.Fatalf("after a seek back: %+v %v", bs, complete)
	}
	// A break without a divergence point drops everything; the reset
	// that follows delivers from elsewhere: nothing before it is listed.
	if _, complete := p.replaced(Range{From: -1, To: 5}); complete {
		t.Fatal("a range of unknown start is complete")
	}
	p.remember(batchAt(100, 109), 3)
	if _, complete := p.clone().replaced(Range{From: 50, To: 110}); complete {
		t.Fatal("a range reaching before the reset is complete")
	}
}

func (p *part) clone() *part {
	q := *p
	q.history = append([]DeliveredBatch(nil), p.history...)
	return &q
}

// The epoch history follows the position: a batch delivered from where it
// ends extends it, one delivered after a seek back cuts it there first, one
// delivered after a jump forward (a seek, a reset) starts it afresh.
func TestEpochHistoryFollowsThePosition(t *testing.T) {
	p := part{epochs: seek.NewEpochHistory(0)}
	p.observeEpochs(0, DeliveredBatch{Base: 0, Last: 9, LeaderEpoch: 1})
	p.observeEpochs(10, DeliveredBatch{Base: 10, Last: 19, LeaderEpoch: 2})
	p.observeEpochs(20, DeliveredBatch{Base: 25, Last: 29, LeaderEpoch: 2}) // compaction gap
	if got := p.epochs.String(); got != "[e1:0 e2:10)30" {
		t.Fatalf("delivered in order: %s", got)
	}
	// A seek back to 5: the batch holding 5 comes again.
	p.observeEpochs(5, DeliveredBatch{Base: 0, Last: 9, LeaderEpoch: 1})
	if got := p.epochs.String(); got != "[e1:0)10" {
		t.Fatalf("after a seek back: %s", got)
	}
	// A jump forward to 50: nothing is known of 10..49.
	p.observeEpochs(50, DeliveredBatch{Base: 48, Last: 59, LeaderEpoch: 3})
	if got := p.epochs.String(); got != "[e3:48)60" {
		t.Fatalf("after a jump forward: %s", got)
	}
	// A stored history seeds it (AtHistory cut it at its offset).
	stored, _ := seek.EpochHistoryOf([]seek.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 4, StartOffset: 30}}, 40, 0)
	p.seedEpochs(seek.AtHistory(35, stored), 8)
	p.observeEpochs(35, DeliveredBatch{Base: 33, Last: 39, LeaderEpoch: 4})
	if got := p.epochs.String(); got != "[e1:0 e4:30)40" || p.epochs.Size() != 8 {
		t.Fatalf("seeded: %s (size %d)", got, p.epochs.Size())
	}
	// Other starts leave it to delivery.
	p.seedEpochs(seek.AtEpoch(10, 1), 8)
	if got := p.epochs.String(); got != "[e1:0 e4:30)40" {
		t.Fatalf("AtEpoch reseeded: %s", got)
	}
}

// The epoch history names the topic ID its batches were fetched under: a
// seeded history keeps the ID it was stored with, and a batch of another
// incarnation (the topic recreated) starts it afresh under the new ID.
func TestEpochHistoryNamesTheTopicID(t *testing.T) {
	a, b := seek.TopicID{1}, seek.TopicID{2}
	stored, _ := seek.EpochHistoryOf([]seek.EpochEntry{{Epoch: 3, StartOffset: 0}}, 20, 0)
	stored.SetTopicID(a)
	p := part{epochs: seek.NewEpochHistory(0), topicID: a}
	p.seedEpochs(seek.AtHistory(20, stored), 0)
	if p.epochs.TopicID() != a {
		t.Fatalf("seeded history names %x, want %x", p.epochs.TopicID(), a)
	}
	p.observeEpochs(20, DeliveredBatch{Base: 20, Last: 29, LeaderEpoch: 3})
	if got := p.epochs.String(); got != "[e3:0)30" || p.epochs.TopicID() != a {
		t.Fatalf("same incarnation: %s of %x", got, p.epochs.TopicID())
	}
	p.topicID = b
	p.observeEpochs(30, DeliveredBatch{Base: 0, Last: 4, LeaderEpoch: 0})
	if got := p.epochs.String(); got != "[e0:0)5" || p.epochs.TopicID() != b {
		t.Fatalf("new incarnation: %s of %x", got, p.epochs.TopicID())
	}
}
