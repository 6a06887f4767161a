package producer_test

// Component tests of SendOffsetsToTransaction's outcomes: which answers
// make the transaction abortable and how its abort must end.

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// tv1Versions caps EndTxn and TxnOffsetCommit below transactions V2
// (KIP-890 part 2): EndTxn v5 would bump the epoch on every transaction by
// itself, hiding whether the producer bumps when it must, and a coordinator
// with transaction.version 1 (a cluster upgraded from 3.x) never does.
func tv1Versions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return v
}

func tv1() producer.Opt { return producer.TransportOpts(kgo.MaxVersions(tv1Versions())) }

// An AddOffsetsToTxn or TxnOffsetCommit answered UNKNOWN_PRODUCER_ID or
// INVALID_PRODUCER_ID_MAPPING makes the transaction abortable, as the same
// answer to Produce or AddPartitionsToTxn does, and the abort must end with
// a new epoch (Java: abortableErrorIfPossible sets epochBumpRequired); after
// INVALID_PRODUCER_ID_MAPPING the coordinator would refuse EndTxn, so the
// abort is InitProducerId alone. The next transaction then commits.
func TestTxnSendOffsetsUnknownProducerAbortBumps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		key     kmsg.Key
		code    *kerr.Error
		produce bool // a record in the transaction before the offsets
	}{
		{"AddOffsetsToTxn UNKNOWN_PRODUCER_ID, offsets only", kmsg.AddOffsetsToTxn, kerr.UnknownProducerID, false},
		{"AddOffsetsToTxn UNKNOWN_PRODUCER_ID", kmsg.AddOffsetsToTxn, kerr.UnknownProducerID, true},
		{"AddOffsetsToTxn INVALID_PRODUCER_ID_MAPPING", kmsg.AddOffsetsToTxn, kerr.InvalidProducerIDMapping, true},
		{"TxnOffsetCommit UNKNOWN_PRODUCER_ID", kmsg.TxnOffsetCommit, kerr.UnknownProducerID, true},
		{"TxnOffsetCommit INVALID_PRODUCER_ID_MAPPING, offsets only", kmsg.TxnOffsetCommit, kerr.InvalidProducerIDMapping, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1)
			id := "offsets-unknown-pid"
			p, _ := newTxnProducer(t, c, id, tv1())
			ctx := testCtx(t, 15*time.Second)
			g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
			commitTxn(t, ctx, p, prec(0, "a"))
			before := p.ProducerID()

			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if tc.produce {
				mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
			}
			f := kfake.Fault{Keys: []kmsg.Key{tc.key}, Err: tc.code}
			if tc.key == kmsg.AddOffsetsToTxn {
				f.TxnID = id
			} else {
				f.Group = "g"
			}
			c.Fault(f)
			err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5}))
			if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, tc.code) {
				t.Fatalf("SendOffsetsToTransaction: %v; want ErrAbortRequired wrapping %s", err, tc.code.Message)
			}
			ends := observe(c, kmsg.EndTxn)
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("AbortTransaction: %v", err)
			}
			if after := p.ProducerID(); after != (producer.ProducerID{ID: before.ID, Epoch: before.Epoch + 1}) {
				t.Fatalf("identity %v → %v after the abort; want the epoch bumped once", before, after)
			}
			if tc.code == kerr.InvalidProducerIDMapping && ends.Hits() != 0 {
				t.Fatalf("EndTxn sent %d times after INVALID_PRODUCER_ID_MAPPING; the abort is InitProducerId alone", ends.Hits())
			}
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
			if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 9})); err != nil {
				t.Fatal(err)
			}
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			wantCommitted(t, c, "a", "c")
			if o, _ := fetchTxnCommitted(t, ctx, c, "g", 0); o != 9 {
				t.Fatalf("committed offset %d, want 9", o)
			}
		})
	}
}

// The transaction turns abortable (a record expires, buffered: its
// partition never joined the transaction) while SendOffsetsToTransaction is
// retrying AddOffsetsToTxn, and the coordinator then accepts it: the
// coordinator now has the transaction. SendOffsetsToTransaction must not
// stage offsets in it and report success, and the abort must end it at the
// coordinator: left open under the same epoch, the next transaction joins it
// and commits the aborted transaction's offsets (the group then skips what
// they cover).
func TestTxnAddOffsetsAnsweredAfterAbortable(t *testing.T) {
	c := newCluster(t, 2)
	id := "offsets-late-add"
	p, _ := newTxnProducer(t, c, id, tv1(),
		producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(700*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.BeginTransaction(); err != nil { // the group has a committed offset
		t.Fatal(err)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5})); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	busy := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TxnID: id, Err: kerr.ConcurrentTransactions, Count: -1})
	offErr := make(chan error, 1)
	go func() { offErr <- p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{1: 100})) }()
	if err := busy.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Partition 1 cannot join the transaction: its record expires
	// buffered and the transaction turns abortable.
	add := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Topic: topic, Partitions: []int32{1},
		Err: kerr.ConcurrentTransactions, Count: -1})
	lost := sendAsync(t, ctx, p, prec(1, "z"))
	if r := lost.wait(5 * time.Second)[0]; !errors.Is(r.Err, producer.ErrDeliveryTimeout) {
		t.Fatalf("buffered record: %v; want ErrDeliveryTimeout", r.Err)
	}
	busy.Remove()
	oe := <-offErr
	add.Remove()
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	commitTxn(t, ctx, p, prec(0, "next"))
	if o, _ := fetchTxnCommitted(t, ctx, c, "g", 1); o == 100 {
		t.Fatalf("the aborted transaction's offset 100 was committed by the next one (SendOffsetsToTransaction said %v)", oe)
	}
	if !errors.Is(oe, producer.ErrAbortRequired) {
		t.Fatalf("SendOffsetsToTransaction in a transaction that turned abortable: %v; want ErrAbortRequired", oe)
	}
}
