package producer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A transactional ID the cluster does not authorize is refused by the
// FindCoordinator that locates its coordinator (kgo returns that answer's
// error as the request's). The refusal is final, as Java's producer makes
// it (fatal): InitTransactions and CommitTransaction say so at once. They
// once took it for a lost answer and sent the request again for ever, so
// InitTransactions returned only its context's error, and never with
// context.Background.
func TestTxnCoordinatorLookupNotAuthorizedIsFatal(t *testing.T) {
	t.Run("init", func(t *testing.T) {
		c := newCluster(t, 1)
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Err: kerr.TransactionalIDAuthorizationFailed, Count: -1})
		p, _ := newRecorded(t, c, producer.TransactionalID("txn-unauthorized"))
		ctx := testCtx(t, 10*time.Second)
		wantUnauthorizedFatal(t, "InitTransactions", func() error { return p.InitTransactions(ctx) })
	})
	t.Run("add", func(t *testing.T) {
		c := newCluster(t, 2)
		p, _ := newTxnProducer(t, c, "txn-unauthorized-add", producer.RequestTimeout(time.Second), producer.DeliveryTimeout(8*time.Second))
		ctx := testCtx(t, 10*time.Second)
		commitTxn(t, ctx, p, prec(0, "first"))
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Err: kerr.NotCoordinator})
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Err: kerr.TransactionalIDAuthorizationFailed, Count: -1})
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		// Its AddPartitionsToTxn was sent again until the record's
		// delivery timeout (8s), and the transaction then only abortable.
		r := sendAsync(t, ctx, p, prec(1, "b")).wait(3 * time.Second)[0]
		if !errors.Is(r.Err, producer.ErrProducerFatal) || !errors.Is(r.Err, kerr.TransactionalIDAuthorizationFailed) {
			t.Fatalf("record of the transaction: %v; want ErrProducerFatal and TRANSACTIONAL_ID_AUTHORIZATION_FAILED", r.Err)
		}
		if err := p.CommitTransaction(ctx); !errors.Is(err, producer.ErrProducerFatal) {
			t.Fatalf("CommitTransaction: %v; want ErrProducerFatal", err)
		}
	})
	t.Run("commit", func(t *testing.T) {
		c := newCluster(t, 1)
		p, _ := newTxnProducer(t, c, "txn-unauthorized-commit")
		ctx := testCtx(t, 10*time.Second)
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
		// The coordinator moves (kgo looks it up again), and the lookup
		// is refused from now on.
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.NotCoordinator})
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Err: kerr.TransactionalIDAuthorizationFailed, Count: -1})
		wantUnauthorizedFatal(t, "CommitTransaction", func() error { return p.CommitTransaction(ctx) })
		wantCommitted(t, c)
	})
}

// wantUnauthorizedFatal runs call (named name), which must end within 3s
// with ErrProducerFatal for TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func wantUnauthorizedFatal(t *testing.T, name string, call func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		if !errors.Is(err, producer.ErrProducerFatal) || !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Fatalf("%s: %v; want ErrProducerFatal and TRANSACTIONAL_ID_AUTHORIZATION_FAILED", name, err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("%s still retrying 3s after its coordinator lookup was refused as unauthorized", name)
	}
}
