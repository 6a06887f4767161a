package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

func fetchTxnCommitted(t *testing.T, ctx context.Context, c *kfake.Cluster, group string, part int32) (int64, int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{part}
	req.Topics = append(req.Topics, rt)
	req.RequireStable = true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("offset fetch: %d topics in the answer", len(resp.Topics))
	}
	pp := resp.Topics[0].Partitions[0] // the one partition asked for
	if pp.ErrorCode != 0 {
		t.Fatalf("offset fetch: %v", kerr.ErrorForCode(pp.ErrorCode))
	}
	return pp.Offset, pp.LeaderEpoch
}

func txnOffsets(parts map[int32]int64) map[string]map[int32]producer.OffsetAndEpoch {
	m := map[int32]producer.OffsetAndEpoch{}
	for p, o := range parts {
		m[p] = producer.OffsetAndEpoch{Offset: o, LeaderEpoch: 7}
	}
	return map[string]map[int32]producer.OffsetAndEpoch{topic: m}
}

// After a produce error made the transaction abortable, SendOffsetsToTransaction
// must say ErrAbortRequired (as its doc, Produce and Begin do), not a bare
// state error an application treats as fatal.
func TestTxnSendOffsetsInAbortableTxn(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-abortable")
	ctx := testCtx(t, 10*time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	c.Fault(produceFault(0, kerr.TransactionAbortable))
	res := sendAll(t, ctx, p, prec(0, "x"))
	if !errors.Is(res[0].Err, kerr.TransactionAbortable) {
		t.Fatalf("record: %v", res[0].Err)
	}
	err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5}))
	if !errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("SendOffsetsToTransaction in an abortable transaction: %v; want ErrAbortRequired", err)
	}
}

// SendOffsetsToTransaction before any record, twice for the same group;
// commit makes the merged offsets visible; an aborted one never shows.
func TestTxnSendOffsetsOnlyAndTwice(t *testing.T) {
	c := newCluster(t, 2)
	p, _ := newTxnProducer(t, c, "offsets-twice")
	ctx := testCtx(t, 15*time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5})); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 9, 1: 3})); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if o, e := fetchTxnCommitted(t, ctx, c, "g", 0); o != 9 || e != 7 {
		t.Fatalf("p0 committed %d@%d", o, e)
	}
	if o, _ := fetchTxnCommitted(t, ctx, c, "g", 1); o != 3 {
		t.Fatalf("p1 committed %d", o)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 100})); err != nil {
		t.Fatal(err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if o, _ := fetchTxnCommitted(t, ctx, c, "g", 0); o != 9 {
		t.Fatalf("aborted offset visible: %d", o)
	}
	commitTxn(t, ctx, p, prec(0, "after"))
	if o, _ := fetchTxnCommitted(t, ctx, c, "g", 0); o != 9 {
		t.Fatalf("aborted offset visible after next commit: %d", o)
	}
}

// The group and transaction coordinators move between transactions: the
// offsets still reach the (new) group coordinator.
func TestTxnSendOffsetsCoordinatorsMove(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-move")
	ctx := testCtx(t, 20*time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	for i := range 6 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		mustOK(t, sendAll(t, ctx, p, prec(0, "r")))
		if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: int64(10 + i)})); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := p.CommitTransaction(ctx); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if o, _ := fetchTxnCommitted(t, ctx, c, "g", 0); o != int64(10+i) {
			t.Fatalf("round %d: committed %d", i, o)
		}
		c.RehashCoordinators()
	}
}

// CommitTransaction called while SendOffsetsToTransaction's TxnOffsetCommit
// is unanswered must not send EndTxn before it is answered (Java orders the
// TxnOffsetCommit before EndTxn).
func TestTxnCommitWaitsForTxnOffsetCommit(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-order")
	ctx := testCtx(t, 15*time.Second)
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))

	hold := make(chan struct{})
	seen := make(chan struct{})
	var once bool
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !once {
			once = true
			close(seen)
			c.SleepControl(func() { <-hold })
		}
		return nil, nil, false
	})
	ends := observe(c, kmsg.EndTxn)
	offErr := make(chan error, 1)
	go func() { offErr <- p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 42})) }()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("no TxnOffsetCommit")
	}
	comErr := make(chan error, 1)
	go func() { comErr <- p.CommitTransaction(ctx) }()
	time.Sleep(500 * time.Millisecond)
	sentEarly := ends.Hits()
	close(hold)
	oe := <-offErr
	ce := <-comErr
	o, _ := fetchTxnCommitted(t, ctx, c, "g", 0)
	if sentEarly > 0 || oe != nil || ce != nil || o != 42 {
		t.Fatalf("EndTxn sent while TxnOffsetCommit unanswered (%d); commit %v with offset %d (SendOffsets %v)", sentEarly, ce, o, oe)
	}
}

// SendOffsetsToTransaction after Close says the producer is closed, as
// every other call does. It sent its requests on the closed transport and
// reported their failure as the transaction's: ErrAbortRequired ("client
// closed"), which tells the application to abort and go on.
func TestTxnSendOffsetsAfterClose(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-after-close")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: "g", GenerationID: -1}, txnOffsets(map[int32]int64{0: 1}))
	if !errors.Is(err, errors.ErrClosed) || errors.Is(err, producer.ErrAbortRequired) {
		t.Fatalf("SendOffsetsToTransaction after Close: %v; want ErrClosed", err)
	}
}

// SendOffsetsToTransaction while CommitTransaction runs is refused with
// ErrTxnState, as Produce is (and as Java refuses sendOffsetsToTransaction
// once a commit began). It went on, and whether its offsets joined the
// transaction the commit reported depended on timing: here they did,
// staged while the commit waited for a record held on the wire.
func TestTxnSendOffsetsRefusedDuringCommit(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "offsets-during-commit")
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	release, held := holdProduceSeen(c, 0)
	defer release()
	sendAsync(t, ctx, p, prec(0, "a"))
	onWire(t, held)
	committed := make(chan error, 1)
	go func() { committed <- p.CommitTransaction(ctx) }()
	eventually(t, 5*time.Second, "Produce refused: the commit began", func() bool {
		return errors.Is(p.Produce(ctx, prec(0, "probe"), nil), producer.ErrTxnState)
	})
	err := p.SendOffsetsToTransaction(ctx, producer.GroupMetadata{GroupID: "g", GenerationID: -1}, txnOffsets(map[int32]int64{0: 7}))
	release()
	if !errors.Is(err, producer.ErrTxnState) {
		t.Fatalf("SendOffsetsToTransaction while CommitTransaction ran: %v; want ErrTxnState", err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
}
