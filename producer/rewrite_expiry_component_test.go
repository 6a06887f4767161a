package producer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// scriptProduce answers partition 0's Produce requests from script, in
// order (0: handled by kfake), once each, then with then (0: leaves them
// to kfake) until stop; it records the batch identities it saw.
type produceScript struct {
	mu      sync.Mutex
	seen    []batchID
	off     bool
	release chan struct{} // closed by let
	once    sync.Once
}

// holdAnswer in a script holds the request until let is called, then
// leaves it to kfake.
const holdAnswer = -1

// let releases the held requests.
func (s *produceScript) let() { s.once.Do(func() { close(s.release) }) }

// stop leaves every later request to kfake.
func (s *produceScript) stop() {
	s.mu.Lock()
	s.off = true
	s.mu.Unlock()
}

func scriptProduce(cl *kfake.Cluster, script []int16, then int16, logStart int64) *produceScript {
	s := &produceScript{release: make(chan struct{})}
	cl.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		b, ok := batchOf(req, 0)
		if !ok {
			return nil, nil, false
		}
		s.mu.Lock()
		if s.off {
			s.mu.Unlock()
			return nil, nil, false
		}
		s.seen = append(s.seen, batchID{b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.NumRecords})
		i := len(s.seen) - 1
		s.mu.Unlock()
		code := then
		if i < len(script) {
			code = script[i]
		}
		if code == 0 {
			return nil, nil, false
		}
		if code == holdAnswer {
			select {
			case <-s.release:
			default:
				cl.SleepControl(func() { <-s.release })
			}
			return nil, nil, false
		}
		return answerProduce(req, code, logStart, 0), nil, true
	})
	return s
}

func (s *produceScript) batches() []batchID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batchID(nil), s.seen...)
}

// A batch that may have been written (its first attempt unanswered:
// REQUEST_TIMED_OUT), rewritten under a bumped epoch (UNKNOWN_PRODUCER_ID
// with its acknowledged records still in the log: a possible gap), then
// never acknowledged until its delivery timeout, is reported exactly once:
// failed with ErrDeliveryTimeout and ErrUnknownOutcome (an attempt may have
// been written), its Recovery the PossibleDuplicate of the rewrite. Each
// outcome names it once. The partition goes on afterwards.
func TestRewrittenBatchExpiresOnce(t *testing.T) {
	c := newCluster(t, 1)
	var mu sync.Mutex
	reports := map[string]int{}
	p, rec := newRecorded(t, c, producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(1500*time.Millisecond),
		producer.Linger(0))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	before := p.ProducerID()

	// Then never acknowledged: maybe-written answers until it expires.
	s := scriptProduce(c, []int16{kerr.RequestTimedOut.Code, kerr.UnknownProducerID.Code}, kerr.NotLeaderForPartition.Code, 0)
	var res producer.Result
	done := make(chan struct{})
	if err := p.Produce(ctx, prec(0, "b"), func(r producer.Result) {
		mu.Lock()
		reports[string(r.Record.Value)]++
		mu.Unlock()
		res = r
		close(done)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no report for b")
	}
	if !errors.Is(res.Err, producer.ErrDeliveryTimeout) || !errors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("b reported %v; want ErrDeliveryTimeout with ErrUnknownOutcome", res.Err)
	}
	if _, ok := res.Recovery.(producer.PossibleDuplicate); !ok {
		t.Fatalf("b's Recovery %T; want PossibleDuplicate", res.Recovery)
	}
	// The partition works on: under a further epoch if an attempt of the
	// expired batch was on the wire when it expired (it may hold its
	// sequences), under the same one if every attempt under the bumped
	// epoch was refused before it expired (its sequences were given
	// back). Which depends on timing; both are right.
	s.stop()
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	if after, n := p.ProducerID(), p.Bumps(); n < 1 || n > 2 || after != (producer.ProducerID{ID: before.ID, Epoch: before.Epoch + int16(n)}) {
		t.Fatalf("identity %v → %v, %d bumps; want the gap's bump, and one more only for the expired batch's sequences; sent %v", before, after, n, s.batches())
	}
	mu.Lock()
	if reports["b"] != 1 {
		t.Fatalf("b reported %d times", reports["b"])
	}
	mu.Unlock()
	perBatch := map[producer.BatchRef][]string{}
	for _, o := range rec.Outcomes() {
		var ref producer.BatchRef
		switch o := o.(type) {
		case producer.PossibleDuplicate:
			ref = o.Batch
		case producer.ResequencedNoLoss:
			ref = o.Batch
		case producer.Failed:
			ref = o.Batch
		default:
			continue
		}
		perBatch[ref] = append(perBatch[ref], kinds([]producer.Outcome{o}))
	}
	for ref, ks := range perBatch {
		seen := map[string]bool{}
		for _, k := range ks {
			if seen[k] {
				t.Fatalf("batch %d: outcomes %v (one reported twice)", ref, ks)
			}
			seen[k] = true
		}
		if seen["ResequencedNoLoss"] {
			t.Fatalf("batch %d reported ResequencedNoLoss though an attempt went unanswered: %v", ref, ks)
		}
	}
	if got := kinds(rec.Outcomes()); got != "PossibleGap,PossibleDuplicate,Failed" {
		t.Fatalf("outcomes %s", got)
	}
	for _, b := range s.batches()[2:] {
		if b.Epoch != before.Epoch+1 || b.Seq != 0 {
			t.Fatalf("b resent as %+v after the rewrite; want epoch %d, sequence 0", b, before.Epoch+1)
		}
	}
	// An attempt of b on the wire when it expired may reach the broker
	// after the script stopped refusing (seen under -race on a loaded
	// machine) and write b, once, before c: its outcome was reported
	// unknown. Acknowledged then, it also proves its sequences used, and
	// c follows it under the same epoch (no second bump).
	want := []string{"a", "c"}
	if got := values(partitionLog(t, c, 0)); len(got) == 3 {
		want = []string{"a", "b", "c"}
	}
	wantLog(t, c, 0, want)
}

// The same rewritten batch still on the wire at its delivery deadline is
// reported then, once (ErrDeliveryTimeout with ErrUnknownOutcome, Recovery
// PossibleDuplicate); the acknowledgement that comes afterwards reports
// nothing more, and, proving the batch appended, leaves no gap to bump for.
func TestRewrittenBatchExpiresOnWireThenAcked(t *testing.T) {
	c := newCluster(t, 1)
	// Retries spaced well apart: the held attempt starts at least two
	// backoffs after the batch, so its request times out at least that
	// long after the batch's delivery deadline, which the expiry (every
	// backoff) sees first.
	p, rec := newRecorded(t, c, producer.RequestTimeout(time.Second), producer.DeliveryTimeout(time.Second),
		producer.Linger(0), producer.RetryBackoff(250*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	before := p.ProducerID()
	s := scriptProduce(c, []int16{kerr.RequestTimedOut.Code, kerr.UnknownProducerID.Code, holdAnswer}, 0, 0)
	defer s.let()
	var mu sync.Mutex
	var got []producer.Result
	reported := make(chan struct{}, 1)
	if err := p.Produce(ctx, prec(0, "b"), func(r producer.Result) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		reported <- struct{}{}
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("no report for b")
	}
	s.let() // now kfake appends b and acknowledges it
	mu.Lock()
	res := got[0]
	mu.Unlock()
	if !errors.Is(res.Err, producer.ErrDeliveryTimeout) || !errors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("b reported %v; want ErrDeliveryTimeout with ErrUnknownOutcome", res.Err)
	}
	if _, ok := res.Recovery.(producer.PossibleDuplicate); !ok {
		t.Fatalf("b's Recovery %T; want PossibleDuplicate", res.Recovery)
	}
	s.stop()
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	mu.Lock()
	n := len(got)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("b reported %d times", n)
	}
	wantOneEpochBump(t, p, before)
	if k := kinds(rec.Outcomes()); k != "PossibleGap,PossibleDuplicate,Failed" {
		t.Fatalf("outcomes %s", k)
	}
	wantLog(t, c, 0, []string{"a", "b", "c"})
}
