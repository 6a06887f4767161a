package producer_test

// Component tests of the transactional producer's answers while its
// transaction loop backs off, and of Close meeting a transaction.

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// An EndTxn(commit) answered TRANSACTION_ABORTABLE settles the commit at
// once: CommitTransaction says ErrAbortRequired as soon as the answer is
// handled. The transaction loop applied the answer only after sleeping the
// retry backoff (it backed off after every refusal), so the commit waited
// a backoff for an answer it already had, and a Close meanwhile reported
// it with an outcome it no longer had.
func TestTxnAnswerAppliedBeforeBackoff(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-backoff", producer.RetryBackoff(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: "txn-backoff", Err: kerr.TransactionAbortable})
	err := p.CommitTransaction(ctx)
	if !errors.Is(err, producer.ErrAbortRequired) || !errors.Is(err, kerr.TransactionAbortable) {
		t.Fatalf("CommitTransaction answered TRANSACTION_ABORTABLE: %v; want ErrAbortRequired wrapping it at once", err)
	}
}
