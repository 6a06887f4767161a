package producer_test

// Component tests of the transactional producer on kfake: abortable errors,
// coordinator retries, fencing, and what read_committed consumers see.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

func newTxnProducer(t *testing.T, c *kfake.Cluster, id string, opts ...producer.Opt) (*producer.Producer, *recorder) {
	t.Helper()
	p, rec := newRecorded(t, c, append([]producer.Opt{producer.TransactionalID(id)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatalf("InitTransactions: %v", err)
	}
	return p, rec
}

// commitTxn runs one transaction that commits rs.
func commitTxn(t *testing.T, ctx context.Context, p *producer.Producer, rs ...*producer.Record) {
	t.Helper()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	pr := sendAsync(t, ctx, p, rs...)
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("CommitTransaction: %v", err)
	}
	mustOK(t, pr.wait(5*time.Second))
}

// An abortable error on a produce (TRANSACTION_ABORTABLE, or
// INVALID_PRODUCER_EPOCH which is not fencing on Produce): the batch and
// every record of the transaction fail, CommitTransaction says
// ErrAbortRequired, AbortTransaction bumps the epoch (sequences were
// disturbed), and the next transaction commits. read_committed sees only
// committed records.
func TestTxnProduceAbortable(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.TransactionAbortable, kerr.InvalidProducerEpoch, kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 2)
			p, rec := newTxnProducer(t, c, "txn-"+code.Message)
			ctx := testCtx(t, 15*time.Second)
			commitTxn(t, ctx, p, prec(0, "a0"), prec(1, "a1"))
			before := p.ProducerID()

			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(1, "b-ok")))
			c.Fault(produceFault(0, code))
			pr := sendAsync(t, ctx, p, prec(0, "b0"), prec(0, "b1"), prec(1, "b2"))
			err := p.CommitTransaction(ctx)
			if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, code) {
				t.Fatalf("CommitTransaction: %v; want ErrAbortRequired wrapping %s", err, code.Message)
			}
			// The refused batch fails with the cause; b2, on the other
			// partition, may have been acknowledged (the abort then
			// hides it from read_committed) or failed.
			for _, r := range pr.wait(5 * time.Second)[:2] {
				if !errors.Is(r.Err, code) {
					t.Fatalf("record %s: %v", r.Record.Value, r.Err)
				}
			}
			if err := p.Produce(ctx, prec(0, "refused"), nil); !errors.Is(err, producer.ErrAbortRequired) {
				t.Fatalf("Produce in an abortable transaction: %v", err)
			}
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("AbortTransaction: %v", err)
			}
			after := p.ProducerID()
			if after.ID != before.ID || after.Epoch <= before.Epoch {
				t.Fatalf("identity %v → %v; want a bumped epoch", before, after)
			}
			commitTxn(t, ctx, p, prec(0, "c0"), prec(1, "c1"))
			wantCommittedAnyOrder(t, c, "a0", "a1", "c0", "c1")
			if code == kerr.OutOfOrderSequenceNumber || code == kerr.UnknownProducerID {
				if k := kinds(rec.Outcomes()); len(k) == 0 || k[:len("ProvenGap")] != "ProvenGap" && k[:len("PossibleGap")] != "PossibleGap" {
					t.Fatalf("outcomes %s: the gap was not reported", k)
				}
			}
		})
	}
}

// Records still buffered (never sent) when a transaction turns abortable
// fail at once; CommitTransaction returns ErrAbortRequired without waiting
// for them.
func TestTxnAbortableFailsBufferedRecords(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "txn-buffered")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// Partition 0's batch is held on the wire, then refused: the
	// transaction must abort. Meanwhile partition 1 cannot join the
	// transaction: its record stays buffered.
	c.Fault(produceFault(0, kerr.TransactionAbortable))
	release, held := holdProduceSeen(c, 0)
	defer release()
	refused := sendAsync(t, ctx, p, prec(0, "x"))
	onWire(t, held)
	add := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Topic: topic, Partitions: []int32{1}, Err: kerr.ConcurrentTransactions, Count: -1})
	waiting := sendAsync(t, ctx, p, prec(1, "z"))
	if err := add.Wait(ctx, 2); err != nil {
		t.Fatal(err)
	}
	release()
	if r := refused.wait(3 * time.Second)[0]; !errors.Is(r.Err, kerr.TransactionAbortable) {
		t.Fatalf("refused record: %v", r.Err)
	}
	if r := waiting.wait(3 * time.Second)[0]; !errors.Is(r.Err, producer.ErrAbortRequired) {
		t.Fatalf("buffered record: %v; want ErrAbortRequired", r.Err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := p.CommitTransaction(short); !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("CommitTransaction: %v", err)
	}
	add.Remove()
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	commitTxn(t, ctx, p, prec(1, "y"))
	wantCommitted(t, c, "y")
}

// CONCURRENT_TRANSACTIONS (and COORDINATOR_LOAD_IN_PROGRESS) on EndTxn:
// the same EndTxn is sent again until it succeeds.
func TestTxnEndTxnRetried(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-retry")
	ctx := testCtx(t, 10*time.Second)
	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: "txn-retry", Err: kerr.ConcurrentTransactions, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: "txn-retry", Err: kerr.CoordinatorLoadInProgress, Count: 1})
	commitTxn(t, ctx, p, prec(0, "a"), prec(0, "b"))
	if f.Hits() != 3 {
		t.Fatalf("EndTxn faulted %d times", f.Hits())
	}
	commitTxn(t, ctx, p, prec(0, "c"))
	wantCommitted(t, c, "a", "b", "c")
}

// CONCURRENT_TRANSACTIONS on AddPartitionsToTxn and InitProducerId is
// retried too.
func TestTxnAddPartitionsAndInitRetried(t *testing.T) {
	c := newCluster(t, 1)
	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ConcurrentTransactions, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Err: kerr.ConcurrentTransactions, Count: 2})
	p, _ := newTxnProducer(t, c, "txn-add")
	ctx := testCtx(t, 10*time.Second)
	commitTxn(t, ctx, p, prec(0, "a"))
	if f.Hits() != 4 {
		t.Fatalf("faults hit %d times", f.Hits())
	}
	wantCommitted(t, c, "a")
}

// A second producer with the same transactional ID fences the first: the
// first's open transaction is aborted by the coordinator, its commit fails
// with ErrProducerFatal, and it cannot produce again. The second commits.
func TestTxnFencedBySecondProducer(t *testing.T) {
	c := newCluster(t, 2)
	p1, _ := newTxnProducer(t, c, "txn-fence")
	ctx := testCtx(t, 15*time.Second)
	commitTxn(t, ctx, p1, prec(0, "p1-a"))
	if err := p1.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p1, prec(0, "p1-b"), prec(1, "p1-c")))

	p2, _ := newTxnProducer(t, c, "txn-fence")
	if p2.ProducerID().ID != p1.ProducerID().ID || p2.ProducerID().Epoch <= p1.ProducerID().Epoch {
		t.Fatalf("second producer %v, first %v", p2.ProducerID(), p1.ProducerID())
	}
	pr := sendAsync(t, ctx, p1, prec(0, "p1-d"))
	err := p1.CommitTransaction(ctx)
	if !errors.Is(err, producer.ErrProducerFatal) && !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("fenced producer's commit: %v", err)
	}
	if r := pr.wait(5 * time.Second)[0]; r.Err == nil {
		t.Fatal("fenced producer's record acknowledged")
	}
	if errors.Is(err, producer.ErrAbortRequired) {
		// INVALID_PRODUCER_EPOCH on Produce is abortable; the abort
		// then meets the fencing.
		err = p1.AbortTransaction(ctx)
	}
	if !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("fenced producer: %v; want ErrProducerFatal", err)
	}
	if err := p1.BeginTransaction(); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("Begin after fencing: %v", err)
	}
	if err := p1.Produce(ctx, prec(0, "p1-e"), nil); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("Produce after fencing: %v", err)
	}
	commitTxn(t, ctx, p2, prec(0, "p2-a"), prec(1, "p2-b"))
	wantCommittedAnyOrder(t, c, "p1-a", "p2-a", "p2-b")
}

// Many transactions in a row, alternating commit and abort, over several
// partitions: read_committed sees exactly the committed records, in order
// per partition.
func TestTxnManyCommitsAndAborts(t *testing.T) {
	c := newCluster(t, 3)
	p, _ := newTxnProducer(t, c, "txn-many")
	ctx := testCtx(t, 20*time.Second)
	var want []string
	for i := range 12 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var rs []*producer.Record
		for j := range 20 {
			rs = append(rs, prec(int32(j%3), fmt.Sprintf("t%02d-%02d", i, j)))
		}
		pr := sendAsync(t, ctx, p, rs...)
		if i%3 == 2 {
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			pr.wait(5 * time.Second)
			continue
		}
		if err := p.CommitTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		mustOK(t, pr.wait(5*time.Second))
		for _, r := range rs {
			want = append(want, string(r.Value))
		}
	}
	got := committedValues(t, c, len(want))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed sees %d records, want %d", len(got), len(want))
	}
}

// SendOffsetsToTransaction: transient coordinator errors are retried;
// a refused offset commit (ILLEGAL_GENERATION) makes the transaction
// abortable, and the next one commits its offsets; a fenced
// AddOffsetsToTxn is fatal.
func TestTxnSendOffsetsErrors(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-offsets-errors")
	ctx := testCtx(t, 15*time.Second)
	offsets := func(o int64) map[string]map[int32]producer.OffsetAndEpoch {
		return map[string]map[int32]producer.OffsetAndEpoch{topic: {0: {Offset: o, LeaderEpoch: 0}}}
	}
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}

	// Retried: AddOffsetsToTxn COORDINATOR_LOAD_IN_PROGRESS, TxnOffsetCommit
	// CONCURRENT_TRANSACTIONS.
	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TxnID: "txn-offsets-errors", Err: kerr.CoordinatorLoadInProgress, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Group: "g", Err: kerr.ConcurrentTransactions, Count: 1})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	if err := p.SendOffsetsToTransaction(ctx, g, offsets(10)); err != nil {
		t.Fatalf("SendOffsetsToTransaction after transient errors: %v", err)
	}
	if f.Hits() != 3 {
		t.Fatalf("faults hit %d times", f.Hits())
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}

	// Refused commit: abortable.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Group: "g", Err: kerr.IllegalGeneration})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
	err := p.SendOffsetsToTransaction(ctx, g, offsets(20))
	if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("refused offset commit: %v", err)
	}
	if err := p.CommitTransaction(ctx); !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("commit after a refused offset commit: %v", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	if err := p.SendOffsetsToTransaction(ctx, g, offsets(30)); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	wantCommitted(t, c, "a", "c")

	// Fenced: fatal.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TxnID: "txn-offsets-errors", Err: kerr.ProducerFenced})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, offsets(40)); !errors.Is(err, producer.ErrProducerFatal) || !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("fenced AddOffsetsToTxn: %v", err)
	}
	if err := p.Produce(ctx, prec(0, "d"), nil); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("Produce after fencing: %v", err)
	}
}

// Records produced on and on while CommitTransaction runs do not join the
// transaction by timing: Produce refuses them while it runs (ErrTxnState,
// as Java refuses sends once a commit began), and every record Produce
// accepted is in the committed transaction. Before, the commit accepted
// them and flushed again for each, for as long as they came (it ended
// only when the records happened to be all acknowledged at one moment).
// A record of the transaction is held on the wire until a record produced
// during the commit was refused, so the commit cannot end before one is
// (the test once looked for a refusal during a commit it let run, which
// sometimes ended before any record came: 2 runs in 30 under -race).
func TestTxnCommitWhileProducing(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "txn-busy")
	ctx := testCtx(t, 15*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var (
		mu              sync.Mutex
		accepted, acked int
	)
	cb := func(res producer.Result) {
		mu.Lock()
		if res.Err == nil {
			acked++
		}
		mu.Unlock()
	}
	release, held := holdProduceSeen(c, 0)
	defer release()
	if err := p.Produce(ctx, prec(0, "first"), cb); err != nil {
		t.Fatal(err)
	}
	accepted++
	onWire(t, held)
	committed := make(chan error, 1)
	go func() { committed <- p.CommitTransaction(ctx) }()
	refused := make(chan error, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Produce(ctx, prec(int32(i%2), fmt.Sprintf("r%d", i)), cb); err != nil {
				select {
				case refused <- err:
				default:
				}
			} else {
				mu.Lock()
				accepted++
				mu.Unlock()
			}
			runtime.Gosched()
		}
	}()
	select {
	case err := <-refused:
		// The first refusal: the commit, held, is still under way.
		if !errors.Is(err, producer.ErrTxnState) {
			t.Fatalf("Produce while CommitTransaction ran: %v, want ErrTxnState", err)
		}
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no record refused while CommitTransaction ran (%d accepted)", accepted)
	}
	release()
	var err error
	select {
	case err = <-committed:
	case <-ctx.Done():
		t.Fatal("CommitTransaction did not end while records kept coming")
	}
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("CommitTransaction while records kept coming: %v", err)
	}
	eventually(t, 5*time.Second, "every accepted record's report", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked == accepted
	})
}
