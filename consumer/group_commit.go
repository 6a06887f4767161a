package consumer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/seek"
)

// Commits. Every commit (CommitSync, CommitAsync, autocommit, the commit
// of revoked partitions and the last one on Close) goes through one queue
// served by one goroutine, so commits reach the coordinator in the order
// they were made and a later commit never overtakes an earlier one.
// Autocommits and revocations' commits are made when the commit goroutine
// reaches them, not when they are queued: their offsets are read then, so
// they are compared with what every commit ahead of them stored (made
// earlier, an autocommit of the position of the latest Poll undid a commit
// of what the application had processed that was queued or in flight ahead
// of it), and they carry the generation of that moment.
// Each committed offset carries the leader epoch of the record before it
// (OffsetCommit v6+), so a consumer restarting from it validates it against
// the leader before fetching (KIP-320).
//
// Ownership. The coordinator checks a commit's generation (member epoch),
// not who owns its partitions, so in a subscribed group an explicit commit
// names only partitions the member owns: judged when the commit is made
// (with the generation it carries, under the same lock), and again when it
// is sent, in the same assignment (group.ownedAt; a partition revoked and
// assigned again is another assignment). A revocation waits, after
// OnRevoked, for the commits queued before that point to be answered, so
// a commit made while the member owned a partition reaches the
// coordinator before the partition is released; the commit goroutine ends
// the assignment as it reaches the wait, so one queued behind it, one still
// queued when the wait gives up (the rebalance timeout), or one made in a
// membership that lost it, is refused with ErrCommitNotOwned. Standalone commits (no
// Subscribe) own nothing and are not judged.
//
// Hygiene (peers.md §5 item 9): autocommit commits only partitions that
// are fetching (never one awaiting validation, resetting or halted), and
// only what Poll returned; an explicit commit of an offset past the
// position of a partition awaiting validation or halted is refused with
// ErrCommitPendingValidation; a commit without a leader epoch is reported
// to OnCommitWithoutEpoch and, with RefuseCommitsWithoutEpoch, refused with
// ErrCommitWithoutEpoch.

// ErrCommitWithoutEpoch refuses a commit whose offset has no leader epoch
// (RefuseCommitsWithoutEpoch).
var ErrCommitWithoutEpoch = errors.New("kepoch: commit without a leader epoch refused")

// ErrCommitPendingValidation refuses a commit past the position of a
// partition whose position is not validated (awaiting validation or
// reset) or that halted on a truncation.
var ErrCommitPendingValidation = errors.New("kepoch: commit past a position awaiting validation refused")

// ErrCommitNotOwned refuses an explicit commit (CommitSync, CommitAsync),
// in a group the consumer subscribed in, of a partition the member does
// not own when the commit is made: revoked, lost, never assigned, or not
// yet assigned (before OnAssigned). The coordinator checks only the
// generation (KIP-848: the member epoch), not who owns the partition, so
// it would store the commit over the partition's new owner's: an older
// offset makes the owner's records be read again after a restart, a newer
// one skips records nobody processed.
var ErrCommitNotOwned = errors.New("kepoch: commit of a partition the group member does not own refused")

// commitReq is one queued commit.
type commitReq struct {
	ctx     context.Context
	offsets map[TopicPartition]OffsetAndMetadata
	// compute, when set, makes offsets when the commit is sent (resolve);
	// it runs with Consumer.mu held.
	compute func() map[TopicPartition]OffsetAndMetadata
	pre     []error // partitions refused before sending
	done    func(map[TopicPartition]OffsetAndMetadata, error)
	// explicit marks the application's own commit (CommitSync,
	// CommitAsync): in a subscribed group, the partitions the member does
	// not own when it is queued are refused (ErrCommitNotOwned).
	explicit bool
	// The membership the commit was made in: taken when it is queued, or
	// when compute runs. owners names the assignment (group.ownedAt) of
	// each partition of the commit the member owned then.
	gen        int32
	member     string
	subscribed bool
	owners     map[TopicPartition]uint64
	// ids names, per partition, the topic ID of the incarnation the
	// partition was reading when the commit's offsets were read (zero:
	// not known). An offset of a deleted incarnation is refused when
	// metadata names another by the time the commit is sent.
	ids map[TopicPartition][16]byte
	// taken is set (under commitQueue.mu) when the commit goroutine
	// takes the commit from the queue: from then on it may be written.
	taken bool
}

// incarnationsLocked returns the topic ID of the incarnation each
// partition of offsets is reading now (Consumer.mu held).
func (g *group) incarnationsLocked(offsets map[TopicPartition]OffsetAndMetadata) map[TopicPartition][16]byte {
	ids := make(map[TopicPartition][16]byte, len(offsets))
	for tp := range offsets {
		if p := g.c.parts[tp]; p != nil && p.topicID != ([16]byte{}) {
			ids[tp] = p.topicID
		}
	}
	return ids
}

// takeMembershipLocked records in r the membership of this moment (g.mu
// held). An explicit commit in a subscribed group loses the partitions the
// member does not own now: they are refused (ErrCommitNotOwned).
func (g *group) takeMembershipLocked(r *commitReq) {
	r.gen, r.member, r.subscribed = g.generation, g.memberID, g.subscribed
	if !r.subscribed {
		return
	}
	r.owners = make(map[TopicPartition]uint64, len(r.offsets))
	for _, tp := range sortedKeys(r.offsets) {
		at, owned := g.ownedAt[tp]
		switch {
		case owned && r.gen >= 0:
			r.owners[tp] = at
		case r.explicit:
			r.pre = append(r.pre, commitErr(tp, r.offsets[tp], ErrCommitNotOwned))
			delete(r.offsets, tp)
		}
	}
}

// ownsLocked reports whether the member still owns tp in the assignment
// the commit r was made in (g.mu held).
func (g *group) ownsLocked(r *commitReq, tp TopicPartition) bool {
	at, ok := r.owners[tp]
	return ok && g.generation >= 0 && g.memberID == r.member && g.ownedAt[tp] == at
}

// dropUnowned refuses, before r is sent, the partitions of an explicit
// commit that the member no longer owns in the assignment the commit was
// made in (revoked or lost while it waited behind other commits): sent
// with the generation it was made in, a KIP-1251 coordinator stores it
// over the next owner's commit.
func (g *group) dropUnowned(r *commitReq) {
	if !r.explicit || !r.subscribed {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range sortedKeys(r.offsets) {
		if !g.ownsLocked(r, tp) {
			r.pre = append(r.pre, commitErr(tp, r.offsets[tp], ErrCommitNotOwned))
			delete(r.offsets, tp)
		}
	}
}

// commitQueue is the FIFO of commits the commit loop serves.
type commitQueue struct {
	mu     sync.Mutex
	q      []*commitReq
	wake   chan struct{} // capacity 1
	closed bool          // the commit loop ended: nothing queued is served
}

func (g *group) enqueue(r *commitReq) {
	if r.compute == nil {
		g.mu.Lock()
		g.takeMembershipLocked(r)
		g.mu.Unlock()
	}
	g.commits.mu.Lock()
	if g.commits.closed {
		g.commits.mu.Unlock()
		r.done(nil, errors.ErrClosed)
		return
	}
	g.commits.q = append(g.commits.q, r)
	g.commits.mu.Unlock()
	select {
	case g.commits.wake <- struct{}{}:
	default:
	}
}

// commitLoop sends queued commits one at a time, in order. When the
// consumer closes, commits still queued fail with ErrClosed.
func (g *group) commitLoop() {
	c := g.c
	for {
		g.commits.mu.Lock()
		var r *commitReq
		if len(g.commits.q) > 0 {
			r = g.commits.q[0]
			r.taken = true
			g.commits.q[0] = nil // the array, reused, must not keep it
			g.commits.q = g.commits.q[1:]
		}
		g.commits.mu.Unlock()
		if r == nil {
			select {
			case <-c.ctx.Done():
				g.commits.mu.Lock()
				q := g.commits.q
				g.commits.q, g.commits.closed = nil, true
				g.commits.mu.Unlock()
				for _, r := range q {
					r.done(nil, errors.ErrClosed)
				}
				return
			case <-g.commits.wake:
			}
			continue
		}
		var err error
		switch {
		case r.ctx.Err() != nil:
			err = r.ctx.Err()
		case c.ctx.Err() != nil:
			err = errors.ErrClosed
		default:
			if r.compute != nil {
				g.resolve(r)
			}
			g.dropUnowned(r)
			if len(r.offsets) > 0 {
				if g.beforeSend != nil {
					g.beforeSend()
				}
				ctx, cancel := context.WithCancel(r.ctx)
				stop := context.AfterFunc(c.ctx, cancel)
				err = g.sendCommit(ctx, r)
				stop()
				cancel()
			}
		}
		r.done(r.offsets, errors.Join(append(r.pre, err)...))
	}
}

// resolve makes a deferred commit as it is sent: every commit queued
// before it has been answered, so its offsets are compared with what they
// stored, and it carries the membership of this moment.
func (g *group) resolve(r *commitReq) {
	c := g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r.offsets = r.compute()
	r.ids = g.incarnationsLocked(r.offsets)
	g.mu.Lock()
	g.takeMembershipLocked(r)
	g.mu.Unlock()
}

// commitWait queues offsets, read in the incarnations ids names, and
// waits for the answer or ctx.
func (g *group) commitWait(ctx context.Context, offsets map[TopicPartition]OffsetAndMetadata, ids map[TopicPartition][16]byte) error {
	return g.await(ctx, &commitReq{ctx: ctx, offsets: offsets, ids: ids})
}

// commitWaitFor queues a commit of what compute returns when the commit is
// sent (see resolve) and waits for the answer or ctx.
func (g *group) commitWaitFor(ctx context.Context, compute func() map[TopicPartition]OffsetAndMetadata) error {
	return g.await(ctx, &commitReq{ctx: ctx, compute: compute})
}

// await queues r (r.ctx is ctx) and waits for its answer or ctx. When ctx
// ends while the commit is being sent, it waits for the send to end (at
// once: the send ends with ctx) so as to return whether the request was
// written (the commit may then have been stored: errors.ErrUnknownOutcome).
func (g *group) await(ctx context.Context, r *commitReq) error {
	res := make(chan error, 1)
	r.done = func(_ map[TopicPartition]OffsetAndMetadata, err error) { res <- err }
	g.enqueue(r)
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
	}
	g.commits.mu.Lock()
	taken := r.taken
	g.commits.mu.Unlock()
	if !taken {
		return ctx.Err() // still queued: never sent
	}
	return <-res
}

// CommitSync commits offsets to the group and waits for the coordinator's
// answer. A nil map commits every position Poll has returned (Consumed).
// The error joins a *errors.PartitionError (Op "commit") per partition that
// failed or was refused; the other partitions were committed. An entry with
// an empty topic or a negative partition or offset is refused with one
// matching errors.ErrInvalidArgument.
//
// In a subscribed group (Subscribe), a partition the member does not own
// when CommitSync is called (revoked, lost, or not assigned yet: ownership
// runs from OnAssigned to the end of OnRevoked; OnLost and a member
// without a generation own nothing) is refused with ErrCommitNotOwned, as
// is one revoked before its commit could be sent: committed, it would
// overwrite the new owner's commit. Standalone commits (Group without
// Subscribe) commit any partition.
//
// A failure after the OffsetCommit request was written (its connection
// broke, or ctx ended, before the answer) also matches
// errors.ErrUnknownOutcome: the coordinator may have stored the offsets.
// A partition the coordinator refused with an error code, or a commit ctx
// ended before it was sent, does not (unless an earlier attempt of the
// same request, which the transport resent, went unanswered). On a
// transport given by WithClient, whose writes kepoch cannot observe, every
// failure to reach the coordinator but a failure to connect is taken as
// possibly written.
func (c *Consumer) CommitSync(ctx context.Context, offsets map[TopicPartition]OffsetAndMetadata) error {
	if ctx == nil {
		return nilContext("CommitSync")
	}
	g := c.grp
	if g == nil {
		return ErrNoGroup
	}
	if offsets == nil {
		offsets = g.consumedOffsets()
	}
	ok, ids, refused := g.screen(offsets)
	if len(ok) == 0 {
		return errors.Join(refused...)
	}
	return errors.Join(append(refused, g.await(ctx, &commitReq{ctx: ctx, offsets: ok, ids: ids, explicit: true}))...)
}

// CommitAsync queues a commit of offsets (nil: everything Poll has
// returned) and returns at once. done, if not nil, is called with the
// offsets sent and the result once the coordinator answered; done
// callbacks run one at a time, in the order of the commits, on the
// consumer's commit goroutine, and must not block.
//
// Partitions are refused as by CommitSync (their errors in done's error,
// left out of the offsets sent): in a subscribed group, those the member
// does not own when CommitAsync is called, and those revoked before the
// commit could be sent. A revocation waits (up to the rebalance timeout),
// after OnRevoked, for the commits queued before it to be answered, so a
// commit queued while the member owned a partition, OnRevoked's included,
// is normally sent before the partition is released. A failure that may
// nevertheless have stored the offsets matches errors.ErrUnknownOutcome,
// as for CommitSync.
func (c *Consumer) CommitAsync(offsets map[TopicPartition]OffsetAndMetadata, done func(map[TopicPartition]OffsetAndMetadata, error)) {
	g := c.grp
	if done == nil {
		done = func(map[TopicPartition]OffsetAndMetadata, error) {}
	}
	if g == nil {
		done(nil, ErrNoGroup)
		return
	}
	if offsets == nil {
		offsets = g.consumedOffsets()
	}
	ok, ids, refused := g.screen(offsets)
	g.enqueue(&commitReq{ctx: context.Background(), offsets: ok, ids: ids, pre: refused, done: done, explicit: true})
}

// Consumed returns what CommitSync(ctx, nil) commits: for every fetching
// partition, the position Poll has returned (next offset and the leader
// epoch of the last record), unless the group already stores exactly that.
func (c *Consumer) Consumed() map[TopicPartition]OffsetAndMetadata {
	if c.grp == nil {
		return nil
	}
	return c.grp.consumedOffsets()
}

// Committed reads the group's committed offsets of the partitions, with
// their leader epochs (OffsetFetch v5+). Partitions without a commit are
// left out. A partition with an empty topic or a negative partition is
// refused with an error matching errors.ErrInvalidArgument. After Close
// (once its group commits and callbacks are done) it returns
// errors.ErrClosed.
func (c *Consumer) Committed(ctx context.Context, tps ...TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	if ctx == nil {
		return nil, nilContext("Committed")
	}
	g := c.grp
	if g == nil {
		return nil, ErrNoGroup
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		// Not asked: a client the consumer owns is closed, and kgo's
		// own error for it is no kepoch identity.
		return nil, errors.ErrClosed
	}
	for _, tp := range tps {
		switch {
		case tp.Topic == "":
			return nil, invalidArgument("Committed", "tps", `topic "" is empty`)
		case tp.Partition < 0:
			return nil, invalidArgument("Committed", "tps", fmt.Sprintf("%v: partition %d is negative", tp, tp.Partition))
		}
	}
	all, err := g.fetchCommitted(ctx, tps)
	if err != nil {
		return nil, err
	}
	out := map[TopicPartition]OffsetAndMetadata{}
	for tp, om := range all {
		if om.Offset >= 0 {
			out[tp] = om
		}
	}
	return out, nil
}

func commitErr(tp TopicPartition, om OffsetAndMetadata, err error) error {
	return &errors.PartitionError{Op: "commit", Topic: tp.Topic, Partition: tp.Partition, Offset: om.Offset, LeaderEpoch: om.LeaderEpoch, Err: err}
}

// commitProblem says what makes an explicit commit of om for tp refused,
// naming the refused value; "" when it is valid.
func commitProblem(tp TopicPartition, om OffsetAndMetadata) string {
	switch {
	case tp.Topic == "":
		return `topic "" is empty`
	case tp.Partition < 0:
		return fmt.Sprintf("partition %d is negative", tp.Partition)
	case om.Offset < 0:
		return fmt.Sprintf("offset %d is negative", om.Offset)
	case om.LeaderEpoch < seek.NoEpoch:
		return fmt.Sprintf("leader epoch %d is below -1 (no epoch)", om.LeaderEpoch)
	}
	return ""
}

// screen applies commit hygiene to explicit offsets: it returns those to
// send, the incarnation each partition reads now, and an error per refused
// partition.
func (g *group) screen(offsets map[TopicPartition]OffsetAndMetadata) (map[TopicPartition]OffsetAndMetadata, map[TopicPartition][16]byte, []error) {
	c := g.c
	ok := make(map[TopicPartition]OffsetAndMetadata, len(offsets))
	var refused []error
	c.mu.Lock()
	defer c.mu.Unlock()
	for tp, om := range offsets {
		if problem := commitProblem(tp, om); problem != "" {
			refused = append(refused, commitErr(tp, om, fmt.Errorf("argument offsets: %s: %w", problem, errors.ErrInvalidArgument)))
			continue
		}
		if p := c.parts[tp]; p != nil {
			switch p.m.State() {
			case seek.StateAwaitingValidation, seek.StateAwaitingReset, seek.StateHalted, seek.StateInitializing:
				if pos, has := p.m.Position(); !has || om.Offset > pos.Offset {
					refused = append(refused, commitErr(tp, om, ErrCommitPendingValidation))
					continue
				}
			}
		}
		if om.LeaderEpoch < 0 && g.cfg.refuseEpochless {
			refused = append(refused, commitErr(tp, om, ErrCommitWithoutEpoch))
			continue
		}
		ok[tp] = om
	}
	return ok, g.incarnationsLocked(ok), refused
}

// wantCommitLocked reports whether pos should be committed for tp: it
// differs from what the group stores, and it has an epoch or epoch-less
// commits are allowed.
func (g *group) wantCommitLocked(tp TopicPartition, pos Position) (OffsetAndMetadata, bool) {
	om := OffsetAndMetadata{Offset: pos.Offset, LeaderEpoch: pos.Epoch}
	if prev, ok := g.committed[tp]; ok && prev.Offset == om.Offset && prev.LeaderEpoch == om.LeaderEpoch {
		return om, false
	}
	if om.LeaderEpoch < 0 && g.cfg.refuseEpochless {
		return om, false
	}
	return om, true
}

// consumedOffsets returns the current positions of the fetching partitions
// that are worth committing.
func (g *group) consumedOffsets() map[TopicPartition]OffsetAndMetadata {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	return g.consumedOffsetsLocked()
}

// consumedOffsetsLocked is consumedOffsets with Consumer.mu held.
func (g *group) consumedOffsetsLocked() map[TopicPartition]OffsetAndMetadata {
	c := g.c
	out := map[TopicPartition]OffsetAndMetadata{}
	for tp, p := range c.parts {
		if p.m.State() != seek.StateFetching {
			continue
		}
		if pos, ok := p.m.Position(); ok {
			if om, want := g.wantCommitLocked(tp, pos); want {
				out[tp] = om
			}
		}
	}
	return out
}

// autoOffsetsLocked returns the committable positions (as of the latest
// Poll) of tps (nil: every partition) that are fetching and worth
// committing.
func (g *group) autoOffsetsLocked(tps []TopicPartition) map[TopicPartition]OffsetAndMetadata {
	c := g.c
	g.mu.Lock()
	lost := g.subscribed && g.generation < 0
	g.mu.Unlock()
	if lost {
		// The member has no generation: what it still holds is being
		// dropped as lost (OnLost runs). Sent with generation -1, a
		// commit is taken as a standalone one once the group is empty,
		// undoing what a member that owned the partitions since stored.
		return nil
	}
	if tps == nil {
		for tp := range g.committable {
			tps = append(tps, tp)
		}
	}
	out := map[TopicPartition]OffsetAndMetadata{}
	for _, tp := range tps {
		p, pos, ok := c.parts[tp], Position{}, false
		if p != nil {
			pos, ok = g.committable[tp]
		}
		if !ok || p.m.State() != seek.StateFetching {
			continue
		}
		// A commit ahead of the snapshot that Poll has already reached
		// (CommitSync after processing) is not undone; a rewind (a
		// truncation moved the position below it) is committed.
		if prev, had := g.committed[tp]; had && pos.Offset < prev.Offset {
			if cur, ok := p.m.Position(); ok && cur.Offset >= prev.Offset {
				continue
			}
		}
		if om, want := g.wantCommitLocked(tp, pos); want {
			out[tp] = om
		}
	}
	return out
}

// autoCommitLoop commits the committable positions every interval, one
// autocommit at a time, each made when it is sent (resolve). It ends when
// Close begins (Close commits last).
func (g *group) autoCommitLoop() {
	c := g.c
	t := time.NewTicker(g.cfg.autoCommitInterval)
	defer t.Stop()
	auto := func() map[TopicPartition]OffsetAndMetadata { return g.autoOffsetsLocked(nil) }
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		queue := !g.autoBusy && len(g.autoOffsetsLocked(nil)) > 0
		g.autoBusy = g.autoBusy || queue
		c.mu.Unlock()
		if !queue {
			continue
		}
		g.enqueue(&commitReq{ctx: g.ctx, compute: auto, done: func(_ map[TopicPartition]OffsetAndMetadata, err error) {
			c.mu.Lock()
			g.autoBusy = false
			c.mu.Unlock()
			if err != nil && !quietCommitErr(err) && g.ctx.Err() == nil {
				g.surface("autocommit", err)
			}
		}})
	}
}

// quietCommitErr reports whether an autocommit failure is expected to heal
// by itself (a rebalance, a retriable error): it is not surfaced.
func quietCommitErr(err error) bool {
	for _, e := range []*kerr.Error{kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.UnknownMemberID, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return errors.IsRetriable(err) || errors.Is(err, context.Canceled) || errors.Is(err, errors.ErrClosed)
}

// sendCommit sends one OffsetCommit (v6+ carries the leader epochs) and
// records what was stored. A KIP-848 member whose epoch went stale retries
// with the epoch its next heartbeat learns.
func (g *group) sendCommit(ctx context.Context, r *commitReq) error {
	offsets, gen := r.offsets, r.gen
	// A partition whose offset was read in an incarnation of its topic
	// that metadata no longer names (deleted and created again while the
	// commit waited) is refused: an offset of the deleted log, stored for
	// the new one, makes the next owner start past records nobody read
	// (or report a truncation that is none). The request names each topic
	// by the ID metadata holds, read once, here: checked against an
	// earlier read, a recreation learned in between was named in the
	// request (v10 by ID, older versions by name only), and the deleted
	// log's offset stored for the new incarnation.
	ids := g.topicIDs(ctx, offsets)
	var settled []error
	for _, tp := range sortedKeys(offsets) {
		if was, ok := r.ids[tp]; ok && ids[tp.Topic] != ([16]byte{}) && ids[tp.Topic] != was {
			settled = append(settled, commitErr(tp, offsets[tp], fmt.Errorf("%w: the offset is of an incarnation of the topic deleted since", errors.ErrTopicIDChanged)))
			delete(offsets, tp)
		}
	}
	if len(offsets) == 0 {
		return errors.Join(settled...)
	}
	if fn := g.cfg.onEpochless; fn != nil {
		for _, tp := range sortedKeys(offsets) {
			if om := offsets[tp]; om.LeaderEpoch < 0 {
				fn(tp, om)
			}
		}
	}
	// A retry names only the partitions answered STALE_MEMBER_EPOCH: the
	// others were stored, or refused for good, by the attempt that
	// answered them, and what the caller is told of them is that answer.
	todo := offsets
	for attempt := 0; ; attempt++ {
		failed, stale := g.sendCommitOnce(ctx, todo, ids, gen, r.member, r.subscribed)
		settled = append(settled, failed...)
		if len(stale) == 0 || attempt >= 5 || !sleep(ctx, 200*time.Millisecond) {
			return errors.Join(append(settled, staleErrs(stale)...)...)
		}
		// Retry with the new epoch only if the member is the same and
		// still owns every stale partition, in the assignment the
		// commit was made in.
		g.mu.Lock()
		same := g.memberID == r.member && g.generation > 0
		for tp := range stale {
			same = same && g.ownsLocked(r, tp)
		}
		gen = g.generation
		g.mu.Unlock()
		if !same {
			return errors.Join(append(settled, staleErrs(stale)...)...)
		}
		todo = make(map[TopicPartition]OffsetAndMetadata, len(stale))
		for tp := range stale {
			todo[tp] = offsets[tp]
		}
	}
}

// staleErrs returns the errors of the partitions answered
// STALE_MEMBER_EPOCH, in partition order.
func staleErrs(stale map[TopicPartition]error) []error {
	out := make([]error, 0, len(stale))
	for _, tp := range sortedKeys(stale) {
		out = append(out, stale[tp])
	}
	return out
}

func sortedKeys[V any](m map[TopicPartition]V) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

// sendCommitOnce sends one OffsetCommit of offsets, naming each topic by
// ids (v10+) and by name. It returns the
// failures of its partitions, but those answered STALE_MEMBER_EPOCH, which
// it returns apart (a KIP-848 commit may be retried with the new epoch).
func (g *group) sendCommitOnce(ctx context.Context, offsets map[TopicPartition]OffsetAndMetadata, ids map[string][16]byte, gen int32, member string, subscribed bool) (failed []error, stale map[TopicPartition]error) {
	c := g.c
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = g.cfg.id
	req.Generation = -1
	if subscribed {
		req.Generation, req.MemberID, req.InstanceID = gen, member, g.cfg.instanceID
	}
	names := map[[16]byte]string{}
	idx := map[string]int{}
	for _, tp := range sortedKeys(offsets) {
		om := offsets[tp]
		i := topicSlot(idx, &req.Topics, tp.Topic, func() kmsg.OffsetCommitRequestTopic {
			// Both the name (v0-v9) and the topic ID (v10+): kgo picks
			// the version the coordinator supports.
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic, t.TopicID = tp.Topic, ids[tp.Topic]
			names[t.TopicID] = tp.Topic
			return t
		})
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition = tp.Partition
		p.Offset = om.Offset
		p.LeaderEpoch = om.LeaderEpoch
		md := om.Metadata
		p.Metadata = &md
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	written, ended, lost := c.commitsWritten.Load(), c.commitsEnded.Load(), c.commitsLost.Load()
	resp, err := req.RequestWith(ctx, c.cl)
	// An attempt written and left unanswered (the transport may have
	// sent the request again after it), or written and still awaiting
	// its answer when the request ended (ctx), may have been stored,
	// whatever the last attempt's fate. (A cancel that ends the request
	// between the write and its hook goes unseen.)
	unanswered := c.commitsLost.Load() != lost || c.commitsWritten.Load()-written > c.commitsEnded.Load()-ended
	if err != nil {
		if unanswered || (!c.ownClient && mayHaveWritten(err)) {
			err = &unknownOutcomeError{err}
		}
		for _, tp := range sortedKeys(offsets) {
			failed = append(failed, commitErr(tp, offsets[tp], err))
		}
		return failed, nil
	}
	refused := func(err error) error {
		if unanswered {
			return &unknownOutcomeError{err}
		}
		return err
	}
	if req.Version < 6 {
		// A coordinator before Kafka 2.1 stores no leader epochs: the
		// commits were made without them.
		if fn := g.cfg.onEpochless; fn != nil {
			for _, tp := range sortedKeys(offsets) {
				if om := offsets[tp]; om.LeaderEpoch >= 0 {
					fn(tp, OffsetAndMetadata{Offset: om.Offset, LeaderEpoch: -1, Metadata: om.Metadata})
				}
			}
		}
	}
	answered := map[TopicPartition]bool{}
	c.mu.Lock()
	for _, t := range resp.Topics {
		name := t.Topic
		if name == "" {
			name = names[t.TopicID]
		}
		for _, rp := range t.Partitions {
			tp := TopicPartition{name, rp.Partition}
			om, ok := offsets[tp]
			if !ok || answered[tp] {
				continue
			}
			answered[tp] = true
			if rp.ErrorCode == kerr.StaleMemberEpoch.Code {
				if stale == nil {
					stale = map[TopicPartition]error{}
				}
				stale[tp] = commitErr(tp, om, errors.FromCode(rp.ErrorCode))
				continue
			}
			if rp.ErrorCode != 0 {
				failed = append(failed, commitErr(tp, om, refused(errors.FromCode(rp.ErrorCode))))
				continue
			}
			g.committed[tp] = om
		}
	}
	c.mu.Unlock()
	for _, tp := range sortedKeys(offsets) {
		if !answered[tp] {
			failed = append(failed, commitErr(tp, offsets[tp], refused(fmt.Errorf("partition missing from the OffsetCommit answer"))))
		}
	}
	return failed, stale
}

// unknownOutcomeError marks a commit failure after which the commit may
// nevertheless have been stored: an OffsetCommit request was written and
// its answer never came (its connection broke, or the wait for it ended).
// It matches errors.ErrUnknownOutcome, and is retriable as its cause is
// (committing the same offsets again is harmless).
type unknownOutcomeError struct{ err error }

func (e *unknownOutcomeError) Error() string {
	return e.err.Error() + " (the commit may have been stored: its request was written and no answer came)"
}

func (e *unknownOutcomeError) Unwrap() error { return e.err }

// Is makes the error match errors.ErrUnknownOutcome.
func (e *unknownOutcomeError) Is(target error) bool { return target == errors.ErrUnknownOutcome }

// mayHaveWritten judges a transport failure of a commit sent on a client
// kepoch did not create (WithClient), whose writes it cannot observe: only
// a failure to connect certainly wrote nothing.
func mayHaveWritten(err error) bool {
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// commitHook is the transport hook of a client kepoch creates: it counts
// the OffsetCommit requests written, and those whose answer was read or
// never came (Consumer.commitsWritten, commitsEnded, commitsLost). kgo resends such a request by itself, so the
// commit's final error alone does not say whether an attempt reached the
// coordinator.
type commitHook struct{ c *Consumer }

func (h commitHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if kmsg.Key(key) == kmsg.OffsetCommit && err == nil {
		h.c.commitsWritten.Add(1)
	}
}

func (h commitHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if kmsg.Key(key) != kmsg.OffsetCommit || e2e.WriteErr != nil {
		return
	}
	if e2e.ReadErr != nil {
		h.c.commitsLost.Add(1)
	}
	h.c.commitsEnded.Add(1)
}

// topicIDs returns the topic IDs of the offsets' topics, refreshing
// metadata once for topics the refresher does not know yet (a standalone
// commit of partitions never assigned). A topic left without an ID (a
// broker before Kafka 2.8, which has no OffsetCommit v10 either) maps to
// the zero ID.
func (g *group) topicIDs(ctx context.Context, offsets map[TopicPartition]OffsetAndMetadata) map[string][16]byte {
	c := g.c
	ids := map[string][16]byte{}
	var missing []string
	for tp := range offsets {
		if _, done := ids[tp.Topic]; done {
			continue
		}
		tm, err := c.meta.Topic(tp.Topic)
		ids[tp.Topic] = tm.ID
		if err != nil || tm.ID == ([16]byte{}) {
			missing = append(missing, tp.Topic)
		}
	}
	if len(missing) == 0 {
		return ids
	}
	unwatch := c.meta.Watch(missing...)
	defer unwatch()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = c.meta.Refresh(rctx, 0)
	cancel()
	for _, t := range missing {
		if tm, err := c.meta.Topic(t); err == nil {
			ids[t] = tm.ID
		}
	}
	return ids
}

// fetchCommitted reads committed offsets (OffsetFetch, require_stable) of
// tps. A partition without a commit has offset -1. The request names each
// topic and carries its ID (v10+ is keyed by ID); kgo picks the version.
func (g *group) fetchCommitted(ctx context.Context, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	c := g.c
	offs := make(map[TopicPartition]OffsetAndMetadata, len(tps))
	for _, tp := range tps {
		offs[tp] = OffsetAndMetadata{}
	}
	ids := g.topicIDs(ctx, offs)
	names := map[[16]byte]string{}
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = g.cfg.id
	idx := map[string]int{}
	for _, tp := range sortedKeys(offs) {
		i := topicSlot(idx, &rg.Topics, tp.Topic, func() kmsg.OffsetFetchRequestGroupTopic {
			t := kmsg.NewOffsetFetchRequestGroupTopic()
			t.Topic, t.TopicID = tp.Topic, ids[tp.Topic]
			names[t.TopicID] = tp.Topic
			return t
		})
		rg.Topics[i].Partitions = append(rg.Topics[i].Partitions, tp.Partition)
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = true
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, &GroupError{Group: g.cfg.id, Op: "offset fetch", Err: err}
	}
	var gr *kmsg.OffsetFetchResponseGroup
	for i := range resp.Groups {
		if resp.Groups[i].Group == g.cfg.id {
			gr = &resp.Groups[i]
		}
	}
	if gr == nil {
		return nil, &GroupError{Group: g.cfg.id, Op: "offset fetch", Err: fmt.Errorf("group missing from the answer")}
	}
	if err := codeErr(gr.ErrorCode); err != nil {
		return nil, &GroupError{Group: g.cfg.id, Op: "offset fetch", Err: err}
	}
	out := map[TopicPartition]OffsetAndMetadata{}
	var errs []error
	for _, t := range gr.Topics {
		name := t.Topic
		if name == "" {
			name = names[t.TopicID]
		}
		for _, rp := range t.Partitions {
			tp := TopicPartition{name, rp.Partition}
			if _, want := offs[tp]; !want {
				continue
			}
			if rp.ErrorCode != 0 {
				errs = append(errs, &errors.PartitionError{Op: "offset fetch", Topic: tp.Topic, Partition: tp.Partition,
					Offset: -1, LeaderEpoch: -1, Err: errors.FromCode(rp.ErrorCode)})
				continue
			}
			om := OffsetAndMetadata{Offset: rp.Offset, LeaderEpoch: rp.LeaderEpoch}
			if rp.Metadata != nil {
				om.Metadata = *rp.Metadata
			}
			if om.Offset < 0 {
				om = OffsetAndMetadata{Offset: -1, LeaderEpoch: -1}
			}
			out[tp] = om
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for tp := range offs {
		if _, ok := out[tp]; !ok {
			return nil, &GroupError{Group: g.cfg.id, Op: "offset fetch", Err: fmt.Errorf("partition %v missing from the answer", tp)}
		}
	}
	return out, nil
}

// fetchCommittedRetry reads committed offsets until it succeeds or ctx
// ends. Retriable failures (UNSTABLE_OFFSET_COMMIT while a transaction's
// offsets are pending, a coordinator moving) are retried quietly; others
// are surfaced to Poll once each and retried more slowly.
func (g *group) fetchCommittedRetry(ctx context.Context, tps []TopicPartition) (map[TopicPartition]OffsetAndMetadata, error) {
	var last string
	for {
		out, err := g.fetchCommitted(ctx, tps)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := g.c.cfg.tick
		if !errors.IsRetriable(err) && !errors.Is(err, kerr.UnstableOffsetCommit) {
			if s := err.Error(); s != last {
				last = s
				g.surface("offset fetch", err)
			}
			wait = time.Second
		}
		if !sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}
