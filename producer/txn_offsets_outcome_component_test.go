package producer_test

// Component tests of SendOffsetsToTransaction's outcomes: which answers
// make the transaction abortable and how its abort must end, and what a
// TxnOffsetCommit that may have been applied without an answer implies.

import (
	"sync/atomic"
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

// A TxnOffsetCommit that may have been applied without its answer reaching
// the producer (no answer before the request timeout, or a connection lost
// after the write, which the transport resends by itself) may also be
// applied late: a delayed copy reaching the group coordinator during the
// next transaction, under the same producer epoch, is staged in it and
// committed with it, replacing that transaction's own offsets with older
// ones (re-reads) or the aborted transaction's (skips). So such a
// transaction ends with a new epoch (as after a lost EndTxn answer,
// KAFKA-17754): the delayed copy is then fenced. The copy is replayed here
// by the test's own client, with the bytes of the lost attempt.
func TestTxnOffsetCommitLostAnswerFencesLateCopy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dropAll bool // every attempt loses its answer: the call fails, the transaction aborts
	}{
		{"no answer, aborted", true},
		{"resent by the transport, committed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			// Without any answer the call ends at the request timeout:
			// short, so that the test is. The transport resends after
			// its retry backoff (about 250 ms, more under load), which
			// a timeout that short cut off (failed 4 runs in 30 under
			// -race).
			timeout := 5 * time.Second
			if tc.dropAll {
				timeout = 300 * time.Millisecond
			}
			p, _ := newTxnProducer(t, c, "offsets-lost-answer", tv1(), producer.RequestTimeout(timeout))
			ctx := testCtx(t, 20*time.Second)
			g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))

			var first atomic.Pointer[kmsg.TxnOffsetCommitRequest]
			var drop atomic.Bool
			drop.Store(true)
			c.ControlKey(int16(kmsg.TxnOffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if !drop.Load() {
					return nil, nil, false
				}
				first.CompareAndSwap(nil, kr.(*kmsg.TxnOffsetCommitRequest))
				if !tc.dropAll {
					drop.Store(false)
				}
				return nil, errors.New("connection lost before the answer"), true
			})
			err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{1: 100}))
			drop.Store(false)
			if tc.dropAll {
				if !errors.Is(err, producer.ErrAbortRequired) {
					t.Fatalf("SendOffsetsToTransaction without an answer: %v; want ErrAbortRequired", err)
				}
				if err := p.AbortTransaction(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				if err != nil {
					t.Fatalf("SendOffsetsToTransaction resent by the transport: %v", err)
				}
				if err := p.CommitTransaction(ctx); err != nil {
					t.Fatal(err)
				}
			}
			late := first.Load()
			if late == nil {
				t.Fatal("no TxnOffsetCommit seen")
			}

			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
			if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{1: 200})); err != nil {
				t.Fatal(err)
			}
			cl := oracle(t, c, kgo.MaxVersions(tv1Versions()))
			defer cl.Close()
			resp, err := late.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			if o, _ := fetchTxnCommitted(t, ctx, c, "g", 1); o != 200 {
				code := int16(-1)
				if len(resp.Topics) > 0 && len(resp.Topics[0].Partitions) > 0 {
					code = resp.Topics[0].Partitions[0].ErrorCode
				}
				t.Fatalf("committed offset %d, want 200: the delayed copy of the earlier transaction's TxnOffsetCommit (answered %v) was staged in this one", o, kerr.ErrorForCode(code))
			}
		})
	}
}

// Offsets answers that no later transaction can fare better with are fatal,
// as in Java's TransactionManager: UNSUPPORTED_FOR_MESSAGE_FORMAT to
// TxnOffsetCommit (the group's offsets topic cannot hold transactional
// offsets; taken as abortable, every transaction aborted on it in turn),
// and INVALID_TXN_STATE (the coordinator's transaction is not the one the
// producer runs: fatal on AddPartitionsToTxn and EndTxn too; taken as
// abortable, the abort went on as if the producer's view held).
func TestTxnOffsetsFatalAnswers(t *testing.T) {
	for _, tc := range []struct {
		key  kmsg.Key
		code *kerr.Error
	}{
		{kmsg.TxnOffsetCommit, kerr.UnsupportedForMessageFormat},
		{kmsg.AddOffsetsToTxn, kerr.InvalidTxnState},
		{kmsg.TxnOffsetCommit, kerr.InvalidTxnState},
	} {
		t.Run(kmsg.NameForKey(int16(tc.key))+" "+tc.code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			id := "offsets-fatal"
			p, _ := newTxnProducer(t, c, id)
			ctx := testCtx(t, 10*time.Second)
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
			f := kfake.Fault{Keys: []kmsg.Key{tc.key}, Err: tc.code}
			if tc.key == kmsg.AddOffsetsToTxn {
				f.TxnID = id
			} else {
				f.Group = "g"
			}
			c.Fault(f)
			err := p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: "g", GenerationID: -1}, txnOffsets(map[int32]int64{0: 5}))
			if !errors.Is(err, producer.ErrProducerFatal) || !errors.Is(err, tc.code) {
				t.Fatalf("SendOffsetsToTransaction answered %s: %v; want ErrProducerFatal wrapping it", tc.code.Message, err)
			}
			if err := p.BeginTransaction(); !errors.Is(err, producer.ErrProducerFatal) {
				t.Fatalf("BeginTransaction after it: %v; want ErrProducerFatal", err)
			}
		})
	}
}
