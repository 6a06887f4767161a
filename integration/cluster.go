package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Brokers are the broker node ids of the local cluster; node 100 is the
// KRaft controller and is never stopped by a scenario.
var Brokers = []int32{1, 2, 3}

// Seeds is the bootstrap list of the local cluster.
var Seeds = []string{"127.0.0.1:19091", "127.0.0.1:19092", "127.0.0.1:19093"}

// Cluster controls the local cluster started by scripts/kafka-local.sh: it
// stops, kills, pauses and starts brokers through that script (which owns the
// process ids), and speaks to the brokers with raw kmsg requests through a
// franz-go client used as transport only.
type Cluster struct {
	script string
	Client *kgo.Client

	mu      sync.Mutex
	downSet map[int32]string // broker → "stopped", "killed", "paused"
}

var (
	shared     *Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// Require returns the shared Cluster, or ends the test: it skips when
// KEPOCH_KAFKA is unset outside CI, and fails when the cluster is missing in
// CI (CI set) or when KEPOCH_KAFKA is set, so a real-cluster test never passes
// by skipping where the cluster is expected.
func Require(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv("KEPOCH_KAFKA") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("real-cluster test in CI without KEPOCH_KAFKA=1: run it through `make test`, which starts the cluster")
		}
		t.Skip("real-cluster test: set KEPOCH_KAFKA=1 with the cluster up (make kafka-up), or run make test")
	}
	sharedOnce.Do(func() { shared, sharedErr = connect() })
	if sharedErr != nil {
		t.Fatalf("local Kafka cluster: %v", sharedErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := shared.Heal(ctx); err != nil {
			t.Errorf("healing the cluster after %s: %v", t.Name(), err)
		}
	})
	return shared
}

func connect() (*Cluster, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "scripts", "kafka-local.sh")
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(Seeds...),
		// Admin and metadata requests through Client.Request are retried
		// on retriable errors and dead connections (brokers are killed
		// all the time here); Broker(id).Request never retries.
		kgo.RetryTimeout(20*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	c := &Cluster{script: script, Client: cl, downSet: map[int32]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitBrokers(ctx, Brokers...); err != nil {
		cl.Close()
		return nil, fmt.Errorf("cluster not serving (is it up? make kafka-up): %w", err)
	}
	return c, nil
}

func (c *Cluster) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka-local.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (c *Cluster) node(ctx context.Context, verb string, broker int32, state string) error {
	if err := c.run(ctx, verb, strconv.Itoa(int(broker))); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if state == "" {
		delete(c.downSet, broker)
	} else {
		c.downSet[broker] = state
	}
	return nil
}

// Stop stops broker n gracefully (controlled shutdown), escalating to SIGKILL
// after the script's grace period.
func (c *Cluster) Stop(ctx context.Context, n int32) error { return c.node(ctx, "stop", n, "stopped") }

// Kill sends SIGKILL to broker n and waits until the process is gone.
func (c *Cluster) Kill(ctx context.Context, n int32) error { return c.node(ctx, "kill", n, "killed") }

// Pause freezes broker n with SIGSTOP.
func (c *Cluster) Pause(ctx context.Context, n int32) error { return c.node(ctx, "pause", n, "paused") }

// Resume continues a paused broker with SIGCONT.
func (c *Cluster) Resume(ctx context.Context, n int32) error { return c.node(ctx, "resume", n, "") }

// Start starts broker n and waits until it logs that it serves (registered
// and unfenced).
func (c *Cluster) Start(ctx context.Context, n int32) error { return c.node(ctx, "start", n, "") }

// Heal brings every broker a scenario stopped, killed or paused back, and
// waits until all three serve metadata requests.
func (c *Cluster) Heal(ctx context.Context) error {
	c.mu.Lock()
	down := make(map[int32]string, len(c.downSet))
	for b, s := range c.downSet {
		down[b] = s
	}
	c.mu.Unlock()
	for b, s := range down {
		var err error
		if s == "paused" {
			err = c.Resume(ctx, b)
		} else {
			err = c.Start(ctx, b)
		}
		if err != nil {
			return err
		}
	}
	return c.WaitBrokers(ctx, Brokers...)
}

// WaitBrokers waits until metadata lists every given broker.
func (c *Cluster) WaitBrokers(ctx context.Context, ids ...int32) error {
	return poll(ctx, 200*time.Millisecond, func() (bool, error) {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		resp, err := req.RequestWith(ctx, c.Client)
		if err != nil {
			return false, nil //nolint:nilerr // not serving yet
		}
		have := map[int32]bool{}
		for _, b := range resp.Brokers {
			have[b.NodeID] = true
		}
		for _, id := range ids {
			if !have[id] {
				return false, nil
			}
		}
		return true, nil
	})
}

// Broker returns a transport to broker id with no retries.
func (c *Cluster) Broker(id int32) *kgo.Broker { return c.Client.Broker(int(id)) }

// Reader returns a transport to broker id for requests that only read
// (ListOffsets, OffsetForLeaderEpoch, Fetch, Describe*): a request whose
// connection failed (not one the broker answered) is sent again, up to
// five times, since after a broker restarts the transport's first request
// on the old connection fails with EOF and Broker has no retries. Never
// for a write: a failed connection may have carried it.
func (c *Cluster) Reader(id int32) kmsg.Requestor { return retryReader{c, id} }

type retryReader struct {
	c  *Cluster
	id int32
}

func (r retryReader) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	for attempt := 1; ; attempt++ {
		resp, err := r.c.Broker(r.id).Request(ctx, req)
		var ke *kerr.Error
		if err == nil || errors.As(err, &ke) || ctx.Err() != nil || attempt == 5 {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// poll calls f every interval until it reports done, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	for {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// errCode turns a Kafka error code into an error (nil for 0).
func errCode(code int16) error { return kerr.ErrorForCode(code) }
