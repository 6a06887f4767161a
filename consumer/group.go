package consumer

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/seek"
)

// Group membership. With Group(id) and Subscribe, the consumer joins the
// group and consumes what the group assigns it; its loop (one goroutine,
// started by Subscribe, stopped by Close) speaks the classic or the KIP-848
// protocol and changes the consumer's partitions incrementally: a partition
// kept across a rebalance keeps its position, its buffered records and its
// fetch session.
//
// The session boundary. Every change of membership holds the poll gate for
// writing, while Poll holds it for reading from the moment it collects
// records until it returns them. A revocation therefore (1) waits until no
// Poll is between collecting and returning, (2) commits, (3) calls
// OnRevoked, (4) drops the partitions with their buffered records, all
// before any Poll can collect again: no record of a revoked partition is
// returned after its revoke callback. An assignment adds the partitions and
// calls OnAssigned under the gate too, so no record of them is returned
// before OnAssigned has run (and possibly seeked). Fetch answers for a
// dropped partition are ignored by identity (a partition assigned again is
// a new object with new request ids). A revocation under way when Close
// begins completes, its commit included (bounded by the rebalance timeout
// and by Close's ctx): Close stops the member loop, not what it is doing.
//
// At-least-once window. Autocommit, and the commit made when partitions are
// revoked, store the positions as they were when the most recent Poll
// began: what the application had been given before its latest Poll call
// (recorded as Poll is called, before it waits for the gate: a revocation
// waiting to commit stores what the application processed meanwhile).
// Records returned by that latest Poll are not committed until the next
// Poll (or CommitSync, or Close), so an application that processes records
// between Polls never has a record committed before it was processed. A
// consumer that crashes, or loses its partitions, re-delivers to the next
// owner at most the records returned since the last successful commit.

// ErrNoGroup is returned by group operations of a consumer without Group.
var ErrNoGroup = errors.New("kepoch: consumer has no group (use the Group option)")

// GroupError is a failure of the group protocol: Op is the request
// ("join", "sync", "heartbeat", "leave", "offset fetch", "assign") and Err
// its cause (a *kerr.Error for broker error codes, a *GroupDataError for
// undecodable protocol data). Poll returns them in Fetches.Errors.
type GroupError struct {
	Group string
	Op    string
	Err   error
}

func (e *GroupError) Error() string {
	return fmt.Sprintf("kepoch: group %q: %s: %v", e.Group, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *GroupError) Unwrap() error { return e.Err }

// group is a consumer's group membership and commit state.
type group struct {
	c   *Consumer
	cfg *groupCfg

	// ctx ends when Close begins: it stops the member loop. Callbacks and
	// the commits of revocations get life() instead.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// gate is held for reading by Poll from collecting to returning, and
	// for writing by every membership change (see the package comment on
	// the session boundary).
	gate sync.RWMutex

	mu         sync.Mutex // guards the fields below
	topics     []string   // explicit subscription, sorted
	regex      *regexp.Regexp
	regexExpr  string // the regex as given (sent to a KIP-848 coordinator)
	idOf       map[string][16]byte
	nameOf     map[[16]byte]string
	subscribed bool
	loopDone   chan struct{} // closed when the member loop ends; nil before Subscribe
	memberID   string
	generation int32 // classic generation or KIP-848 member epoch; -1 when none
	owned      tpSet
	// ownedAt names each owned partition's assignment (ownSeq when it
	// was added): a commit made while the member owned a partition is
	// sent only within that same assignment.
	ownedAt   map[TopicPartition]uint64
	ownSeq    uint64
	assigning tpSet         // partitions assignParts is adding (reading their offsets)
	rejoin    chan struct{} // capacity 1: the subscription changed
	closed    bool
	closeErrs []error // commits of revocations that failed while Close waited
	unwatch   func()  // the topics the member loop watches
	watched   []string
	// contact is when the latest classic request the coordinator answered
	// was sent: it knew the member alive then.
	contact time.Time
	// MaxPollInterval (group_poll.go): the Polls running, the Polls ever
	// begun, when one last began or returned; polled is signalled
	// (capacity 1) as one begins.
	polling  int
	pollSeq  uint64
	lastPoll time.Time
	polled   chan struct{}

	commits commitQueue
	// beforeSend, when set (tests), runs on the commit goroutine once a
	// commit passed its checks, before it is sent.
	beforeSend func()

	// Guarded by Consumer.mu:
	committable map[TopicPartition]Position          // positions when the latest Poll began
	committed   map[TopicPartition]OffsetAndMetadata // latest known committed, per partition
	autoBusy    bool                                 // an autocommit is queued or in flight
}

func newGroup(c *Consumer) *group {
	g := &group{
		c:           c,
		cfg:         &c.cfg.group,
		generation:  -1,
		owned:       tpSet{},
		ownedAt:     map[TopicPartition]uint64{},
		assigning:   tpSet{},
		rejoin:      make(chan struct{}, 1),
		polled:      make(chan struct{}, 1),
		lastPoll:    time.Now(),
		idOf:        map[string][16]byte{},
		nameOf:      map[[16]byte]string{},
		committable: map[TopicPartition]Position{},
		committed:   map[TopicPartition]OffsetAndMetadata{},
	}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	g.commits.wake = make(chan struct{}, 1)
	c.goFn(g.commitLoop)
	if g.cfg.autoCommit {
		c.goFn(g.autoCommitLoop)
	}
	return g
}

// Subscribe makes the consumer consume topics as a member of its group
// (the Group option): the group assigns it partitions, which start at the
// group's committed positions (validated against the leader with their
// leader epochs before anything is fetched) or at NoCommitStart. Calling it
// again replaces the subscription and rejoins. Assign cannot be used on a
// subscribed consumer, nor Subscribe on one with partitions assigned by hand
// (ErrAssignmentMode). No topics, or an empty one, is refused with an error
// matching errors.ErrInvalidArgument (SubscribeRegex: an expr that does not
// compile).
func (c *Consumer) Subscribe(topics ...string) error {
	if len(topics) == 0 {
		return invalidArgument("Subscribe", "topics", "none given")
	}
	ts := slices.Clone(topics)
	sort.Strings(ts)
	ts = slices.Compact(ts)
	for _, t := range ts {
		switch {
		case t == "":
			return invalidArgument("Subscribe", "topics", `"" is empty`)
		case !validGroupString(t):
			return invalidArgument("Subscribe", "topics", fmt.Sprintf("a name of %d bytes is longer than %d", len(t), math.MaxInt16))
		}
	}
	return c.subscribe(ts, nil, "")
}

// SubscribeRegex subscribes to every topic whose whole name matches expr (Go
// RE2 syntax), as found in cluster metadata every MetadataMaxAge; internal
// topics are never matched. See Subscribe.
func (c *Consumer) SubscribeRegex(expr string) error {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return fmt.Errorf("consumer: SubscribeRegex: argument expr: %q does not compile: %w: %w", expr, err, errors.ErrInvalidArgument)
	}
	return c.subscribe(nil, re, expr)
}

func (c *Consumer) subscribe(topics []string, re *regexp.Regexp, expr string) error {
	g := c.grp
	if g == nil {
		return ErrNoGroup
	}
	c.mu.Lock()
	closed, manual := c.closed, len(c.parts) > 0
	c.mu.Unlock()
	if closed {
		return errors.ErrClosed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.ErrClosed
	}
	if g.ctx.Err() != nil {
		return fmt.Errorf("consumer: the group membership ended: %w", context.Cause(g.ctx))
	}
	if manual && !g.subscribed {
		return fmt.Errorf("consumer: Subscribe after Assign: %w", ErrAssignmentMode)
	}
	g.topics, g.regex, g.regexExpr = topics, re, expr
	if g.subscribed {
		select {
		case g.rejoin <- struct{}{}:
		default:
		}
		return nil
	}
	g.subscribed = true
	if g.polling == 0 {
		g.lastPoll = time.Now() // MaxPollInterval counts from Subscribe
	}
	g.loopDone = make(chan struct{})
	done := g.loopDone
	c.goFn(func() {
		defer close(done)
		if g.cfg.protocol == ProtocolConsumer {
			g.runConsumer()
		} else {
			g.runClassic()
		}
	})
	return nil
}

// isSubscribed reports whether Subscribe was called.
func (g *group) isSubscribed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.subscribed
}

// GroupMetadata identifies a group member, as a transactional producer's
// TxnOffsetCommit needs it (consume-transform-produce).
type GroupMetadata struct {
	Group string
	// MemberID is "" and Generation -1 when the consumer is not a member
	// (not subscribed, between memberships, or standalone commits).
	MemberID string
	// Generation is the classic generation, or the KIP-848 member epoch.
	Generation int32
	// InstanceID is the static member id, nil for a dynamic member.
	InstanceID *string
}

// GroupMetadata returns the consumer's group membership; the zero Group
// when it has no group.
func (c *Consumer) GroupMetadata() GroupMetadata {
	g := c.grp
	if g == nil {
		return GroupMetadata{Generation: -1}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupMetadata{Group: g.cfg.id, MemberID: g.memberID, Generation: g.generation, InstanceID: g.cfg.instanceID}
}

// enterPoll takes the poll gate for reading; the returned function
// releases it.
func (c *Consumer) enterPoll() func() {
	g := c.grp
	if g == nil {
		return func() {}
	}
	g.gate.RLock()
	return g.gate.RUnlock
}

// pollStartedLocked records the committable positions: those of every
// fetching partition as a Poll begins.
func (g *group) pollStartedLocked() {
	for tp, p := range g.c.parts {
		if p.m.State() != seek.StateFetching {
			continue
		}
		if pos, ok := p.m.Position(); ok {
			g.committable[tp] = pos
		}
	}
}

// forgetCommittableLocked drops tp's committable position after a break
// of its lineage: it is an offset of the lineage that broke (of the topic
// deleted, or past the divergence), and stored it would make the next
// owner skip the new lineage's records below it (a recreated topic
// validates it as valid) or report the break again.
func (g *group) forgetCommittableLocked(tp TopicPartition) {
	delete(g.committable, tp)
}

// surface hands err to the application through Poll.
func (g *group) surface(op string, err error) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, &GroupError{Group: g.cfg.id, Op: op, Err: err})
	c.signalLocked()
}

// ownedSet returns a copy of the partitions the member owns.
func (g *group) ownedSet() tpSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(tpSet, len(g.owned))
	for tp := range g.owned {
		out.add(tp)
	}
	return out
}

// assignParts starts partitions the group assigned: their committed
// positions are read first (with their leader epochs, so that they are
// validated before fetching), then they are added and OnAssigned runs,
// under the gate. It returns ctx's error if the positions could not be read
// before ctx ended; nothing is added then.
func (g *group) assignParts(ctx context.Context, tps tpSet) error {
	if len(tps) == 0 {
		return nil
	}
	list := tps.sorted()
	// Until they are added, a KIP-848 heartbeat reports them as owned too:
	// reported released, the coordinator would give them to another
	// member before this one adds them.
	g.mu.Lock()
	for _, tp := range list {
		g.assigning.add(tp)
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		for _, tp := range list {
			delete(g.assigning, tp)
		}
		g.mu.Unlock()
	}()
	committed, err := g.fetchCommittedRetry(ctx, list)
	if err != nil {
		return err
	}
	g.gate.Lock()
	defer g.gate.Unlock()
	c := g.c
	c.mu.Lock()
	starts := make(map[TopicPartition]Start, len(list))
	for _, tp := range list {
		om, ok := committed[tp]
		if ok && om.Offset >= 0 {
			starts[tp] = AtEpoch(om.Offset, om.LeaderEpoch)
			g.committed[tp] = om
		} else {
			starts[tp] = g.cfg.noCommitStart
			delete(g.committed, tp)
		}
		delete(g.committable, tp)
	}
	err = c.addPartsLocked(starts)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.ownSeq++
	for _, tp := range list {
		g.owned.add(tp)
		g.ownedAt[tp] = g.ownSeq
	}
	g.mu.Unlock()
	if fn := g.cfg.onAssigned; fn != nil {
		fn(g.life(), list) // not ctx: a classic session's ends at the next rebalance
	}
	return nil
}

// life is the context callbacks get, and the parent of a revocation's
// commit: the consumer's, which ends once Close is done or gave up waiting
// (its own ctx ended). Not g.ctx, which ends as soon as Close begins: a
// revocation under way then would drop its commit, and the next owner
// would read again what this member processed.
func (g *group) life() context.Context { return g.c.ctx }

// revokeParts gives up partitions: under the gate, their buffered records
// are dropped, autocommit commits their committable positions (when commit
// is set), OnRevoked (or OnLost when lost) runs, and they are removed.
func (g *group) revokeParts(ctx context.Context, tps tpSet, commit, lost bool) {
	if len(tps) == 0 {
		return
	}
	list := tps.sorted()
	g.gate.Lock()
	defer g.gate.Unlock()
	c := g.c
	c.mu.Lock()
	for _, tp := range list {
		if p := c.parts[tp]; p != nil {
			c.dropBufferLocked(p)
		}
	}
	c.mu.Unlock()
	if commit && g.cfg.autoCommit {
		// Made when sent, after the commits queued ahead of it.
		cctx, cancel := context.WithTimeout(ctx, g.cfg.rebalanceTimeout)
		if err := g.commitWaitFor(cctx, func() map[TopicPartition]OffsetAndMetadata { return g.autoOffsetsLocked(list) }); err != nil {
			// While Close waits, nobody polls to be told: Close returns it.
			g.mu.Lock()
			closing := g.closed
			if closing {
				g.closeErrs = append(g.closeErrs, err)
			}
			g.mu.Unlock()
			if !closing && !quietCommitErr(err) {
				g.surface("autocommit", err)
			}
		}
		cancel()
	}
	fn := g.cfg.onRevoked
	if lost {
		fn = g.cfg.onLost
	}
	if fn != nil {
		fn(ctx, list)
	}
	if !lost {
		// The commits queued until now (the application's, made while
		// it owned the partitions, OnRevoked's included) are answered
		// before the partitions are released: sent later, a commit made
		// with an older member epoch is accepted by a KIP-1251
		// coordinator over the next owner's. One still unsent after
		// this wait is refused when it is reached (ErrCommitNotOwned):
		// the commit goroutine ends the partitions' assignment for
		// commits as it reaches the wait, so whatever is queued behind
		// it is judged against that, whatever the order in which this
		// goroutine and the commit goroutine go on.
		release := func() {
			g.mu.Lock()
			for _, tp := range list {
				delete(g.ownedAt, tp)
			}
			g.mu.Unlock()
		}
		bctx, cancel := context.WithTimeout(ctx, g.cfg.rebalanceTimeout)
		_ = g.commitWaitFor(bctx, func() map[TopicPartition]OffsetAndMetadata { release(); return nil })
		cancel()
		release()
	}
	c.mu.Lock()
	c.removePartsLocked(list)
	for _, tp := range list {
		delete(g.committable, tp)
		delete(g.committed, tp)
	}
	c.mu.Unlock()
	g.mu.Lock()
	for _, tp := range list {
		delete(g.owned, tp)
		delete(g.ownedAt, tp)
	}
	g.mu.Unlock()
}

// addPartsLocked starts the given partitions at their starts; partitions
// already assigned restart there, the others are untouched (unlike Assign,
// which replaces the whole set).
func (c *Consumer) addPartsLocked(starts map[TopicPartition]Start) error {
	if c.closed {
		return errors.ErrClosed
	}
	for tp, start := range starts {
		if _, ok := c.watching[tp.Topic]; !ok {
			c.watching[tp.Topic] = c.meta.Watch(tp.Topic)
		}
		if err := c.startPartLocked(tp, start); err != nil {
			return err
		}
	}
	c.meta.Trigger(metadata.ReasonWatch)
	c.signalLocked()
	return nil
}

// removePartsLocked drops partitions with their buffered records, leaving
// the others untouched.
func (c *Consumer) removePartsLocked(tps []TopicPartition) {
	for _, tp := range tps {
		p := c.parts[tp]
		if p == nil {
			continue
		}
		p.revoke()
		c.dropBufferLocked(p)
		delete(c.parts, tp)
	}
	c.wakeIdleFetchersLocked()
	still := map[string]bool{}
	for tp := range c.parts {
		still[tp.Topic] = true
	}
	for _, tp := range tps {
		if unwatch, ok := c.watching[tp.Topic]; ok && !still[tp.Topic] {
			unwatch()
			delete(c.watching, tp.Topic)
		}
	}
}

// watch makes the refresher keep topics fresh (the subscription, and for a
// leader every member's), replacing what the member watched before.
func (g *group) watch(topics []string) {
	ts := slices.Clone(topics)
	sort.Strings(ts)
	ts = slices.Compact(ts)
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Equal(ts, g.watched) {
		return
	}
	old := g.unwatch
	g.unwatch, g.watched = g.c.meta.Watch(ts...), ts
	if old != nil {
		old()
	}
}

// partitionCounts returns the partition count of each topic the refresher
// knows; it refreshes once (bounded by a few seconds) if some are unknown.
// Unknown topics are left out.
func (g *group) partitionCounts(ctx context.Context, topics []string) map[string]int32 {
	out := map[string]int32{}
	missing := false
	for _, t := range topics {
		if tm, err := g.c.meta.Topic(t); err == nil && len(tm.Partitions) > 0 {
			out[t] = int32(len(tm.Partitions))
		} else {
			missing = true
		}
	}
	if !missing {
		return out
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = g.c.meta.Refresh(rctx, metadata.ReasonWatch)
	cancel()
	for _, t := range topics {
		if tm, err := g.c.meta.Topic(t); err == nil && len(tm.Partitions) > 0 {
			out[t] = int32(len(tm.Partitions))
		}
	}
	return out
}

// close ends the membership for Close: the member loop stops, autocommit
// commits every position Poll returned, OnRevoked runs for what the member
// owns, and a dynamic member leaves the group. It returns the failures of
// the commits made meanwhile (a revocation's under way, its own), or ctx's
// error if ctx ended before it could commit: the records since the last
// commit will be delivered again, and nobody polls any more to be told.
func (g *group) close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	done := g.loopDone
	g.mu.Unlock()
	g.cancel(errors.ErrClosed)
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("consumer: Close: ctx ended before the group's final commit: %w", ctx.Err())
		}
	}
	g.mu.Lock()
	var errs []error
	for _, err := range g.closeErrs {
		errs = append(errs, fmt.Errorf("consumer: Close: commit of revoked partitions: %w", err))
	}
	g.mu.Unlock()
	if g.cfg.autoCommit {
		g.c.mu.Lock()
		offs := g.consumedOffsetsLocked()
		ids := g.incarnationsLocked(offs)
		g.c.mu.Unlock()
		if len(offs) > 0 {
			if err := g.commitWait(ctx, offs, ids); err != nil {
				errs = append(errs, fmt.Errorf("consumer: Close: commit: %w", err))
			}
		}
	}
	g.mu.Lock()
	subscribed, member := g.subscribed, g.memberID
	unwatch := g.unwatch
	g.unwatch = nil
	g.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	if !subscribed {
		return errors.Join(errs...)
	}
	// Everything was committed above: the revoke commits nothing more
	// (its committable positions may be older).
	g.revokeParts(ctx, g.ownedSet(), false, false)
	if member == "" {
		return errors.Join(errs...)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch {
	case g.cfg.protocol == ProtocolConsumer && g.cfg.leaveOnClose:
		g.leaveConsumer(lctx, -1)
	case g.cfg.protocol == ProtocolConsumer && g.cfg.instanceID != nil:
		g.leaveConsumer(lctx, -2) // a static member that will rejoin
	case g.cfg.leaveOnClose:
		g.leaveClassic(lctx)
	}
	return errors.Join(errs...)
}

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// codeErr returns the error for a Kafka error code (nil for 0).
func codeErr(code int16) error {
	if code == 0 {
		return nil
	}
	return errors.FromCode(code)
}

// isCode reports whether err carries Kafka error e.
func isCode(err error, e *kerr.Error) bool { return errors.Is(err, e) }
