package consumer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/seek"
)

// fetcher is the fetch loop of one broker: at most one Fetch in flight,
// naming every partition whose machine wants a fetch from this broker, with
// a KIP-227 session. It is started by the Consumer when a partition's
// fetches first go to the broker, and ends with the Consumer or as soon as
// no assigned partition routes to the broker (retire).
type fetcher struct {
	c       *Consumer
	id      int32
	wake    chan struct{} // capacity 1
	session *fetchSession
	byName  bool // the session names topics (some partition has no topic ID)
	// reserved is the buffer space reserved for the answer of the fetch
	// in flight (guarded by Consumer.mu).
	reserved int
	// it decodes the answers (used by the fetch loop alone).
	it batch.Iterator
	// ctx is the context of the fetch in flight (used by the fetch loop
	// alone); cancel ends it (guarded by Consumer.mu, nil when none is in
	// flight), canceled says it was ended because a partition it fetches
	// moved on (a seek, a new assignment).
	ctx      context.Context
	cancel   context.CancelFunc
	canceled bool
	// sentAt is when the fetch in flight was sent; admitting holds a
	// partition that became fetchable without being in it until that
	// fetch was in flight for admitGap, and cancels admitFor when it
	// ends (guarded by Consumer.mu; see admitLocked).
	sentAt    time.Time
	admitting *time.Timer
	admitFor  context.Context // the fetch admitting cancels
	// afterCancel is set while the request in flight is the one sent
	// again at once after a fetch this loop canceled itself (used by the
	// fetch loop alone): kgo closes the connection a canceled fetch was
	// on, and may fail the next request on it as the connection dies. A
	// connection error of that request is the cancel's, not the broker's
	// (see transportFailed).
	afterCancel bool
}

// cancelLocked ends the fetch in flight: one of its partitions no longer
// wants what it asked for, and the others are asked again at once rather
// than after the broker's FetchMaxWait.
func (f *fetcher) cancelLocked() {
	if f.cancel != nil && !f.canceled {
		f.canceled = true
		f.cancel()
	}
}

// fetchableLocked wakes the fetch loop of broker id for p, whose fetch
// waits to be sent there, and has its fetch in flight canceled and sent
// again with p (admitLocked).
func (c *Consumer) fetchableLocked(p *part, id int32) {
	f := c.fetcherLocked(id)
	f.wakeUp()
	f.admitLocked(p)
}

// admitLocked cancels the loop's fetch in flight, which p is not in, now
// that p waits to be sent: a fetch parked at the broker (its partitions
// have no data) would hold p up to FetchMaxWait, every time a partition
// becomes fetchable (assigned, resumed, validated, or its buffered answer
// handed out while an idle partition's fetch is parked). A cancel costs
// the connection (kgo closes a canceled request's) and the answer in
// flight, so only a fetch in flight for admitGap is canceled: one with
// data is answered well before, and is never thrown away for this; a
// younger one is canceled when it reaches admitGap, if still in flight
// (one sent since took p). However often partitions become fetchable,
// each fetch has admitGap to be answered, a broker's connection is closed
// for this at most once per admitGap, and a fetchable partition waits at
// most admitGap, not FetchMaxWait. With a FetchMaxWait of at most
// admitGap nothing is canceled: the parked fetch ends as soon.
func (f *fetcher) admitLocked(p *part) {
	c := f.c
	if f.cancel == nil || f.canceled || p.flying == f || p.fetch == nil || p.sent || p.paused || p.buf != nil || c.cfg.maxWait <= admitGap {
		return
	}
	if wait := time.Until(f.sentAt.Add(admitGap)); wait > 0 {
		// The fetch to cancel when it is admitGap old: this one (a
		// timer set for it already serves).
		f.admitFor = f.ctx
		if f.admitting == nil {
			f.admitting = time.AfterFunc(wait, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				f.admitting = nil
				if f.ctx != nil && f.ctx == f.admitFor && !f.canceled {
					f.cancelLocked()
				}
				f.admitFor = nil
			})
		}
		return
	}
	f.cancelLocked()
}

// admitGap is how long a fetch is in flight before it may be canceled for
// a partition that became fetchable (admitLocked).
const admitGap = 200 * time.Millisecond

// fetchByName is a Fetch that names its topics: kgo negotiates it at v12 at
// most (v13 replaced names with topic IDs).
type fetchByName struct{ *kmsg.FetchRequest }

func (fetchByName) MaxVersion() int16 { return 12 }

// Timeout makes kgo wait MaxWait longer for the answer, as it does for a
// plain *kmsg.FetchRequest.
func (r fetchByName) Timeout() int32 { return r.MaxWaitMillis }

// fetcherLocked returns the fetch loop of broker id, starting it if needed.
func (c *Consumer) fetcherLocked(id int32) *fetcher {
	f := c.fetchers[id]
	if f == nil {
		f = &fetcher{c: c, id: id, wake: make(chan struct{}, 1), session: newFetchSession(c.cfg.sessions)}
		c.fetchers[id] = f
		if !c.closed {
			c.loops.Add(1)
			c.goFn(func() {
				defer c.loops.Add(-1)
				f.loop()
			})
		}
	}
	return f
}

// closeSessions asks each broker a fetch loop had a session with to drop
// it: a request with the session's ID and the final epoch (KIP-227), what
// Java's and kgo's consumers send when they close. The broker's session
// cache is shared by all its clients, and a session left there takes a
// slot until it ages out, evicting other consumers' sessions when the
// cache is full. Close calls it once the fetch loops have stopped (they
// alone use their sessions); each request is bounded by ctx and by
// sessionCloseTimeout, and its outcome is left alone (a session not closed
// ages out).
func (c *Consumer) closeSessions(ctx context.Context) {
	c.mu.Lock()
	var reqs []func()
	for id, f := range c.fetchers {
		if sid := f.session.id; sid != 0 {
			reqs = append(reqs, func() { c.closeSession(ctx, id, sid) })
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(r)
	}
	wg.Wait()
}

// closeSession asks broker id to drop fetch session sid (the final epoch,
// -1), within ctx and sessionCloseTimeout; the outcome is left alone.
func (c *Consumer) closeSession(ctx context.Context, id, sid int32) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.SessionID = sid
	req.SessionEpoch = -1
	rctx, cancel := context.WithTimeout(ctx, sessionCloseTimeout)
	defer cancel()
	_, _ = c.cl.Broker(int(id)).Request(rctx, req)
}

// routedLocked returns the brokers the assigned partitions' fetches go to
// now (routeLocked): those whose fetch loops have work, or will have.
func (c *Consumer) routedLocked(now time.Time) map[int32]bool {
	routed := map[int32]bool{}
	for _, p := range c.parts {
		routed[c.routeLocked(p, now)] = true
	}
	return routed
}

// wakeIdleFetchersLocked wakes the fetch loops, not fetching now, of
// brokers no assigned partition routes to, so that they retire: called
// when partitions are unassigned or their leaders move, and on every
// tick. A loop with a fetch in flight checks when it is answered.
func (c *Consumer) wakeIdleFetchersLocked() {
	var routed map[int32]bool
	for id, f := range c.fetchers {
		if f.cancel != nil {
			continue
		}
		if routed == nil {
			routed = c.routedLocked(time.Now())
		}
		if !routed[id] {
			f.wakeUp()
		}
	}
}

// retire ends the fetch loop, with nothing in flight, if no assigned
// partition routes to its broker now: it leaves the consumer's loops (a
// partition routed to the broker again starts a new one, with a new
// session), so that the buffer is shared among the loops that fetch
// (build), and its fetch session is closed as Close closes them. Kept,
// a loop per broker ever led from stayed for the consumer's life, each
// shrinking every broker's share of MaxBufferedBytes.
func (f *fetcher) retire() bool {
	c := f.c
	c.mu.Lock()
	if c.closed || c.fetchers[f.id] != f || c.routedLocked(time.Now())[f.id] {
		c.mu.Unlock()
		return false
	}
	delete(c.fetchers, f.id)
	if c.bufferFull {
		// The others' shares grew.
		c.bufferFull = false
		c.wakeFetchersLocked()
	}
	sid := f.session.id
	c.mu.Unlock()
	if sid != 0 {
		c.closeSession(c.ctx, f.id, sid)
	}
	return true
}

// sessionCloseTimeout bounds Close's wait for a broker to drop its fetch
// session.
const sessionCloseTimeout = time.Second

func (f *fetcher) wakeUp() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// wakeFetchersLocked wakes every fetch loop (buffer space was freed).
func (c *Consumer) wakeFetchersLocked() {
	for _, f := range c.fetchers {
		f.wakeUp()
	}
}

// inflight is one partition of a Fetch being sent.
type inflight struct {
	p   *part
	req seek.RequestID
	// leader and epoch are the leader the machine named for the fetch
	// and its epoch: the fetch went to a replica when the fetch loop is
	// another broker's.
	leader, epoch int32
	// lastFetchedEpoch is the fetch's LastFetchedEpoch: a broker can have
	// checked it only if it was sent.
	lastFetchedEpoch int32
	// topicID is the topic ID the fetch named (zero: by name): a leader
	// hint in its answer is about that incarnation.
	topicID [16]byte
}

// checked reports whether the broker that answered the fetch in (broker
// from, at Fetch version, naming read replica named or none) checked its
// LastFetchedEpoch (seek.BatchFetched.Checked): it was sent, the version
// carries it (v12+), and the leader the fetch named answered itself and
// read the partition (a Kafka leader that names a preferred read replica
// reads nothing; a replica's own log is not the leader's).
func (in inflight) checked(from int32, version int16, named int32) bool {
	return in.lastFetchedEpoch >= 0 && version >= 12 && from == in.leader && named < 0
}

// routeLocked returns the broker p's fetches go to now: the replica its
// leader named while that choice stands (readReplica.stands), else the
// leader. A replica that no longer stands is dropped here, and a fetch
// that waits to be sent is handed to the leader's fetch loop.
func (c *Consumer) routeLocked(p *part, now time.Time) int32 {
	l := p.m.Leader()
	leader := l.ID
	if p.fetch != nil {
		leader = p.fetch.Leader
	}
	if p.replica.id < 0 {
		return leader
	}
	if p.fetch != nil && p.fetch.Validates {
		// The fetch is the position's validation: the leader's to
		// answer. Its answer decides the replica (afterReply).
		return leader
	}
	if p.replica.stands(l.ID, l.Epoch, now, c.replicaUsableLocked(p.tp, p.replica.id)) {
		return p.replica.id
	}
	p.replica = noReplica
	if p.fetch != nil && !p.sent && leader >= 0 {
		c.fetchableLocked(p, leader)
	}
	return leader
}

// replicaUsableLocked reports whether broker id may serve tp's fetches:
// the latest metadata lists the broker, and does not list it offline for
// tp (Java's nodeIfOnline).
func (c *Consumer) replicaUsableLocked(tp TopicPartition, id int32) bool {
	if v := c.meta.Version(); c.brokers == nil || v != c.brokersAt {
		c.brokersAt = v
		c.brokers = map[int32]bool{}
		for _, b := range c.meta.Brokers() {
			c.brokers[b.NodeID] = true
		}
	}
	if !c.brokers[id] {
		return false
	}
	mp, _ := c.meta.Lookup(tp.Topic, tp.Partition)
	return !slices.Contains(mp.OfflineReplicas, id)
}

// replyLocked applies an answer for in (a, whose from, leader and epoch it
// fills in) to the partition's read replica, and returns how the answer
// is stepped. A stale answer (the machine no longer awaits the fetch)
// changes nothing and is stepped as is: the machine ignores it.
func (f *fetcher) replyLocked(in inflight, a fetchReply) replicaStep {
	c, p := f.c, in.p
	if c.parts[p.tp] != p || !p.m.AwaitsFetch(in.req) {
		return stepAsIs
	}
	a.from, a.leader, a.epoch = f.id, in.leader, in.epoch
	if a.named >= 0 && a.from == a.leader {
		a.namedUsable = c.replicaUsableLocked(p.tp, a.named)
	}
	now := time.Now()
	var step replicaStep
	p.replica, step = afterReply(p.replica, a, now, c.cfg.metadataMaxAge)
	c.unusableLocked(p, a, step, now)
	return step
}

// unusableLocked applies an answer (a, stepped as step) to p's run of
// redirects to unusable replicas, and tells Poll, once, about a run that
// lasted MissingPartitionReport: an error in Fetches.Errors, without
// halting the partition, which is read as soon as the leader names a
// replica metadata knows, or none.
func (c *Consumer) unusableLocked(p *part, a fetchReply, step replicaStep, now time.Time) {
	var report bool
	if p.unusable, report = afterUnusable(p.unusable, a, step, now, c.cfg.missingAfter); !report {
		return
	}
	u := p.unusable
	pos, _ := p.m.Position()
	why := "which metadata does not list or lists offline"
	if u.failed != seek.CodeNone {
		why = "whose fetches fail (" + u.failed.String() + ")"
	}
	c.errs = append(c.errs, &errors.PartitionError{Op: "fetch", Topic: p.tp.Topic, Partition: p.tp.Partition,
		Offset: pos.Offset, LeaderEpoch: pos.Epoch,
		Err: fmt.Errorf("%w (leader %d has named broker %d, %s, as the read replica for %v; the partition is not read until the leader names a replica that answers, or none)",
			errors.ErrReplicaNotAvailable, u.leader, u.replica, why, now.Sub(u.since).Round(time.Millisecond))})
	c.signalLocked()
}

// leaderRun is a partition's run of requests sent to its leader (fetches,
// OffsetForLeaderEpoch, ListOffsets) that failed as a whole: no answer came
// (a connection refused, reset or closed, no answer in time).
type leaderRun struct {
	since    time.Time // the first failure of the run; zero: no run
	broker   int32     // the leader that failed
	last     error     // the run's latest failure
	reported bool      // the run was reported; it is not again
}

// afterLeaderRequest returns what a request (a fetch, OffsetForLeaderEpoch,
// ListOffsets) sent to broker, the partition's leader, leaves of the
// partition's run r, and whether the run is to be reported now: at the
// first failure at least bound after the run's first (bound 0: at the
// first), once per run. A failure (failed: no answer, its
// error) starts or extends the run of that broker (a failure of another
// broker starts a new one); any answer of the broker, whatever its error
// codes, ends it: the leader is reachable, and a later run is a new one,
// reported again.
func afterLeaderRequest(r leaderRun, broker int32, failed error, now time.Time, bound time.Duration) (leaderRun, bool) {
	if failed == nil {
		return leaderRun{}, false
	}
	if r.since.IsZero() || r.broker != broker {
		r = leaderRun{since: now, broker: broker}
	}
	r.last = failed
	if r.reported || now.Sub(r.since) < bound {
		return r, false
	}
	r.reported = true
	return r, true
}

// leaderFetchLocked applies the outcome of p's fetch in (failed: no
// answer, its error) to p's run of unanswered requests
// (leaderAnsweredLocked), if that fetch went to the leader and the machine
// still awaits it.
func (f *fetcher) leaderFetchLocked(in inflight, failed error, now time.Time) {
	c, p := f.c, in.p
	if f.id != in.leader || c.parts[p.tp] != p || !p.m.AwaitsFetch(in.req) {
		return // a replica's (see unusableLocked), or stale
	}
	c.leaderAnsweredLocked(p, "fetch", f.id, failed, now)
}

// leaderAnsweredLocked applies to p's run of requests its leader left
// unanswered (fetches, OffsetForLeaderEpoch, ListOffsets) the outcome of
// one sent to broker, its leader (failed: no answer, its error; op: what
// it was for, the report's Op), and tells Poll, once, about a run that
// lasted MissingPartitionReport: an error in Fetches.Errors, retriable,
// without halting the partition, whose requests are sent again as usual
// meanwhile.
func (c *Consumer) leaderAnsweredLocked(p *part, op string, broker int32, failed error, now time.Time) {
	var report bool
	if p.unreachable, report = afterLeaderRequest(p.unreachable, broker, failed, now, c.cfg.missingAfter); !report {
		return
	}
	r := p.unreachable
	pos, _ := p.m.Position()
	c.errs = append(c.errs, &errors.PartitionError{Op: op, Topic: p.tp.Topic, Partition: p.tp.Partition,
		Offset: pos.Offset, LeaderEpoch: pos.Epoch,
		Err: fmt.Errorf("%w (leader %d has answered no request for %v, last: %v; the partition's requests are sent again until it answers or metadata names another leader)",
			errors.ErrLeaderUnreachable, r.broker, now.Sub(r.since).Round(time.Millisecond), r.last)})
	c.signalLocked()
}

func (f *fetcher) loop() {
	c := f.c
	defer func() {
		c.mu.Lock()
		if f.admitting != nil {
			f.admitting.Stop()
			f.admitting, f.admitFor = nil, nil
		}
		c.mu.Unlock()
	}()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-f.wake:
		}
		for {
			req, parts, pl, want := f.build()
			if req == nil {
				break
			}
			f.send(req, parts, pl, want)
			if c.ctx.Err() != nil {
				return
			}
		}
		if f.retire() {
			return
		}
	}
}

// build collects the partitions that want a fetch from this broker and
// makes the request. It returns a nil request when there is nothing to
// fetch or the buffer is full.
func (f *fetcher) build() (*kmsg.FetchRequest, map[TopicPartition]inflight, plan, map[TopicPartition]fetchParams) {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, plan{}, nil
	}
	// The answers buffered plus what the fetches in flight may bring
	// (their MaxBytes, reserved) stay within MaxBufferedBytes: each
	// broker's fetch asks for at most its share of the buffer, or what is
	// left of it, and waits (for Poll, or an answer) when that is too
	// little. A broker may still answer one batch larger than MaxBytes.
	share := c.shareLocked()
	room := func() int {
		return min(int(c.cfg.maxBytes), share, c.cfg.maxBuffered-c.buffered-c.reserved)
	}
	maxBytes, enough := room(), min(share, int(c.cfg.partMaxBytes))
	if maxBytes < enough && c.dropPausedLocked() {
		// Answers held for paused partitions must not keep the others
		// from being fetched: they are fetched again on Resume.
		maxBytes = room()
	}
	if maxBytes < enough {
		c.bufferFull = true
		return nil, nil, plan{}, nil
	}
	want := map[TopicPartition]fetchParams{}
	parts := map[TopicPartition]inflight{}
	now := time.Now()
	for tp, p := range c.parts {
		if p.fetch == nil || p.sent || p.paused || p.buf != nil || c.routeLocked(p, now) != f.id {
			continue
		}
		p.sent = true
		p.flying = f
		parts[tp] = inflight{p: p, req: p.fetch.Req, leader: p.fetch.Leader, epoch: p.fetch.CurrentLeaderEpoch,
			lastFetchedEpoch: p.fetch.LastFetchedEpoch, topicID: p.topicID}
		want[tp] = fetchParams{
			topicID: p.topicID, offset: p.fetch.Offset, currentLeaderEpoch: p.fetch.CurrentLeaderEpoch,
			lastFetchedEpoch: p.fetch.LastFetchedEpoch, maxBytes: c.cfg.partMaxBytes,
		}
	}
	if len(parts) == 0 {
		// Nothing wanted now. The session keeps its partitions: the next
		// request forgets those still unwanted then. (Resetting here would
		// open a new broker session on every request of a broker whose
		// partitions are all buffered, leaking the old ones.)
		return nil, nil, plan{}, nil
	}
	// A partition without a topic ID (a broker before Kafka 2.8 has none)
	// is fetched by name, in a request capped at v12; a session is used
	// either with topic IDs or without them, never both.
	byName := false
	for _, w := range want {
		byName = byName || w.topicID == ([16]byte{})
	}
	if byName != f.byName {
		f.session.reset()
		f.byName = byName
	}
	f.reserved = maxBytes
	c.reserved += maxBytes
	f.ctx, f.cancel = context.WithTimeout(c.ctx, c.cfg.requestTimeout+c.cfg.maxWait)
	f.canceled = false
	f.sentAt = time.Now()
	pl := f.session.plan(want)
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(c.cfg.maxWait / time.Millisecond)
	req.MinBytes = c.cfg.minBytes
	req.MaxBytes = int32(maxBytes)
	if c.cfg.readCommitted {
		req.IsolationLevel = 1
	}
	if c.cfg.rack != nil {
		req.Rack = *c.cfg.rack // KIP-392 (v11+; left out below)
	}
	req.SessionID = pl.sessionID
	req.SessionEpoch = pl.sessionEpoch
	byTopic := map[string]int{}
	for _, tp := range pl.send {
		w := want[tp]
		i := topicSlot(byTopic, &req.Topics, tp.Topic, func() kmsg.FetchRequestTopic {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = tp.Topic, w.topicID
			return t
		})
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = tp.Partition
		rp.FetchOffset = w.offset
		rp.CurrentLeaderEpoch = w.currentLeaderEpoch
		rp.LastFetchedEpoch = w.lastFetchedEpoch
		rp.PartitionMaxBytes = w.maxBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	forgot := map[string]int{}
	forget := pl.forget
	if !f.byName {
		// Sessions keyed by topic ID (v13+): the entry under a
		// recreated topic's old ID goes too. By name, the entry is
		// the one being replaced, and forgetting it would drop it.
		forget = append(forget[:len(forget):len(forget)], pl.replaced...)
	}
	for _, tp := range forget {
		prev := f.session.sent[tp]
		// By name and ID: a recreated topic's partitions may be
		// forgotten under either of its IDs.
		i := topicSlot(forgot, &req.ForgottenTopics, tp.Topic+"\x00"+string(prev.topicID[:]), func() kmsg.FetchRequestForgottenTopic {
			ft := kmsg.NewFetchRequestForgottenTopic()
			ft.Topic, ft.TopicID = tp.Topic, prev.topicID
			return ft
		})
		req.ForgottenTopics[i].Partitions = append(req.ForgottenTopics[i].Partitions, tp.Partition)
	}
	return req, parts, pl, want
}

// shareLocked returns each fetch loop's share of MaxBufferedBytes: the
// bound split among the loops there are now (retired ones leave theirs to
// the others).
func (c *Consumer) shareLocked() int {
	return c.cfg.maxBuffered / max(1, len(c.fetchers))
}

// dropPausedLocked drops the answers buffered for paused partitions (none
// of their records delivered yet, or the rest of a part-delivered one): the
// fetch is over for their machines, which fetch again from the position
// when resumed. It reports whether it freed any buffer space.
func (c *Consumer) dropPausedLocked() bool {
	freed := false
	for _, p := range c.parts {
		if !p.paused || p.buf == nil {
			continue
		}
		req, checked := p.buf.req, p.buf.checked
		c.dropBufferLocked(p)
		c.stepLocked(p, seek.FetchCompleted{Req: req, Checked: checked})
		freed = true
	}
	return freed
}

// send issues the request and steps its answer into the partitions.
func (f *fetcher) send(req *kmsg.FetchRequest, parts map[TopicPartition]inflight, pl plan, want map[TopicPartition]fetchParams) {
	c := f.c
	ctx := f.ctx
	var resp *kmsg.FetchResponse
	var kreq kmsg.Request = req
	if f.byName {
		kreq = fetchByName{req}
	}
	transport := c.cl.Broker(int(f.id)).Request
	var kr kmsg.Response
	var err error
	if c.sendFetch != nil {
		kr, err = c.sendFetch(ctx, f.id, kreq, transport)
	} else {
		kr, err = transport(ctx, kreq)
	}
	if err == nil {
		resp = kr.(*kmsg.FetchResponse)
	}
	afterCancel := f.afterCancel
	f.afterCancel = false

	// Decode the answer's records here, without the lock: Poll then only
	// steps them into the machines, and the brokers' answers are decoded
	// in parallel, while the application works.
	names := map[[16]byte]string{}
	for tp, w := range want {
		names[w.topicID] = tp.Topic
	}
	var decs map[TopicPartition]*decoded
	if err == nil && resp.ErrorCode == 0 {
		// A partition the answer lists again: its first entry is the one
		// answered below, and only its records go with it.
		listed := map[TopicPartition]bool{}
		for i := range resp.Topics {
			t := &resp.Topics[i]
			name := t.Topic
			if name == "" {
				name = names[t.TopicID]
			}
			for j := range t.Partitions {
				rp := &t.Partitions[j]
				tp := TopicPartition{name, rp.Partition}
				again := listed[tp]
				listed[tp] = true
				if _, ok := parts[tp]; !ok || again || rp.ErrorCode != 0 || rp.DivergingEpoch.Epoch >= 0 || len(rp.RecordBatches) == 0 {
					continue
				}
				if decs == nil {
					decs = map[TopicPartition]*decoded{}
				}
				decs[tp] = c.decode(&f.it, tp, rp, want[tp].offset)
			}
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		// The version this broker answers Fetch at (ValidateInBand).
		c.fetchVersions[f.id] = resp.Version
	}
	f.cancel()
	canceled := f.canceled
	f.cancel, f.canceled, f.ctx = nil, false, nil
	for _, in := range parts {
		if in.p.flying == f {
			in.p.flying = nil
		}
	}
	c.reserved -= f.reserved
	f.reserved = 0
	if c.bufferFull {
		c.bufferFull = false
		c.wakeFetchersLocked()
	}
	now := time.Now()
	if err == nil {
		// The broker answered: it is reachable, whatever the answer
		// says.
		for _, in := range parts {
			f.leaderFetchLocked(in, nil, now)
		}
		// errors.FromCode keeps a code this client does not know
		// (kerr would make it UNKNOWN_SERVER_ERROR, which is retried).
		err = errors.FromCode(resp.ErrorCode)
	}
	if err != nil {
		if err == kerr.FetchSessionIDNotFound {
			f.session.lost()
		} else {
			f.session.reset() // the next request closes it
		}
		code := seek.CodeNetworkException
		switch {
		case canceled && c.ctx.Err() == nil,
			afterCancel && transportFailed(err) && c.ctx.Err() == nil,
			err == kerr.FetchSessionIDNotFound, err == kerr.InvalidFetchSessionEpoch, err == kerr.FetchSessionTopicIDError:
			// Canceled because a partition moved on (whether the broker
			// took the request is unknown), the connection that cancel
			// closed failed the request sent after it (once per cancel:
			// a second failure is the broker's or the network's, and
			// backs off), or the session is gone: ask again, at once,
			// with a full request (from where each partition is read
			// now).
			f.afterCancel = canceled
			for _, in := range parts {
				if in.p.fetch == nil || in.p.fetch.Req != in.req {
					continue // a newer fetch replaced it (sent by itself)
				}
				if c.parts[in.p.tp] != in.p || !in.p.m.AwaitsFetch(in.req) {
					// The machine moved on (to validating its
					// position, say): the fetch is over, not to be
					// sent again.
					in.p.fetch = nil
					continue
				}
				in.p.sent = false
				if to := c.routeLocked(in.p, now); to != f.id {
					c.fetchableLocked(in.p, to)
				}
			}
			f.wakeUp()
			return
		}
		if kc, ok := errors.CodeOf(err); ok {
			code = seek.Code(kc) // one this client does not know included
		} else if c.ctx.Err() == nil && !canceled {
			// No answer: a refused or broken connection, or none in
			// time (the request's own deadline).
			for _, in := range parts {
				f.leaderFetchLocked(in, err, now)
			}
		}
		for _, in := range parts {
			f.settleLocked(in, fetchReply{code: code, named: seek.NoBroker}, nil)
		}
		return
	}
	f.session.answered(pl, want, resp.SessionID)
	for i := range resp.Topics {
		t := &resp.Topics[i]
		name := t.Topic
		if name == "" {
			name = names[t.TopicID]
		}
		for j := range t.Partitions {
			rp := &t.Partitions[j]
			tp := TopicPartition{name, rp.Partition}
			in, ok := parts[tp]
			if !ok {
				continue // a session partition we no longer ask for
			}
			delete(parts, tp)
			f.answerLocked(in, rp, resp.Version, decs[tp])
		}
	}
	// Partitions the answer left out (an incremental session omits those
	// with nothing new): the fetch is over for them. The broker read them
	// (with the parameters they were last named with, which are the
	// fetch's: changed ones are named), and a Kafka leader leaves out
	// no partition for which it named a read replica or found a
	// DivergingEpoch.
	for _, in := range parts {
		if !in.p.unusable.since.IsZero() && c.parts[in.p.tp] == in.p && in.p.m.AwaitsFetch(in.req) {
			// Read, nothing new: it ends a run of redirects.
			c.unusableLocked(in.p, fetchReply{from: f.id, leader: in.leader, epoch: in.epoch, named: seek.NoBroker}, stepAsIs, time.Now())
		}
		if in.p.fetch != nil && in.p.fetch.Req == in.req {
			in.p.fetch = nil
		}
		c.stepLocked(in.p, seek.FetchCompleted{Req: in.req, Checked: in.checked(f.id, resp.Version, seek.NoBroker)})
	}
}

// answerLocked handles one partition of a Fetch answer of the given
// version.
func (f *fetcher) answerLocked(in inflight, rp *kmsg.FetchResponseTopicPartition, version int16, d *decoded) {
	c := f.c
	p := in.p
	if c.parts[p.tp] != p {
		return // unassigned meanwhile
	}
	a := fetchReply{code: seek.Code(rp.ErrorCode), diverging: rp.DivergingEpoch.Epoch >= 0,
		records: len(rp.RecordBatches) > 0, named: seek.NoBroker}
	if version >= 11 {
		a.named = rp.PreferredReadReplica
	}
	if rp.ErrorCode != 0 {
		var hint *seek.Leader
		if rp.CurrentLeader.LeaderID >= 0 && rp.CurrentLeader.LeaderEpoch >= 0 {
			hint = &seek.Leader{ID: rp.CurrentLeader.LeaderID, Epoch: rp.CurrentLeader.LeaderEpoch}
		}
		f.settleLocked(in, a, hint)
		return
	}
	step := f.replyLocked(in, a) // stepRefetch comes only with an error
	if p.fetch != nil && p.fetch.Req == in.req {
		p.fetch = nil
	}
	if step == stepUnusable {
		c.stepLocked(p, seek.FetchFailed{Req: in.req, Code: seek.CodeReplicaNotAvailable})
		return
	}
	if rp.DivergingEpoch.Epoch >= 0 {
		c.stepLocked(p, seek.DivergingEpoch{Req: in.req, End: seek.EpochEnd{Epoch: rp.DivergingEpoch.Epoch, EndOffset: rp.DivergingEpoch.EndOffset}})
		return
	}
	checked := in.checked(f.id, version, a.named)
	if len(rp.RecordBatches) == 0 {
		c.stepLocked(p, seek.FetchCompleted{Req: in.req, Checked: checked})
		return
	}
	if !p.m.AwaitsFetch(in.req) {
		// Stale (the partition moved on while it was in flight): its
		// batches would be ignored, and it must not replace an answer
		// the machine waits for.
		return
	}
	c.dropBufferLocked(p)
	p.buf = &fetched{req: in.req, from: f.id, size: len(rp.RecordBatches), d: d, checked: checked}
	c.buffered += p.buf.size
	c.peakBuffered = max(c.peakBuffered, c.buffered)
	c.ready = append(c.ready, p)
	c.signalLocked()
}

// transportFailed reports whether err, a Fetch's error, says the request
// failed as a whole on its connection: not a Kafka error code, not the
// request's context ending (its deadline, or a cancel), not the client
// closing. kgo's "chosen broker is dead" (a request written to a
// connection as it closes) is one; so are a reset or an EOF.
func transportFailed(err error) bool {
	var ke *kerr.Error
	return err != nil && !errors.As(err, &ke) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kgo.ErrClientClosed)
}

// settleLocked steps a failed fetch for in: a (with its error code)
// applied to the read replica first. A replica's OFFSET_OUT_OF_RANGE ends
// the fetch with nothing fetched; any other failure is the machine's.
func (f *fetcher) settleLocked(in inflight, a fetchReply, hint *seek.Leader) {
	p := in.p
	if f.c.parts[p.tp] != p {
		return
	}
	step := f.replyLocked(in, a)
	if p.fetch != nil && p.fetch.Req == in.req {
		p.fetch = nil
	}
	if hint != nil {
		f.c.meta.ApplyHint(p.tp.Topic, in.topicID, p.tp.Partition, hint.ID, hint.Epoch)
	}
	if step == stepRefetch {
		f.c.stepLocked(p, seek.FetchCompleted{Req: in.req})
		return
	}
	ev := seek.FetchFailed{Req: in.req, Code: a.code, Hint: hint}
	if hint != nil {
		ev.HintInBand = f.c.inBandLocked(hint.ID)
	}
	f.c.stepLocked(p, ev)
}
