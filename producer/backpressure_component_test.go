package producer_test

// Component tests of buffering, Flush and Close on kfake: Produce blocks on
// a full buffer and honours its context, Flush and Close honour theirs,
// Close leaves no goroutine behind and reports everything, and callbacks
// may call back into the producer.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A full buffer blocks Produce until acknowledgements free space; a
// context that ends first makes Produce return its error (and buffer
// nothing). Flush with a deadline returns the deadline's error while
// records are held, and succeeds once they are acknowledged.
func TestBackpressureBlocksAndHonoursContext(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newRecorded(t, c, producer.MaxBufferedBytes(4096), producer.BatchMaxBytes(1024))
	ctx := testCtx(t, 15*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "first")))
	release := holdProduce(c, 0)
	defer release()

	value := string(make([]byte, 500))
	var in []*producer.Record
	var accepted *pendingResults
	var blocked error
	for i := 0; ; i++ {
		r := prec(0, fmt.Sprintf("v%02d%s", i, value))
		short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		done := make(chan producer.Result, 1)
		start := time.Now()
		err := p.Produce(short, r, func(res producer.Result) { done <- res })
		cancel()
		if err != nil {
			blocked = err
			if el := time.Since(start); el < 100*time.Millisecond {
				t.Fatalf("Produce gave up after %v, before its context ended", el)
			}
			break
		}
		in = append(in, r)
		if i > 20 {
			t.Fatal("buffer of 4 KiB took 20 records of 500 bytes")
		}
	}
	if !errors.Is(blocked, context.DeadlineExceeded) || len(in) < 4 || len(in) > 9 {
		t.Fatalf("after %d records, Produce returned %v; want the buffer full after about 8", len(in), blocked)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := p.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush while held: %v", err)
	}
	cancel()

	// A Produce blocked on the full buffer proceeds once space is freed.
	unblocked := make(chan error, 1)
	late := prec(0, "late"+value)
	go func() { unblocked <- p.Produce(ctx, late, nil) }()
	select {
	case err := <-unblocked:
		t.Fatalf("Produce did not block on a full buffer: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-unblocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Produce still blocked after the buffer drained")
	}
	accepted = sendAsync(t, ctx, p)
	accepted.wait(time.Second)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"first"}
	for _, r := range in {
		want = append(want, string(r.Value))
	}
	wantLog(t, c, 0, append(want, "late"+value))
}

// Close with a deadline while the leader holds every request: it returns
// the deadline's error, every record gets its report (the one on the wire
// ErrClosed with ErrUnknownOutcome, the ones never sent plain ErrClosed),
// later calls say ErrClosed, and no goroutine of the producer is left.
func TestCloseWithDeadlineWhileHeld(t *testing.T) {
	noLeak(t) // nothing left by earlier tests
	c := newCluster(t, 2)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.RetryBackoff(10*time.Millisecond), producer.MaxInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 15*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(1, "b")))
	release, held := holdProduceSeen(c, 0)
	defer release()
	wired := sendAsync(t, ctx, p, prec(0, "c"))
	onWire(t, held)
	queued := sendAsync(t, ctx, p, prec(0, "d"), prec(0, "e"))

	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Close(closeCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	rc := wired.wait(time.Second)[0]
	if !errors.Is(rc.Err, errors.ErrClosed) || !errors.Is(rc.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("record on the wire: %v", rc.Err)
	}
	for _, r := range queued.wait(time.Second) {
		if !errors.Is(r.Err, errors.ErrClosed) || errors.Is(r.Err, errors.ErrUnknownOutcome) {
			t.Fatalf("record never sent: %v", r.Err)
		}
	}
	if err := p.Produce(ctx, prec(0, "f"), nil); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Produce after Close: %v", err)
	}
	if err := p.Flush(ctx); !errors.Is(err, errors.ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	noLeak(t)
}

// A Produce blocked on a full buffer returns ErrClosed when the producer
// closes.
func TestCloseWakesBlockedProduce(t *testing.T) {
	c := newCluster(t, 1)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.MaxBufferedBytes(1024), producer.BatchMaxBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 10*time.Second)
	release := holdProduce(c, 0)
	defer release()
	if err := p.Produce(ctx, prec(0, string(make([]byte, 900))), nil); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- p.Produce(ctx, prec(0, string(make([]byte, 900))), nil) }()
	time.Sleep(50 * time.Millisecond)
	closeCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	p.Close(closeCtx)
	select {
	case err := <-blocked:
		if !errors.Is(err, errors.ErrClosed) {
			t.Fatalf("blocked Produce: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Produce still blocked after Close")
	}
	noLeak(t)
}

// A clean Close flushes everything first and leaves no goroutine; closing
// a transactional producer too.
func TestCloseFlushesAndStopsEverything(t *testing.T) {
	noLeak(t)
	c := newCluster(t, 3)
	ctx := testCtx(t, 10*time.Second)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.Linger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pr := sendAsync(t, ctx, p, keyedRecords(300, 7)...)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pr.all:
	default:
		t.Fatal("Close returned before every record's callback ran")
	}
	mustOK(t, pr.wait(time.Second))
	noLeak(t)

	tp, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.TransactionalID("close-txn"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noLeak(t)
}

// Callbacks run without the producer's lock: a delivery callback may
// produce (even when that blocks on a full buffer) and read the producer's
// state; OnOutcome may too. Nothing deadlocks and every record arrives.
func TestCallbacksMayCallTheProducer(t *testing.T) {
	c := newCluster(t, 2)
	var p *producer.Producer
	var outcomes atomic.Int32
	var ready = make(chan struct{})
	p, _ = newRecorded(t, c, producer.MaxBufferedBytes(2048), producer.BatchMaxBytes(1024),
		producer.OnOutcome(func(producer.Outcome) {
			<-ready
			_ = p.ProducerID()
			_ = p.Bumps()
			outcomes.Add(1)
		}))
	close(ready)
	ctx := testCtx(t, 15*time.Second)
	value := string(make([]byte, 300))
	var mu sync.Mutex
	var chained []string
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		r := prec(int32(i%2), fmt.Sprintf("main%02d%s", i, value))
		if err := p.Produce(ctx, r, func(res producer.Result) {
			defer wg.Done()
			if res.Err != nil {
				t.Errorf("%v", res.Err)
				return
			}
			_ = p.ProducerID()
			if i%3 == 0 {
				// Produce from a callback, into a full buffer.
				v := fmt.Sprintf("chained%02d", i)
				wg.Add(1)
				if err := p.Produce(ctx, prec(res.Partition, v), func(res producer.Result) {
					defer wg.Done()
					if res.Err != nil {
						t.Errorf("%s: %v", v, res.Err)
					}
				}); err != nil {
					wg.Done()
					t.Errorf("Produce from a callback: %v", err)
					return
				}
				mu.Lock()
				chained = append(chained, v)
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if i == 30 {
			// A recovery, so that OnOutcome runs too.
			c.Fault(kfakeOOOSN(0))
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: callbacks calling the producer never finished")
	}
	mu.Lock()
	n := 60 + len(chained)
	mu.Unlock()
	got := len(partitionLog(t, c, 0)) + len(partitionLog(t, c, 1))
	if got != n {
		t.Fatalf("%d records in the log, want %d", got, n)
	}
	if outcomes.Load() == 0 {
		t.Fatal("OnOutcome never ran")
	}
}
