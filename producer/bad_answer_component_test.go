package producer_test

// Component tests of answers a conforming broker does not give: an
// InitProducerId without a producer identity, error codes this client does
// not know.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// An InitProducerId answered without error but with no producer identity
// (ID -1) is asked again after the retry backoff, as a failed one is, not
// at once in a loop that never waits; once the broker answers properly the
// record waiting for the identity is written once.
func TestInitProducerIDWithoutIdentityBacksOff(t *testing.T) {
	c := newCluster(t, 1)
	var bad atomic.Bool
	bad.Store(true)
	var inits atomic.Int32
	c.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !bad.Load() {
			return nil, nil, false
		}
		inits.Add(1)
		resp := kr.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp, nil, true
	})
	const backoff = 50 * time.Millisecond
	p := newProducer(t, c, producer.RetryBackoff(backoff))
	ctx := testCtx(t, 10*time.Second)
	res := sendAsync(t, ctx, p, prec(0, "x"))
	const window = 500 * time.Millisecond
	time.Sleep(window)
	bad.Store(false)
	// One request, then one per backoff at most (a loaded machine only
	// sends fewer); the loop that never waited sent thousands.
	if n := inits.Load(); n > int32(window/backoff)+2 {
		t.Fatalf("%d InitProducerId requests answered without an identity in %v (backoff %v)", n, window, backoff)
	}
	mustOK(t, res.wait(5*time.Second))
	wantLog(t, c, 0, []string{"x"})
}

// An InitProducerId error code this client does not know is fatal (as for
// Java's producer): the record waiting for the identity fails with
// ErrProducerFatal and an *errors.UnknownCodeError that keeps the code,
// not with a bare delivery timeout after InitProducerId was asked again
// until then.
func TestInitProducerIDUnknownCodeIsFatal(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := kr.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = 9999
		return resp, nil, true
	})
	p := newProducer(t, c, producer.DeliveryTimeout(time.Second), producer.RequestTimeout(500*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	_, err := p.ProduceSync(ctx, prec(0, "x"))
	if code, ok := errors.CodeOf(err); !errors.Is(err, producer.ErrProducerFatal) || !ok || code != 9999 {
		t.Fatalf("record: %v (code %d, %v)", err, code, ok)
	}
	if _, ok := errors.AsType[*errors.UnknownCodeError](err); !ok {
		t.Fatalf("record: %v is no *errors.UnknownCodeError", err)
	}
}

// A Produce error code this client does not know is reported with its
// code, as the *errors.UnknownCodeError errors.FromCode documents: not as
// UNKNOWN_SERVER_ERROR (-1), which the broker did not send. Idempotence
// off: the batch fails at the first such answer, its outcome unknown.
func TestProduceUnknownCodeKeepsTheCode(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return answerProduce(kr.(*kmsg.ProduceRequest), 9999, 0), nil, true
	})
	p := newProducer(t, c, producer.DisableIdempotence())
	ctx := testCtx(t, 10*time.Second)
	_, err := p.ProduceSync(ctx, prec(0, "x"))
	if code, ok := errors.CodeOf(err); !ok || code != 9999 || errors.Is(err, errors.ErrUnknownServerError) {
		t.Fatalf("record: %v (code %d, %v)", err, code, ok)
	}
	if !errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("record: %v does not say its outcome is unknown", err)
	}
}

// An idempotent producer resends a batch answered with an error code this
// client does not know, unchanged, until its delivery timeout (nothing says
// it was not appended); the record then fails with ErrDeliveryTimeout, its
// outcome unknown, and the code it was answered, which the report left
// out.
func TestProduceUnknownCodeUntilTimeoutKeepsTheCode(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return answerProduce(kr.(*kmsg.ProduceRequest), 9999, 0), nil, true
	})
	p := newProducer(t, c, producer.DeliveryTimeout(time.Second), producer.RequestTimeout(500*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	_, err := p.ProduceSync(ctx, prec(0, "x"))
	if !errors.Is(err, producer.ErrDeliveryTimeout) || !errors.Is(err, errors.ErrUnknownOutcome) {
		t.Fatalf("record: %v; want a delivery timeout, outcome unknown", err)
	}
	if code, ok := errors.CodeOf(err); !ok || code != 9999 {
		t.Fatalf("record: %v (code %d, %v); want the code 9999", err, code, ok)
	}
}

// A Produce answer listing the partition twice is read by its first entry
// (as the consumer reads a Fetch answer): here a retriable refusal, so the
// record is sent again and written once. The last entry, a made-up
// acknowledgement at offset 5, was taken: the record was reported written
// at an offset where it never was.
func TestProduceAnswerDuplicatePartitionFirstEntry(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		resp := answerProduce(kr.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code, -1)
		for i := range resp.Topics {
			for _, sp := range resp.Topics[i].Partitions {
				sp.ErrorCode, sp.BaseOffset = 0, 5
				resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, sp)
			}
		}
		return resp, nil, true
	})
	p := newProducer(t, c, producer.RetryBackoff(10*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	rs, err := p.ProduceSync(ctx, prec(0, "x"))
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	if rs[0].Offset != 0 {
		t.Fatalf("record written at %d; want 0 (the log's only record)", rs[0].Offset)
	}
	wantLog(t, c, 0, []string{"x"})
}

// noIdentity makes the cluster answer InitProducerId without error but
// without a producer identity while bad holds, counting those answers.
func noIdentity(c *kfake.Cluster, bad *atomic.Bool, inits *atomic.Int32) {
	c.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !bad.Load() {
			return nil, nil, false
		}
		inits.Add(1)
		resp := kr.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp, nil, true
	})
}

// A transactional producer's InitProducerId answered without an identity
// is asked again after the backoff: InitTransactions whose context ends
// meanwhile says the broker answered no identity (it was fatal with an
// error matching ErrInvalidArgument, a misuse's), and once the broker
// answers properly the same InitTransactions completes.
func TestInitTransactionsWithoutIdentitySaysWhy(t *testing.T) {
	c := newCluster(t, 1)
	var bad atomic.Bool
	bad.Store(true)
	var inits atomic.Int32
	noIdentity(c, &bad, &inits)
	p, _ := newRecorded(t, c, producer.TransactionalID("no-identity"), producer.RetryBackoff(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := p.InitTransactions(ctx)
	if errors.Is(err, errors.ErrInvalidArgument) || !errors.Is(err, producer.ErrNoProducerIdentity) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InitTransactions: %v; want its deadline and ErrNoProducerIdentity", err)
	}
	if n := inits.Load(); n < 2 {
		t.Fatalf("%d InitProducerId requests; want it asked again", n)
	}
	bad.Store(false)
	if err := p.InitTransactions(testCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("InitTransactions once the broker answers: %v", err)
	}
	commitTxn(t, testCtx(t, 5*time.Second), p, prec(0, "x"))
}

// An idempotent producer's record that waited for a producer identity
// until its delivery timeout says why: the error wraps the last
// InitProducerId failure (a bare delivery timeout left it unsaid).
func TestInitProducerIDWithoutIdentityTimeoutSaysWhy(t *testing.T) {
	c := newCluster(t, 1)
	var bad atomic.Bool
	bad.Store(true)
	var inits atomic.Int32
	noIdentity(c, &bad, &inits)
	p := newProducer(t, c, producer.DeliveryTimeout(500*time.Millisecond), producer.RequestTimeout(250*time.Millisecond),
		producer.RetryBackoff(20*time.Millisecond))
	_, err := p.ProduceSync(testCtx(t, 10*time.Second), prec(0, "x"))
	if !errors.Is(err, producer.ErrDeliveryTimeout) || !errors.Is(err, producer.ErrNoProducerIdentity) {
		t.Fatalf("record: %v; want a delivery timeout wrapping ErrNoProducerIdentity", err)
	}
}
