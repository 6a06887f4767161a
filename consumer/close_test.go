package consumer_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// leftovers returns the stacks of goroutines running kepoch consumer or
// metadata code, or franz-go's client.
func leftovers() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kepoch/kepoch/consumer.") || strings.Contains(g, "kepoch/kepoch/metadata.") ||
			strings.Contains(g, "franz-go/pkg/kgo.") {
			out = append(out, g)
		}
	}
	return out
}

// noLeftovers waits up to 3s for the goroutines of closed consumers to end.
func noLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newOwnConsumer(t *testing.T, addrs []string, opts ...consumer.Opt) *consumer.Consumer {
	t.Helper()
	cons, err := consumer.New(append([]consumer.Opt{consumer.SeedBrokers(addrs...), consumer.FetchMaxWait(50 * time.Millisecond),
		consumer.RetryBackoff(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// TestCloseLeavesNothing: after Close, no goroutine of the consumer, its
// metadata refresher or its transport is left, whatever was going on (fetches
// on three brokers, a SeekToNearest waiting); Poll, and a Poll blocked when
// Close came, return errors.ErrClosed, and so do the other calls.
func TestCloseLeavesNothing(t *testing.T) {
	c := newCluster(t, 3)
	for p := int32(0); p < 3; p++ {
		produceRange(t, c, p, 0, 20)
	}
	noLeftovers(t) // nothing from earlier tests
	cons := newOwnConsumer(t, c.ListenAddrs())
	assignAll(t, cons, 3, consumer.Earliest())
	recs, _, _ := pollUntil(t, cons, 60, 10*time.Second)
	if len(recs) != 60 {
		t.Fatalf("got %d records", len(recs))
	}
	// A Poll with nothing to return, blocked when Close comes.
	polled := make(chan error, 1)
	go func() {
		_, err := cons.Poll(context.Background())
		polled <- err
	}()
	// A SeekToNearest whose answer never comes.
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, nil, true // no answer: the request hangs
	})
	nearest := make(chan error, 1)
	go func() {
		_, err := cons.SeekToNearest(context.Background(), topic, 0, consumer.OffsetAndMetadata{Offset: 5, LeaderEpoch: 0})
		nearest <- err
	}()
	time.Sleep(100 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cons.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	for name, ch := range map[string]chan error{"blocked Poll": polled, "SeekToNearest": nearest} {
		select {
		case err := <-ch:
			if !errors.Is(err, errors.ErrClosed) {
				t.Errorf("%s returned %v; want ErrClosed", name, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s still blocked after Close", name)
		}
	}
	if _, err := cons.Poll(context.Background()); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Poll after Close: %v", err)
	}
	if err := cons.Seek(topic, 0, 0); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Seek after Close: %v", err)
	}
	if err := cons.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	noLeftovers(t)
}

// TestCloseWhileFetchBlocked: a broker that never answers the Fetch in
// flight does not hold Close past its deadline (the fetch is cancelled), and
// nothing is left running.
func TestCloseWhileFetchBlocked(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	blocked := make(chan struct{}, 1)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case blocked <- struct{}{}:
		default:
		}
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	noLeftovers(t)
	cons := newOwnConsumer(t, c.ListenAddrs(), consumer.FetchMaxWait(time.Second), consumer.RequestTimeout(30*time.Second))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("no fetch reached the broker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := cons.Close(ctx)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %v with a 500ms deadline (err %v)", took, err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v", err)
	}
	noLeftovers(t)
}
