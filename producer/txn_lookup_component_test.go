package producer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// noLookupRetries makes the transport give up a coordinator request at its
// first failure, its coordinator's lookup included: the lookup's refusal is
// then the request's error, as it is once the transport's own retries are
// spent.
func noLookupRetries() producer.Opt {
	return producer.TransportOpts(kgo.MaxVersions(tv1Versions()), kgo.RetryTimeoutFn(func(key int16) time.Duration {
		switch kmsg.Key(key) {
		case kmsg.EndTxn, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit:
			return time.Millisecond
		}
		return 30 * time.Second
	}))
}

// A coordinator lookup refused with COORDINATOR_NOT_AVAILABLE,
// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (the transport returns
// the FindCoordinator answer's error as the request's) is an answer: the
// request was not sent, so it cannot have been applied. It was taken for a
// lost answer: a TxnOffsetCommit whose group coordinator's lookup was
// refused failed SendOffsetsToTransaction (abortable), and an EndTxn's made
// the commit end with an epoch bump, as after an EndTxn that may have been
// applied twice.
func TestTxnRefusedLookupIsNotALostAnswer(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.CoordinatorNotAvailable, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress} {
		t.Run("TxnOffsetCommit "+code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p, _ := newTxnProducer(t, c, "txn-lookup-offsets", noLookupRetries())
			ctx := testCtx(t, 10*time.Second)
			before := p.ProducerID()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
			lookup := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Group: "g", Err: code})
			g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
			if err := p.SendOffsetsToTransaction(ctx, g, txnOffsets(map[int32]int64{0: 5})); err != nil {
				t.Fatalf("SendOffsetsToTransaction after its group coordinator's lookup was refused: %v", err)
			}
			if lookup.Hits() != 1 {
				t.Fatalf("group coordinator lookup refused %d times", lookup.Hits())
			}
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			if after := p.ProducerID(); after != before {
				t.Fatalf("identity %v → %v: the commit bumped the epoch as if the TxnOffsetCommit may have been applied unanswered", before, after)
			}
			if o, _ := fetchTxnCommitted(t, ctx, c, "g", 0); o != 5 {
				t.Fatalf("committed offset %d, want 5", o)
			}
		})
		t.Run("EndTxn "+code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			id := "txn-lookup-endtxn"
			p, _ := newTxnProducer(t, c, id, noLookupRetries())
			ctx := testCtx(t, 10*time.Second)
			before := p.ProducerID()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
			// The coordinator moves (the transport forgets it), and its
			// next lookup is refused.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: id, Err: kerr.NotCoordinator})
			lookup := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, TxnID: id, Err: code})
			if err := p.CommitTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			if lookup.Hits() != 1 {
				t.Fatalf("transaction coordinator lookup refused %d times", lookup.Hits())
			}
			if after := p.ProducerID(); after != before {
				t.Fatalf("identity %v → %v: the commit bumped the epoch as if an EndTxn may have been applied unanswered", before, after)
			}
			wantCommitted(t, c, "a")
		})
	}
}

// An AddPartitionsToTxn written on a connection lost before its answer
// (the transport sends it again by itself) may have been applied: the
// coordinator may have started the transaction. When the transport's
// retry then meets a refused lookup, the request as a whole is not
// refused unsent: the abort must still send EndTxn. Judged as the lookup's
// answer alone, the abort ended the transaction locally, leaving one the
// coordinator may hold open until its timeout (which then fences the
// producer).
func TestTxnRefusedLookupAfterLostAddPartitions(t *testing.T) {
	c := newCluster(t, 1)
	id := "txn-lookup-lost-add"
	p, _ := newTxnProducer(t, c, id, producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(700*time.Millisecond),
		producer.TransportOpts(kgo.RequestRetries(2), kgo.RetryBackoffFn(func(int) time.Duration { return time.Millisecond })))
	ctx := testCtx(t, 10*time.Second)
	var n atomic.Int32
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch n.Add(1) {
		case 1: // written, its answer lost with the connection
			return nil, errors.New("connection lost before the answer"), true
		case 2: // the transport's resend: the coordinator moved
			return addPartitionsRefused(req, kerr.NotCoordinator.Code), nil, true
		}
		return nil, nil, false
	})
	lookup := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, TxnID: id, Err: kerr.CoordinatorNotAvailable, Count: -1})
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// The record cannot join the transaction while the lookup is
	// refused: it expires, and the transaction must abort.
	r := sendAsync(t, ctx, p, prec(0, "a")).wait(5 * time.Second)[0]
	if r.Err == nil {
		t.Fatal("record acknowledged although its partition never joined the transaction")
	}
	if n.Load() < 2 || lookup.Hits() == 0 {
		t.Fatalf("AddPartitionsToTxn seen %d times, lookups refused %d", n.Load(), lookup.Hits())
	}
	if !producer.TxnMayHaveStarted(p) {
		t.Fatal("an AddPartitionsToTxn whose answer was lost is taken for one that cannot have started the transaction: the abort would send no EndTxn")
	}
	lookup.Remove()
	ends := observe(c, kmsg.EndTxn)
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	if ends.Hits() == 0 {
		t.Fatal("the abort sent no EndTxn")
	}
	commitTxn(t, ctx, p, prec(0, "b"))
	wantCommitted(t, c, "b")
}

// addPartitionsRefused answers the AddPartitionsToTxn req with code for
// every partition it names.
func addPartitionsRefused(req kmsg.Request, code int16) *kmsg.AddPartitionsToTxnResponse {
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for _, rt := range req.(*kmsg.AddPartitionsToTxnRequest).Topics {
		st := kmsg.NewAddPartitionsToTxnResponseTopic()
		st.Topic = rt.Topic
		for _, part := range rt.Partitions {
			sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			sp.Partition, sp.ErrorCode = part, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
