package producer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// An AddPartitionsToTxn the coordinator applied, whose answer was lost
// with its connection, and whose resend by the transport was refused
// (TRANSACTION_ABORTABLE): the coordinator holds the transaction open, so
// the abort must end it with EndTxn. Judged by the resend's refusal alone,
// the abort ended it locally, leaving the coordinator's transaction open
// until its timeout.
func TestTxnRefusedAddPartitionsResendAfterLostAnswer(t *testing.T) {
	c := newCluster(t, 1)
	id := "txn-add-resend-refused"
	p, _ := newTxnProducer(t, c, id, producer.TransportOpts(kgo.RequestRetries(2),
		kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond })))
	ctx := testCtx(t, 10*time.Second)
	// Another client stands in for the lost attempt reaching the
	// coordinator: it sends the same request, which kfake applies.
	side, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	var n atomic.Int32
	applied := make(chan error, 1)
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch n.Add(1) {
		case 1: // the producer's attempt: applied, then its answer lost
			orig := req.(*kmsg.AddPartitionsToTxnRequest)
			c.SleepControl(func() {
				cp := kmsg.NewPtrAddPartitionsToTxnRequest()
				cp.TransactionalID, cp.ProducerID, cp.ProducerEpoch = orig.TransactionalID, orig.ProducerID, orig.ProducerEpoch
				cp.Topics = orig.Topics
				resp, err := cp.RequestWith(ctx, side)
				if err == nil {
					for _, rt := range resp.Topics {
						for _, rp := range rt.Partitions {
							if err == nil {
								err = kerr.ErrorForCode(rp.ErrorCode)
							}
						}
					}
				}
				applied <- err
			})
			return nil, errors.New("connection lost before the answer"), true
		case 2: // the copy, applied by kfake
			return nil, nil, false
		case 3: // the transport's resend: refused
			return addPartitionsRefused(req, kerr.TransactionAbortable.Code), nil, true
		}
		return nil, nil, false
	})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := sendAsync(t, ctx, p, prec(0, "a")).wait(5 * time.Second)[0]
	if !errors.Is(r.Err, producer.ErrAbortRequired) {
		t.Fatalf("record whose partition's add was refused: %v; want ErrAbortRequired", r.Err)
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("the lost attempt's copy: %v; want it applied", err)
		}
	default:
		t.Fatal("the lost attempt's copy was not sent")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("AddPartitionsToTxn seen %d times; want 3 (attempt, its copy, the resend)", got)
	}
	ends := observe(c, kmsg.EndTxn)
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	if ends.Hits() == 0 {
		t.Fatal("the abort sent no EndTxn, leaving the coordinator's transaction open")
	}
	commitTxn(t, ctx, p, prec(0, "b"))
	wantCommitted(t, c, "b")
}

// An AddPartitionsToTxn answer that leaves a requested partition out (a
// broker's mistake) has the partition added again after the retry
// backoff, as a refusal to be sent again does. The answer counted as
// settled (no code to retry), so the transaction loop sent the request
// again at once, and as long as the answers kept leaving it out, the
// coordinator got requests as fast as it answered them.
func TestTxnAddPartitionsLeftOutBacksOff(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-add-left-out", producer.RetryBackoff(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	var n atomic.Int32
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.Add(1)
		return req.ResponseKind(), nil, true // no partition in the answer
	})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	sendAsync(t, ctx, p, prec(0, "a"))
	eventually(t, 5*time.Second, "AddPartitionsToTxn answered", func() bool { return n.Load() > 0 })
	eventually(t, 5*time.Second, "the left-out partition queued to be added again", func() bool { return producer.TxnResendWaiting(p) })
	for i := 0; i < 10; i++ {
		if got := n.Load(); got != 1 {
			t.Fatalf("AddPartitionsToTxn sent %d times; want once, then the retry backoff (an hour)", got)
		}
		if !producer.TxnResendWaiting(p) {
			t.Fatal("the transaction loop no longer waits to send the add again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The record waits an hour for its partition: close as a crash does.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.Close(ended)
}
