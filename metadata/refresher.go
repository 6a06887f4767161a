package metadata

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// Refresher owns the metadata cache of one transport and the one goroutine
// that refreshes it. Any number of consumers and producers share it; all
// methods are safe for concurrent use.
//
// Reads (Lookup, Topic, Brokers) load an immutable snapshot and never block.
// Refreshes happen on one goroutine: Trigger and Refresh only ask for one,
// and every request asked for before a round trip starts is served by that
// round trip. Requests arriving while a round trip is in flight are served
// by the next one (the answer in flight may predate the error that caused
// them).
type Refresher struct {
	cfg cfg
	req kmsg.Requestor

	cur     atomic.Pointer[state]
	writeMu sync.Mutex // serializes state writers (merge, ApplyHint) and their event dispatch

	mu       sync.Mutex
	interest map[string]int // watched topic -> number of watchers
	all      int            // number of WatchAll watchers
	pending  Reason         // reasons asked for since the last round trip started
	waiters  []chan error   // Refresh calls waiting for the next round trip
	changed  chan struct{}  // closed and replaced after each round trip or hint
	closed   bool
	stats    Stats
	served   uint64 // stats.RoundTrips of the latest round trip whose answer was merged
	// released: when a round trip last asked about the released topics
	// (requestLocked), on the refresher's clock.
	released time.Time

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}

	wake      chan struct{} // capacity 1: "pending changed"
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Stats describes the refresher's round trips.
type Stats struct {
	RoundTrips  uint64    // Metadata requests sent
	Failures    uint64    // round trips that failed
	LastReasons Reason    // the reasons the latest round trip served
	LastRefresh time.Time // end of the latest successful round trip, on the refresher's clock
	LastErr     error     // the latest round trip's error, nil if it succeeded
}

// NewRefresher returns a refresher that sends Metadata requests through
// req and starts its goroutine. req is normally the transport's
// *kgo.Client: it sends Metadata to any broker and feeds kgo's broker
// table, which Client.Broker(id) needs, and its RequestSharded says which
// broker answered (with a Requestor that cannot, a new topic ID is adopted
// only after Confirmations answers, see the package's merge rules). No
// request is sent until a topic is watched, a refresh is asked for or
// MaxAge passes. Close stops it.
func NewRefresher(req kmsg.Requestor, opts ...Opt) *Refresher {
	c := defaultCfg()
	for _, o := range opts {
		o.apply(&c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Refresher{
		cfg:      c,
		req:      req,
		interest: map[string]int{},
		changed:  make(chan struct{}),
		subs:     map[*Subscription]struct{}{},
		wake:     make(chan struct{}, 1),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	r.cur.Store(emptyState())
	r.released = c.clock.Now()
	r.wg.Add(1)
	go r.run()
	return r
}

// Close stops the refresher: the round trip in flight is cancelled, Refresh
// and WaitFor calls return ErrClosed, subscriptions end. When Close returns
// the refresher's goroutine has exited. Lookups keep answering from the last
// snapshot. Close is idempotent.
func (r *Refresher) Close() {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		waiters := r.waiters
		r.waiters = nil
		r.mu.Unlock()
		// done is closed once a writer that saw the refresher open has
		// finished its dispatch; later writers see it closed.
		r.writeMu.Lock()
		close(r.done)
		r.writeMu.Unlock()
		r.cancel()
		for _, w := range waiters {
			w <- errors.ErrClosed
		}
	})
	r.wg.Wait()
}

// Watch registers interest in topics: refreshes ask for every watched
// topic (and only those, unless WatchAll is in effect). Watching a topic
// the cache holds no partition of triggers a refresh. Interest is counted:
// the returned function releases this call's interest (once; later calls
// do nothing). A released topic stays cached, with its epochs, and is
// asked about once per MaxAge (by the periodic refresh, or by the first
// round trip MaxAge after one last asked), so that its deletion is found, and while its removal is under way; once it has no partitions
// (removed after Confirmations answers called it unknown, or never
// answered with any) and no one watches it, only a bounded tombstone of
// it is kept (its topic ID and its partitions' epoch floors, so that a
// lagging broker's answer cannot bring it back or take its epochs back),
// the oldest dropped first.
func (r *Refresher) Watch(topics ...string) (unwatch func()) {
	r.mu.Lock()
	st := r.cur.Load()
	missing := false
	for _, t := range topics {
		r.interest[t]++
		if ts := st.topics[t]; ts == nil || len(ts.Partitions) == 0 {
			missing = true
		}
	}
	r.mu.Unlock()
	if missing {
		r.Trigger(ReasonWatch)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, t := range topics {
				if r.interest[t]--; r.interest[t] <= 0 {
					delete(r.interest, t)
				}
			}
		})
	}
}

// WatchAll makes refreshes ask for every topic in the cluster while at
// least one WatchAll is in effect. Topics absent from such an answer count
// as unknown (see Confirmations). It triggers a refresh.
func (r *Refresher) WatchAll() (unwatch func()) {
	r.mu.Lock()
	r.all++
	r.mu.Unlock()
	r.Trigger(ReasonWatch)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.all--
			r.mu.Unlock()
		})
	}
}

// Trigger asks for a refresh and returns at once. Triggers are coalesced:
// all those made before a round trip starts share it, and the round trip
// starts no sooner than the backoff allows (see Backoff). Reason 0 means
// ReasonManual. Trigger after Close does nothing.
func (r *Refresher) Trigger(reason Reason) {
	if reason == 0 {
		reason = ReasonManual
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.pending |= reason
	r.mu.Unlock()
	r.poke()
}

// Refresh asks for a refresh and waits for the round trip that serves it (one
// that starts after the call), returning that round trip's error. It shares
// the round trip with any concurrent triggers. Reason 0 means ReasonManual.
func (r *Refresher) Refresh(ctx context.Context, reason Reason) error {
	if ctx == nil {
		return nilContext("Refresh")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if reason == 0 {
		reason = ReasonManual
	}
	ch := make(chan error, 1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errors.ErrClosed
	}
	r.pending |= reason
	r.waiters = append(r.waiters, ch)
	r.mu.Unlock()
	r.poke()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return errors.ErrClosed
	}
}

// ApplyHint applies a KIP-951 CurrentLeader hint (from a Fetch or Produce
// answer carrying NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH) directly to
// the cache, without a round trip. It is applied, and a LeaderChanged event
// with Source FromHint emitted, only if the partition is cached, leader and
// epoch are not -1, epoch is newer than the cached epoch, and id (the topic
// ID the answered request named; zero if it named the topic by name only)
// is zero or the cached topic's ID: a hint about another incarnation of the
// topic (deleted and recreated since the request was sent, or answered by a
// broker still serving the old one) carries that incarnation's epochs,
// which would hold the new one's partition back. It reports whether it was
// applied.
func (r *Refresher) ApplyHint(topic string, id TopicID, partition, leader, epoch int32) bool {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.isClosed() {
		return false
	}
	next, ev := applyHint(r.cur.Load(), topic, id, partition, leader, epoch)
	if ev == nil {
		return false
	}
	r.cur.Store(next)
	r.dispatch([]Event{*ev})
	r.mu.Lock()
	r.signalLocked()
	r.mu.Unlock()
	return true
}

// Lookup returns the cached partition. The error, a *errors.PartitionError
// with Op "lookup", wraps ErrUnknownTopicOrPartition when the partition is
// not cached (or the topic's own error, such as TOPIC_AUTHORIZATION_FAILED)
// and ErrLeaderNotAvailable when it has no usable leader; the partition is
// returned in that case too. Lookup never blocks and sends nothing.
func (r *Refresher) Lookup(topic string, partition int32) (Partition, error) {
	p, err := r.cur.Load().lookup(topic, partition)
	if err != nil {
		return p, &errors.PartitionError{Op: "lookup", Topic: topic, Partition: partition, Offset: -1, LeaderEpoch: p.LeaderEpoch, Err: err}
	}
	return p, nil
}

// Topic returns the cached topic: its ID (zero if the brokers do not send
// IDs) and partitions (len is the partition count). The error wraps
// ErrUnknownTopicOrPartition, or the topic's last error, when no partition
// is cached.
func (r *Refresher) Topic(name string) (Topic, error) {
	t, _, err := r.TopicAt(name)
	return t, err
}

// Version identifies the refresher's current view of the cluster: two calls
// return equal Versions only if nothing Topic, Partition or Brokers answer
// changed in between. A caller that derives something from Topic can keep
// it with the Version it saw and reuse it while Version still returns that.
// A round trip whose answer changes nothing keeps the Version.
type Version struct{ s *state }

// Version returns the current view's Version.
func (r *Refresher) Version() Version { return Version{r.cur.Load()} }

// TopicAt is Topic together with the Version of the view it was read from.
func (r *Refresher) TopicAt(name string) (Topic, Version, error) {
	s := r.cur.Load()
	t, err := s.topic(name)
	if err != nil {
		return t, Version{s}, &errors.PartitionError{Op: "lookup", Topic: name, Partition: -1, Offset: -1, LeaderEpoch: -1, Err: err}
	}
	return t, Version{s}, nil
}

// Brokers returns the brokers of the latest answer, sorted by node ID.
func (r *Refresher) Brokers() []Broker {
	return slices.Clone(r.cur.Load().brokers)
}

// Stats returns counters about round trips.
func (r *Refresher) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// WaitFor waits until the partition has a leader with leader epoch at least
// minEpoch (-1: any epoch), triggering refreshes (ReasonWait, spaced by the
// backoff) while it waits, and returns it. The topic is watched during the
// call. If the topic's ID changes while waiting (the topic was recreated,
// so minEpoch belongs to the old incarnation), it returns the new partition
// and an error wrapping ErrTopicIDChanged. It returns ctx's error when ctx
// ends and ErrClosed when the refresher is closed. An empty topic, a
// negative partition or a minEpoch below -1 is refused at once with an
// error matching errors.ErrInvalidArgument that names it (no partition
// could ever satisfy the wait).
func (r *Refresher) WaitFor(ctx context.Context, topic string, partition, minEpoch int32) (Partition, error) {
	switch {
	case ctx == nil:
		return Partition{}, nilContext("WaitFor")
	case topic == "":
		return Partition{}, invalidArgument("WaitFor", "topic", `"" is empty`)
	case partition < 0:
		return Partition{}, invalidArgument("WaitFor", "partition", fmt.Sprintf("%d of %q is negative", partition, topic))
	case minEpoch < -1:
		return Partition{}, invalidArgument("WaitFor", "minEpoch", fmt.Sprintf("%d is below -1 (any epoch)", minEpoch))
	}
	var p Partition
	var id TopicID
	first := true
	err := r.waitUntil(ctx, topic, func(s *state) (bool, error) {
		if first {
			first = false
			if t := s.topics[topic]; t != nil {
				id = t.ID
			}
		}
		var err error
		p, err = s.lookup(topic, partition)
		// The topic's ID, not the partition's: a new incarnation may not
		// have this partition at all.
		var now TopicID
		if t := s.topics[topic]; t != nil {
			now = t.ID
		}
		if !id.IsZero() && !now.IsZero() && now != id {
			p.TopicID = now
			return true, &errors.PartitionError{Op: "wait", Topic: topic, Partition: partition, Offset: -1, LeaderEpoch: p.LeaderEpoch, Err: errors.ErrTopicIDChanged}
		}
		if id.IsZero() {
			id = now
		}
		return err == nil && p.LeaderEpoch >= minEpoch, nil
	})
	return p, err
}

// WaitForTopic waits until the topic is known with at least one partition,
// whatever its partitions' leaders, triggering refreshes (ReasonWait,
// spaced by the backoff) while it waits, and returns it with the Version
// it was read at. The topic is watched during the call. It returns ctx's
// error when ctx ends, ErrClosed when the refresher is closed, and the
// topic's error when the brokers refuse it for good (not retriable) in an
// answer to a request sent after the call began. An empty topic is refused
// at once with an error matching errors.ErrInvalidArgument.
func (r *Refresher) WaitForTopic(ctx context.Context, topic string) (Topic, Version, error) {
	if ctx == nil {
		return Topic{}, Version{}, nilContext("WaitForTopic")
	}
	if topic == "" {
		return Topic{}, Version{}, invalidArgument("WaitForTopic", "topic", `"" is empty`)
	}
	return r.WaitForPartitions(ctx, topic, 1)
}

// WaitForPartitions is WaitForTopic waiting until the topic has at least n
// partitions (n < 1 is taken as 1): partitions just added to a topic
// (CreatePartitions) are missing from the cache until a refresh answers
// them. Its refreshes go through the refresher's one goroutine, so they
// are coalesced with every other trigger and spaced by the backoff.
func (r *Refresher) WaitForPartitions(ctx context.Context, topic string, n int32) (Topic, Version, error) {
	if ctx == nil {
		return Topic{}, Version{}, nilContext("WaitForPartitions")
	}
	if topic == "" {
		return Topic{}, Version{}, invalidArgument("WaitForPartitions", "topic", `"" is empty`)
	}
	n = max(n, 1)
	var t Topic
	var v Version
	r.mu.Lock()
	asked := r.stats.RoundTrips // round trips sent before this call
	r.mu.Unlock()
	err := r.waitUntil(ctx, topic, func(*state) (bool, error) {
		r.mu.Lock()
		fresh := r.served > asked // read before the view: its answer is in it
		r.mu.Unlock()
		var err error
		t, v, err = r.TopicAt(topic)
		if err != nil && !errors.IsRetriable(err) && fresh {
			// Refused for good (TOPIC_AUTHORIZATION_FAILED,
			// INVALID_TOPIC_EXCEPTION) by an answer to a request sent
			// during this call (a refusal cached from before may be
			// stale, an ACL since granted): waiting cannot help.
			return true, err
		}
		return err == nil && len(t.Partitions) >= int(n), nil
	})
	if err != nil && (errors.Is(err, errors.ErrClosed) || ctx.Err() != nil) {
		return Topic{}, Version{}, err
	}
	return t, v, err
}

// waitUntil watches topic while ready (given the current view) is false,
// triggering refreshes (ReasonWait, spaced by the backoff) and waiting for
// each change. It returns ready's error, ctx's when ctx ends, and
// ErrClosed when the refresher is closed.
func (r *Refresher) waitUntil(ctx context.Context, topic string, ready func(*state) (bool, error)) error {
	unwatch := r.Watch(topic)
	defer unwatch()
	for {
		r.mu.Lock()
		changed, closed := r.changed, r.closed
		r.mu.Unlock()
		if closed {
			return errors.ErrClosed
		}
		if ok, err := ready(r.cur.Load()); ok || err != nil {
			return err
		}
		r.Trigger(ReasonWait)
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return errors.ErrClosed
		}
	}
}

func (r *Refresher) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Refresher) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// signalLocked wakes everything waiting for a change. r.mu must be held.
func (r *Refresher) signalLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// run is the refresher's goroutine.
func (r *Refresher) run() {
	defer r.wg.Done()
	clock := r.cfg.clock
	lastEnd := clock.Now()
	nextAllowed := lastEnd
	streak := 0
	for {
		r.mu.Lock()
		pending := r.pending
		r.mu.Unlock()

		now := clock.Now()
		var due time.Time
		switch {
		case pending != 0:
			due = nextAllowed
		case r.cfg.maxAge > 0:
			due = lastEnd.Add(r.cfg.maxAge)
		}
		if !due.IsZero() && !now.Before(due) {
			if now.Sub(nextAllowed) >= r.cfg.maxBackoff {
				streak = 0 // idle long enough: start again from the minimum
			}
			end, changed, triggered, err := r.roundTrip()
			if r.ctx.Err() != nil {
				return
			}
			// Pokes made before or during the round trip are stale: what
			// they asked for is either served or still in r.pending, which
			// the next iteration reads after this drain.
			select {
			case <-r.wake:
			default:
			}
			lastEnd = end
			switch {
			case err != nil:
				streak++
			case changed:
				streak = 0
			case triggered:
				streak++
			}
			streak = min(streak, 30)
			nextAllowed = lastEnd.Add(backoff(streak, r.cfg.minBackoff, r.cfg.maxBackoff, r.cfg.jitter()))
			continue
		}

		var fire <-chan time.Time
		stop := func() bool { return false }
		if !due.IsZero() {
			fire, stop = clock.Timer(due.Sub(now))
		}
		select {
		case <-r.wake:
		case <-fire:
		case <-r.ctx.Done():
			stop()
			return
		}
		stop()
	}
}

// roundTrip sends one Metadata request and applies its answer. It reports
// whether any event was emitted and whether the round trip served a
// trigger (anything but the periodic refresh).
// roundTrip sends one Metadata request and publishes its answer. end is the
// clock read when the answer arrived, before anything was published, so
// spacing measured from it never starts after a waiter has seen the result.
func (r *Refresher) roundTrip() (end time.Time, changed, triggered bool, err error) {
	r.mu.Lock()
	reasons := r.pending
	r.pending = 0
	if reasons == 0 {
		reasons = ReasonMaxAge
	}
	waiters := r.waiters
	r.waiters = nil
	// The periodic refresh asks about the released topics, and so does
	// any round trip once MaxAge passed since one last did: triggered
	// round trips coming more often than MaxAge put the periodic one off
	// for as long as they come.
	now := r.cfg.clock.Now()
	released := reasons&ReasonMaxAge != 0 || (r.cfg.maxAge > 0 && !now.Before(r.released.Add(r.cfg.maxAge)))
	if released {
		r.released = now
	}
	req, all := r.requestLocked(released)
	r.stats.RoundTrips++
	trip := r.stats.RoundTrips
	r.mu.Unlock()

	ctx, cancel := r.ctx, context.CancelFunc(func() {})
	if r.cfg.requestTimeout > 0 {
		// (A bound of zero or less is none: as a deadline, it failed
		// every round trip before it was sent, for good.)
		ctx, cancel = context.WithTimeout(r.ctx, r.cfg.requestTimeout)
	}
	kresp, broker, err := r.request(ctx, req)
	cancel()
	end = r.cfg.clock.Now()
	var decoded *response
	if err == nil {
		if resp, ok := kresp.(*kmsg.MetadataResponse); ok {
			decoded, err = decode(resp, all, broker)
		} else {
			err = fmt.Errorf("unexpected answer %T to a Metadata request", kresp)
		}
	}
	if r.ctx.Err() != nil {
		err = errors.ErrClosed
	}
	unsettled := false
	if err == nil {
		r.writeMu.Lock()
		if r.isClosed() {
			err = errors.ErrClosed
		} else {
			next, events := merge(r.cur.Load(), decoded, r.cfg.confirmations)
			r.mu.Lock()
			next = compact(next, r.wantedLocked, r.cfg.tombstones)
			r.mu.Unlock()
			r.cur.Store(next)
			r.dispatch(events)
			changed, unsettled = len(events) > 0, next.unsettled
		}
		r.writeMu.Unlock()
	}
	if err != nil && err != errors.ErrClosed {
		err = fmt.Errorf("metadata refresh: %w", err)
	}

	r.mu.Lock()
	r.stats.LastReasons = reasons
	r.stats.LastErr = err
	if err != nil {
		r.stats.Failures++
		if !r.closed {
			r.pending |= reasons&^ReasonMaxAge | ReasonRetry
		}
	} else {
		r.stats.LastRefresh = end
		r.served = trip
		if unsettled && !r.closed {
			// A topic ID the cache could not place yet (merge rule 5c),
			// or a topic answered unknown not yet removed (rule 8):
			// the next answers settle it.
			r.pending |= ReasonUnsettled
		}
	}
	r.signalLocked()
	r.mu.Unlock()
	for _, w := range waiters {
		w <- err
	}
	return end, changed, reasons&^ReasonMaxAge != 0, err
}

// shardedRequestor is what *kgo.Client also is: a Requestor whose answers
// say which broker gave them.
type shardedRequestor interface {
	RequestSharded(context.Context, kmsg.Request) []kgo.ResponseShard
}

// request sends req and returns the answer with the node ID of the broker
// that gave it, -1 when that is not known (a seed connection, whose ID kgo
// makes up, or a Requestor that does not say): merge rule 5 relies on each
// broker's answers moving only forward.
func (r *Refresher) request(ctx context.Context, req kmsg.Request) (kmsg.Response, int32, error) {
	s, ok := r.req.(shardedRequestor)
	if !ok {
		resp, err := r.req.Request(ctx, req)
		return resp, -1, err
	}
	shards := s.RequestSharded(ctx, req)
	if len(shards) != 1 {
		return nil, -1, fmt.Errorf("%d answers to one Metadata request", len(shards))
	}
	sh := shards[0]
	if sh.Err != nil {
		return nil, -1, sh.Err
	}
	return sh.Resp, max(sh.Meta.NodeID, -1), nil
}

// wantedLocked reports whether a caller watches topic (WatchAll wants
// whatever topics exist, none in particular). r.mu must be held.
func (r *Refresher) wantedLocked(topic string) bool { return r.interest[topic] > 0 }

// requestLocked builds the Metadata request for the current interest, and
// for the cached topics no one watches that are not settled yet: one whose
// removal is under way (merge rule 8) is asked about until it is removed
// or answered again, and, when released is set (the periodic refresh, or
// the first round trip MaxAge after one last did), every one that has
// partitions cached. A topic released while it existed and deleted since
// would otherwise keep its partitions cached for good; so it is found gone
// within MaxAge and kept as a tombstone only.
func (r *Refresher) requestLocked(released bool) (*kmsg.MetadataRequest, bool) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	if r.all > 0 {
		req.Topics = nil // every topic
		return req, true
	}
	names := make([]string, 0, len(r.interest))
	for t := range r.interest {
		names = append(names, t)
	}
	for t, ts := range r.cur.Load().topics {
		if r.interest[t] == 0 && (ts.removing(r.cfg.confirmations) || (released && len(ts.Partitions) > 0)) {
			names = append(names, t)
		}
	}
	sort.Strings(names)
	req.Topics = make([]kmsg.MetadataRequestTopic, 0, len(names)) // empty, not nil: brokers only
	for _, name := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	return req, false
}

// invalidArgument is a call's error for a refused argument: it names the
// call and the argument and says what of its value is refused, and matches
// errors.ErrInvalidArgument.
func invalidArgument(call, arg, problem string) error {
	return fmt.Errorf("metadata: %s: argument %s: %s: %w", call, arg, problem, errors.ErrInvalidArgument)
}

// nilContext is the error of a call given a nil context, refused before it
// does anything (the nil would panic where the call first waits).
func nilContext(call string) error {
	return invalidArgument(call, "ctx", "nil (context.Background() waits without a bound)")
}
