package kepochtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The errors the harness returns. Every error a Cluster method returns
// matches one of these with errors.Is, or wraps a Kafka error (kerr) or a
// context error.
var (
	// ErrClosed: the cluster was closed (the test ended).
	ErrClosed = errors.New("kepochtest: cluster closed")
	// ErrUnknownPartition: the topic or partition does not exist.
	ErrUnknownPartition = errors.New("kepochtest: unknown topic or partition")
	// ErrNothingLost: an UncleanElection whose keep offset is at or past
	// the log end would lose nothing (use CleanElection).
	ErrNothingLost = errors.New("kepochtest: the log ends at or before keep; nothing would be lost")
	// ErrBelowLogStart: an offset is below the partition's log start
	// offset.
	ErrBelowLogStart = errors.New("kepochtest: offset below the log start offset")
	// ErrInvalidArgument: an argument is out of range (a negative
	// offset, no partitions, an empty name).
	ErrInvalidArgument = errors.New("kepochtest: invalid argument")
)

// Error is a failed harness operation on one partition (Partition -1 for a
// whole topic).
type Error struct {
	Op        string
	Topic     string
	Partition int32
	Err       error
}

// Error describes the operation, the partition and the cause.
func (e *Error) Error() string {
	where := e.Topic
	if e.Partition >= 0 {
		where += "[" + strconv.Itoa(int(e.Partition)) + "]"
	}
	return "kepochtest: " + e.Op + " " + where + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func opErr(op, topic string, partition int32, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Topic: topic, Partition: partition, Err: err}
}

// Opt configures New.
type Opt func(*config)

type config struct {
	brokers int
	topics  []seedTopic
}

type seedTopic struct {
	name       string
	partitions int32
}

// Brokers sets the number of brokers (3 by default, at least 2: an
// election needs a broker to move leadership to).
func Brokers(n int) Opt { return func(c *config) { c.brokers = n } }

// Topic creates a topic with the given number of partitions when the
// cluster starts.
func Topic(name string, partitions int32) Opt {
	return func(c *config) { c.topics = append(c.topics, seedTopic{name, partitions}) }
}

// Cluster is an in-process Kafka cluster (franz-go's kfake) whose
// partitions can be put through the faults kepoch's clients must report:
// unclean and clean leader elections, lost producer state, records deleted
// below a consumer's position, and topic recreation. Each fault is made in
// the broker's own state (its log, its epochs, its producer state), so
// every answer a client gets is the broker's.
//
// The cluster keeps its data in a temporary directory and listens on fixed
// 127.0.0.1 ports, so it can be restarted in place; clients keep their seed
// addresses across restarts. It is closed when the test ends. Its methods
// are safe for concurrent use; scenarios run one at a time.
type Cluster struct {
	tb      testing.TB
	cfg     config
	dir     string
	ports   []int
	seeds   []string
	admin   *kgo.Client // the harness's own requests
	probe   *kgo.Client // epoch gate probes only (never blocked behind a held request)
	closing chan struct{}

	mu     sync.Mutex // serializes scenarios; guards kc, life, closed
	kc     *kfake.Cluster
	life   chan struct{} // closed when kc is about to close
	closed bool
	// gates are the epoch gates installed on kc, by topic: a restart
	// installs those still holding on the new kc, a recreation of the
	// topic retires them. kc's one OffsetForLeaderEpoch control reads
	// them (on kfake's goroutine: gateMu, never mu); gateKC is the kc
	// that control is installed on.
	gateMu sync.Mutex
	gates  map[string][]*gate
	gateKC *kfake.Cluster
}

// New starts a cluster (3 brokers unless Brokers says otherwise) and
// registers its Close with tb.Cleanup. It fails the test if the cluster
// cannot start.
func New(tb testing.TB, opts ...Opt) *Cluster {
	tb.Helper()
	cfg := config{brokers: 3}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.brokers < 2 {
		tb.Fatalf("kepochtest: Brokers(%d): need at least 2", cfg.brokers)
	}
	for _, t := range cfg.topics {
		if t.name == "" || t.partitions < 1 {
			tb.Fatalf("kepochtest: Topic(%q, %d): need a name and at least one partition", t.name, t.partitions)
		}
	}
	c := &Cluster{tb: tb, cfg: cfg, dir: tb.TempDir(), closing: make(chan struct{})}
	held, err := c.reservePorts(cfg.brokers)
	if err != nil {
		tb.Fatalf("kepochtest: reserving ports: %v", err)
	}
	open := make(chan struct{})
	close(open)
	kc, err := c.start(held, open)
	for _, l := range held {
		l.Close() // those the first start did not take over
	}
	if err != nil {
		tb.Fatalf("kepochtest: starting the cluster: %v", err)
	}
	c.kc, c.life = kc, make(chan struct{})
	for _, t := range cfg.topics {
		if err := kc.CreateTopic(t.name, t.partitions, nil); err != nil {
			kc.Close()
			tb.Fatalf("kepochtest: creating topic %q: %v", t.name, err)
		}
	}
	if c.admin, err = kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond })); err == nil {
		c.probe, err = kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	}
	if err != nil {
		if c.admin != nil {
			c.admin.Close()
		}
		kc.Close()
		tb.Fatalf("kepochtest: admin client: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Seeds returns the brokers' addresses (host:port), valid for the whole
// test: a restart listens on the same ports.
func (c *Cluster) Seeds() []string { return append([]string(nil), c.seeds...) }

// Close stops the cluster and the harness's clients. It is called by the
// test's cleanup; calling it earlier is allowed, and calling it again does
// nothing. Methods called after Close return ErrClosed.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.closing)
	close(c.life)
	c.kc.Close()
	c.admin.Close()
	c.probe.Close()
}

// CreateTopic creates a topic with the given number of partitions.
func (c *Cluster) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	if topic == "" || partitions < 1 {
		return opErr("create topic", topic, -1, fmt.Errorf("%w: need a name and at least one partition", ErrInvalidArgument))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.kc.CreateTopic(topic, partitions, nil); err != nil {
		return opErr("create topic", topic, -1, err)
	}
	return opErr("create topic", topic, -1, c.waitTopic(ctx, topic, func(s TopicState) bool { return len(s.Partitions) == int(partitions) }))
}

// reservePorts listens on n free ports of 127.0.0.1; the first start takes
// the listeners over, so no other process can take a port before it.
func (c *Cluster) reservePorts(n int) (map[string]net.Listener, error) {
	held := map[string]net.Listener{}
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range held {
				l.Close()
			}
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c.ports = append(c.ports, port)
		c.seeds = append(c.seeds, addr)
		held[addr] = l
	}
	return held, nil
}

// start starts kfake on the cluster's ports and data directory. Its
// listeners accept connections only once open is closed, so that a
// restarted cluster is set up (controls installed, leadership moved)
// before any client sees it.
func (c *Cluster) start(held map[string]net.Listener, open <-chan struct{}) (*kfake.Cluster, error) {
	var mu sync.Mutex
	listen := func(network, address string) (net.Listener, error) {
		mu.Lock()
		l, ok := held[address]
		delete(held, address)
		mu.Unlock()
		if !ok {
			var err error
			if l, err = net.Listen(network, address); err != nil {
				return nil, err
			}
		}
		return &gatedListener{Listener: l, open: open, done: make(chan struct{})}, nil
	}
	return kfake.NewCluster(kfake.NumBrokers(c.cfg.brokers), kfake.Ports(c.ports...), kfake.ListenFn(listen), kfake.DataDir(c.dir))
}

// restart closes the cluster (kfake persists its state), lets change edit
// the data directory, starts it again on the same ports and runs setup on
// it before any connection is accepted. If change fails, the cluster is
// started unchanged and its error returned. Call with c.mu held.
func (c *Cluster) restart(change func(dir string) error, setup func(kc *kfake.Cluster, life <-chan struct{}) error) error {
	close(c.life)
	c.kc.Close()
	c.gateMu.Lock()
	pending := c.gates // the closed cluster's: installed again below
	c.gates = nil
	c.gateMu.Unlock()
	changeErr := keepEmptySegments(c.dir)
	if changeErr == nil {
		changeErr = change(c.dir)
	}
	open := make(chan struct{})
	kc, err := c.start(nil, open)
	if err != nil {
		// Nothing to serve with: the test cannot go on.
		c.closed = true
		close(c.closing)
		c.admin.Close()
		c.probe.Close()
		return fmt.Errorf("%w: restarting the cluster: %v", ErrClosed, err)
	}
	c.kc, c.life = kc, make(chan struct{})
	for _, gs := range pending {
		for _, g := range gs {
			if !g.written.done() { // the new epoch still holds no record
				c.installGate(kc, c.life, g)
			}
		}
	}
	if changeErr == nil && setup != nil {
		changeErr = setup(kc, c.life)
	}
	close(open)
	return changeErr
}

// gatedListener accepts connections only once open is closed.
type gatedListener struct {
	net.Listener
	open <-chan struct{}
	done chan struct{}
	once sync.Once
}

func (l *gatedListener) Accept() (net.Conn, error) {
	select {
	case <-l.open:
	case <-l.done:
		return nil, net.ErrClosed
	}
	return l.Listener.Accept()
}

func (l *gatedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
