package producer_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// An AbortTransaction while an AddPartitionsToTxn waits out its retry
// backoff (its attempt refused CONCURRENT_TRANSACTIONS, which the
// coordinator answers before applying anything) does not send it: the
// abort needs no partition added. With nothing else sent to the
// coordinator the transaction never started there, and the abort ends it
// without EndTxn; with another partition added, it sends EndTxn(abort)
// (without the add). Before, the abort waited out the backoff, sent the
// add (starting a transaction on the coordinator), and then ended it with
// EndTxn.
func TestTxnAbortDropsAddPartitionsWaitingForBackoff(t *testing.T) {
	for _, started := range []bool{false, true} {
		name := "nothing started"
		if started {
			name = "another partition added"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 2)
			p, _ := newTxnProducer(t, c, "txn-abort-backoff", producer.RetryBackoff(500*time.Millisecond))
			ctx := testCtx(t, 10*time.Second)
			var adds atomic.Int32 // AddPartitionsToTxn naming partition 0, refused
			var healed atomic.Bool
			c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				if healed.Load() {
					return nil, nil, false
				}
				c.KeepControl()
				for _, rt := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
					for _, part := range rt.Partitions {
						if part == 0 {
							adds.Add(1)
							return addPartitionsRefused(req, kerr.ConcurrentTransactions.Code), nil, true
						}
					}
				}
				return nil, nil, false
			})
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if started {
				mustOK(t, sendAll(t, ctx, p, prec(1, "a")))
			}
			pr := sendAsync(t, ctx, p, prec(0, "b"))
			eventually(t, 5*time.Second, "the refused add waiting out its backoff", func() bool {
				return adds.Load() == 1 && producer.TxnResendWaiting(p)
			})
			ends := observe(c, kmsg.EndTxn)
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("AbortTransaction: %v", err)
			}
			if got := adds.Load(); got != 1 {
				t.Fatalf("AddPartitionsToTxn for partition 0 sent %d times; want once (the abort drops the one waiting)", got)
			}
			if got, want := ends.Hits(), map[bool]int{false: 0, true: 1}[started]; got != want {
				t.Fatalf("EndTxn sent %d times; want %d", got, want)
			}
			if r := pr.wait(5 * time.Second)[0]; !errors.Is(r.Err, producer.ErrTransactionAborted) {
				t.Fatalf("record waiting for its partition: %v; want ErrTransactionAborted", r.Err)
			}
			ends.Remove()
			healed.Store(true)
			commitTxn(t, ctx, p, prec(0, "c"), prec(1, "d"))
			wantCommittedAnyOrder(t, c, "c", "d")
		})
	}
}

// The EndTxn(abort) that replaces an AddPartitionsToTxn dropped while it
// waited out its retry backoff goes out at once: the backoff paces resends
// of the refused add, not the next request (an EndTxn still refused is
// paced by its own backoff). Before, the txn loop slept the rest of the
// add's backoff first, so the abort took up to RetryBackoff longer: here
// its 5s context ended within the 10s backoff.
func TestTxnAbortEndTxnDoesNotWaitOutDroppedAddBackoff(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.ConcurrentTransactions, kerr.UnknownTopicOrPartition} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 2)
			p, _ := newTxnProducer(t, c, "txn-abort-backoff-endtxn", producer.RetryBackoff(10*time.Second))
			ctx := testCtx(t, 5*time.Second)
			var adds atomic.Int32 // AddPartitionsToTxn naming partition 0, refused
			c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				for _, rt := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
					if slices.Contains(rt.Partitions, 0) {
						adds.Add(1)
						return addPartitionsRefused(req, code.Code), nil, true
					}
				}
				return nil, nil, false
			})
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(1, "a"))) // the transaction started: the abort needs EndTxn
			pr := sendAsync(t, ctx, p, prec(0, "b"))
			eventually(t, 4*time.Second, "the refused add waiting out its backoff", func() bool {
				return adds.Load() == 1 && producer.TxnResendWaiting(p)
			})
			ends := observe(c, kmsg.EndTxn)
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("AbortTransaction: %v (its EndTxn waited out the dropped add's backoff)", err)
			}
			if got := ends.Hits(); got != 1 {
				t.Fatalf("EndTxn sent %d times; want once", got)
			}
			if got := adds.Load(); got != 1 {
				t.Fatalf("AddPartitionsToTxn for partition 0 sent %d times; want once", got)
			}
			if r := pr.wait(time.Second)[0]; !errors.Is(r.Err, producer.ErrTransactionAborted) {
				t.Fatalf("record waiting for its partition: %v; want ErrTransactionAborted", r.Err)
			}
		})
	}
}
