package consumer

import (
	"testing"
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
