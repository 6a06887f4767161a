package metadata

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMain fails the package if any refresher goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := waitGoroutines(2*time.Second, "kepoch/metadata."); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n%s\n", strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// goroutines returns the stacks of live goroutines whose stack mentions
// substr, other than the caller.
func goroutines(substr string) []string {
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
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller
			continue
		}
		if strings.Contains(g, substr) && !strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "TestMain") {
			out = append(out, g)
		}
	}
	return out
}

func waitGoroutines(d time.Duration, substr string) []string {
	deadline := time.Now().Add(d)
	for {
		left := goroutines(substr)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireNoRefresherGoroutines checks that no refresher goroutine is alive.
func requireNoRefresherGoroutines(t *testing.T) {
	t.Helper()
	if left := waitGoroutines(2*time.Second, "metadata.(*Refresher).run"); len(left) > 0 {
		t.Fatalf("refresher goroutine survived Close:\n%s", strings.Join(left, "\n\n"))
	}
}

// fakeClock is a manual clock: time moves only with Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	ch      chan time.Time
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	if d <= 0 {
		t.fired = true
		t.ch <- c.now
	}
	return t.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.fired && !t.stopped
		t.stopped = true
		return was
	}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.fired && !t.stopped && !t.at.After(c.now) {
			t.fired = true
			t.ch <- c.now
		}
	}
}

// timerCount is the number of timers ever created.
func (c *fakeClock) timerCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// timerAfter waits until more than n timers were created and returns the
// deadline of timer n (the first one created after the count was n).
func (c *fakeClock) timerAfter(t *testing.T, n int) time.Time {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		if len(c.timers) > n {
			at := c.timers[n].at
			c.mu.Unlock()
			return at
		}
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no timer created after timer %d", n)
	return time.Time{}
}

// fakePartition is the fake cluster's state of one partition.
type fakePartition struct {
	leader, epoch int32
	errCode       int16
}

type fakeTopic struct {
	id         TopicID
	partitions []fakePartition
	errCode    int16
}

// fakeCluster answers Metadata requests from a map, counts them, and can be
// told to fail or to block.
type fakeCluster struct {
	clock *fakeClock

	mu     sync.Mutex
	topics map[string]*fakeTopic
	fail   error         // returned by every call while set
	gate   chan struct{} // when set, every call waits for a receive on it (or ctx)
	calls  []fakeCall
	called chan struct{} // one value per call, buffered
}

type fakeCall struct {
	at     time.Time
	timers int // clock.timerCount() when the call started
	topics []string
	all    bool
}

func newFakeCluster(clock *fakeClock) *fakeCluster {
	return &fakeCluster{clock: clock, topics: map[string]*fakeTopic{}, called: make(chan struct{}, 10000)}
}

func (f *fakeCluster) set(name string, id TopicID, parts ...fakePartition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = &fakeTopic{id: id, partitions: parts}
}

func (f *fakeCluster) setEpoch(name string, partition, leader, epoch int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name].partitions[partition] = fakePartition{leader: leader, epoch: epoch}
}

func (f *fakeCluster) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeCluster) setGate(g chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = g
}

func (f *fakeCluster) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeCluster) call(i int) fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i]
}

// waitCalls waits until at least n calls were made.
func (f *fakeCluster) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.callCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d Metadata calls, got %d", n, f.callCount())
		}
		time.Sleep(time.Millisecond)
	}
}

// settle gives the refresher goroutine time to do anything it would do and
// checks that the number of calls stays n.
func (f *fakeCluster) settle(t *testing.T, n int) {
	t.Helper()
	time.Sleep(30 * time.Millisecond)
	if got := f.callCount(); got != n {
		t.Fatalf("Metadata calls = %d, want %d", got, n)
	}
}

func (f *fakeCluster) Request(ctx context.Context, kreq kmsg.Request) (kmsg.Response, error) {
	req, ok := kreq.(*kmsg.MetadataRequest)
	if !ok {
		return nil, fmt.Errorf("fake: unexpected request %T", kreq)
	}
	c := fakeCall{at: f.clock.Now(), timers: f.clock.timerCount(), all: req.Topics == nil}
	for _, t := range req.Topics {
		c.topics = append(c.topics, *t.Topic)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	gate, fail := f.gate, f.fail
	f.mu.Unlock()
	f.called <- struct{}{}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	resp := kmsg.NewPtrMetadataResponse()
	resp.Version = 12
	resp.ControllerID = 1
	for i := int32(1); i <= 3; i++ {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = i, "127.0.0.1", 9090+i
		resp.Brokers = append(resp.Brokers, b)
	}
	names := c.topics
	if c.all {
		names = nil
		for name := range f.topics {
			names = append(names, name)
		}
	}
	for _, name := range names {
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr(name)
		ft := f.topics[name]
		if ft == nil {
			rt.ErrorCode = 3 // UNKNOWN_TOPIC_OR_PARTITION
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.TopicID = ft.id
		rt.ErrorCode = ft.errCode
		for i, fp := range ft.partitions {
			rp := kmsg.NewMetadataResponseTopicPartition()
			rp.Partition = int32(i)
			rp.Leader = fp.leader
			rp.LeaderEpoch = fp.epoch
			rp.ErrorCode = fp.errCode
			rp.Replicas = []int32{1, 2, 3}
			rp.ISR = []int32{1, 2, 3}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// newTestRefresher builds a refresher on a fake clock and cluster with a
// fixed jitter (factor 1.0), and closes it at the end of the test.
func newTestRefresher(t *testing.T, opts ...Opt) (*Refresher, *fakeCluster, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	fc := newFakeCluster(clock)
	all := append([]Opt{WithClock(clock), WithJitter(func() float64 { return 0.5 }), MaxAge(time.Hour)}, opts...)
	r := NewRefresher(fc, all...)
	t.Cleanup(func() {
		r.Close()
		requireNoRefresherGoroutines(t)
	})
	return r, fc, clock
}
