package consumer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// The classic group protocol, driven by the member loop:
//
//	for {
//		eager: revoke everything (commit, OnRevoked)
//		JoinGroup (retried with the member id on MEMBER_ID_REQUIRED, KIP-394)
//		leader: decode every subscription, assign, encode
//		SyncGroup → this member's assignment
//		start heartbeating (a goroutine the loop waits for; after REBALANCE_IN_PROGRESS it
//		                    goes on until the revocation and assignment below are done)
//		cooperative: revoke what moved (commit, OnRevoked); rejoin at once if anything was revoked
//		             (a rejoin left unanswered for a session or rebalance timeout: OnLost)
//		assign what is new (OffsetFetch with epochs, OnAssigned)
//		wait: a heartbeat error (REBALANCE_IN_PROGRESS → rejoin; ILLEGAL_GENERATION,
//		      UNKNOWN_MEMBER_ID, no answer for a session timeout → OnLost, rejoin;
//		      FENCED_INSTANCE_ID → OnLost, stop),
//		      no Poll for MaxPollInterval (→ OnLost, LeaveGroup unless static, rejoin at the next Poll),
//		      a new subscription, or changed metadata (partition counts, regex matches)
//	}

// errRejoin ends a session to rejoin the group (new subscription or
// metadata, or a cooperative revocation).
var errRejoin = errors.New("kepoch: rejoining the group")

// ErrGroupSessionExpired: no heartbeat of the member was answered for a
// session timeout. The coordinator has evicted it by then, so its
// partitions are dropped as lost (OnLost, no commit) and it rejoins.
var ErrGroupSessionExpired = errors.New("kepoch: group session expired without an answer from the coordinator")

// errFatal ends the member loop.
var errFatal = errors.New("kepoch: group membership ended")

// joined is what a successful JoinGroup told this member.
type joined struct {
	generation int32
	memberID   string
	protocol   string
	leader     bool
	skip       bool // KIP-814: a static leader rejoined; it must not reassign
	members    []kmsg.JoinGroupResponseMember
}

// cooperative reports whether the member rebalances cooperatively: only
// when every assignor it lists supports it (the Java client's rule).
func (g *group) cooperative() bool {
	for _, n := range g.cfg.assignors {
		if a, _ := assignorByName(n); !a.cooperative() {
			return false
		}
	}
	return true
}

func (g *group) runClassic() {
	ctx := g.ctx
	coop := g.cooperative()
	failures := 0
	backoff := func() bool {
		failures++
		return sleep(ctx, min(g.c.cfg.tick<<min(failures, 6), 5*time.Second))
	}
	var last *joined // the generation the member is in, for eager revokes
	for ctx.Err() == nil {
		if !coop {
			g.revokeEager(ctx, last)
		}
		topics, err := g.subscribedTopics(ctx)
		if err != nil {
			if !backoff() {
				return
			}
			continue
		}
		g.watch(topics)
		j, err := g.join(ctx, topics)
		if err == nil {
			var assigned tpSet
			var counts map[string]int32
			assigned, counts, err = g.sync(ctx, j, topics)
			if err == nil {
				failures = 0
				last = &j
				g.session(j, topics, counts, assigned, coop)
				if errors.Is(context.Cause(ctx), errFatal) {
					return
				}
				continue
			}
		}
		if ctx.Err() != nil || errors.Is(err, errFatal) {
			return
		}
		if coop {
			g.loseIfSilent()
		}
		if !errors.Is(err, errRejoin) && !backoff() {
			return
		}
	}
}

// answered records that the coordinator answered a request sent at sent.
func (g *group) answered(sent time.Time) {
	g.mu.Lock()
	if sent.After(g.contact) {
		g.contact = sent
	}
	g.mu.Unlock()
}

// loseIfSilent drops the partitions a cooperative member kept while it
// rejoins as lost once the coordinator answered nothing for a session
// timeout (or a rebalance timeout, which bounds a rejoin): it has evicted
// the member and may have given them to others.
func (g *group) loseIfSilent() {
	g.mu.Lock()
	silent := time.Since(g.contact) >= min(g.cfg.sessionTimeout, g.cfg.rebalanceTimeout)
	owns := len(g.owned) > 0
	g.mu.Unlock()
	if silent && owns {
		g.loseAll(false)
		g.surface("join", ErrGroupSessionExpired)
	}
}

// revokeEager revokes everything before an eager member rejoins, going on
// heartbeating in generation j meanwhile (as Java does during
// onPartitionsRevoked), so that a revoke slower than the session timeout
// does not get the member evicted; REBALANCE_IN_PROGRESS answers are
// expected then, and any other error stops the beats.
func (g *group) revokeEager(ctx context.Context, j *joined) {
	owned := g.ownedSet()
	if len(owned) == 0 || j == nil {
		g.revokeParts(g.life(), owned, true, false)
		return
	}
	hctx, stop := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.heartbeat(hctx, stop, *j, kerr.RebalanceInProgress)
	}()
	g.revokeParts(g.life(), owned, true, false)
	stop(nil)
	<-done
}

// session runs one generation: heartbeats, reconciles the assignment, and
// waits for a reason to rejoin; it handles the reason before returning.
func (g *group) session(j joined, topics []string, counts map[string]int32, assigned tpSet, coop bool) {
	sess, end := context.WithCancelCause(g.ctx)
	defer end(nil)
	// busy lasts while the session's revocation and assignment run
	// (commits, callbacks): a rebalance that begins meanwhile does not
	// stop the heartbeats until the member can rejoin, as Java's
	// heartbeat thread goes on until JoinGroup is sent. Stopped at the
	// first REBALANCE_IN_PROGRESS, a revocation slower than the session
	// timeout got the member evicted while it still held partitions,
	// and the coordinator gave them to others.
	busy, idle := context.WithCancelCause(g.ctx)
	defer idle(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		g.heartbeat(sess, end, j, nil)
		if isCode(context.Cause(sess), kerr.RebalanceInProgress) {
			g.heartbeat(busy, idle, j, kerr.RebalanceInProgress)
		}
	}()

	owned := g.ownedSet()
	revoked, added := owned.minus(assigned), assigned.minus(owned)
	g.revokeParts(g.life(), revoked, true, false)
	if err := g.assignParts(sess, added); err != nil && sess.Err() == nil {
		g.surface("assign", err)
	}
	idle(nil)
	if coop && len(revoked) > 0 {
		end(errRejoin) // the partitions revoked can now go to their new owners
	} else {
		g.waitSession(sess, end, topics, counts)
	}
	end(errRejoin)
	<-hbDone
	g.afterSession(context.Cause(sess))
}

// afterSession acts on why a session ended.
func (g *group) afterSession(cause error) {
	switch {
	case g.ctx.Err() != nil:
	case isCode(cause, kerr.IllegalGeneration):
		g.loseAll(false)
	case errors.Is(cause, ErrGroupSessionExpired):
		g.loseAll(false)
		g.surface("heartbeat", ErrGroupSessionExpired)
	case isCode(cause, kerr.UnknownMemberID):
		g.loseAll(true)
	case isCode(cause, kerr.FencedInstanceID):
		g.fatal("heartbeat", kerr.FencedInstanceID) // cause is the heartbeat's GroupError already
	case errors.Is(cause, errPollExpired):
		_, since := g.untilPollExpiry()
		g.leaveForPoll(since, func(ctx context.Context) {
			if g.cfg.instanceID == nil {
				g.leaveClassic(ctx)
			}
			// A static member sends no LeaveGroup (as Java): it stops
			// heartbeating and its session expires.
		})
	}
}

// loseAll drops every owned partition as lost (OnLost, no commit): the
// member's generation is no longer valid. resetMember forgets the member id
// too.
func (g *group) loseAll(resetMember bool) {
	g.mu.Lock()
	g.generation = -1
	if resetMember {
		g.memberID = ""
	}
	g.mu.Unlock()
	g.revokeParts(g.life(), g.ownedSet(), false, true)
}

// fatal ends the membership: what the member owns is lost, the error is
// surfaced, and the member loop stops.
func (g *group) fatal(op string, err error) {
	g.loseAll(true)
	g.surface(op, err)
	g.mu.Lock()
	g.subscribed = false
	g.mu.Unlock()
	g.cancelFatal()
}

// cancelFatal stops the member loop (the consumer stays open; Poll keeps
// returning what is buffered and the surfaced error).
func (g *group) cancelFatal() {
	g.cancel(errFatal)
}

// subscribedTopics returns the topics to join with: the explicit list, or
// the regex's matches in cluster metadata.
func (g *group) subscribedTopics(ctx context.Context) ([]string, error) {
	g.mu.Lock()
	topics, re := g.topics, g.regex
	g.mu.Unlock()
	if re == nil {
		return topics, nil
	}
	all, err := g.listTopics(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		if re.MatchString(t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// listTopics lists the cluster's non-internal topics, sorted.
func (g *group) listTopics(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = nil // all
	rctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
	resp, err := req.RequestWith(rctx, g.c.cl)
	cancel()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range resp.Topics {
		if t.ErrorCode == 0 && !t.IsInternal && t.Topic != nil {
			out = append(out, *t.Topic)
		}
	}
	sort.Strings(out)
	return out, nil
}

// subscription is this member's JoinGroup metadata for one assignor.
func (g *group) subscription(a assignor, topics []string) []byte {
	g.mu.Lock()
	gen, owned := g.generation, tpSet{}
	for tp := range g.owned {
		owned.add(tp)
	}
	g.mu.Unlock()
	s := groupSubscription{
		Version:    subscriptionVersion,
		Topics:     topics,
		UserData:   a.userData(gen),
		Owned:      owned.group(),
		Generation: gen,
		Rack:       g.c.cfg.rack,
	}
	return s.encode(nil)
}

// join sends JoinGroup until the coordinator accepts the member: a first
// join without a member id is answered MEMBER_ID_REQUIRED with the id to
// use (KIP-394); an expired member id is forgotten (its partitions lost).
func (g *group) join(ctx context.Context, topics []string) (joined, error) {
	c := g.c
	for attempt := 0; ; attempt++ {
		g.mu.Lock()
		member := g.memberID
		g.mu.Unlock()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group = g.cfg.id
		req.SessionTimeoutMillis = int32(g.cfg.sessionTimeout / time.Millisecond)
		req.RebalanceTimeoutMillis = int32(g.cfg.rebalanceTimeout / time.Millisecond)
		req.MemberID = member
		req.InstanceID = g.cfg.instanceID
		req.ProtocolType = groupProtocolType
		reason := "kepoch consumer joining"
		req.Reason = &reason
		for _, n := range g.cfg.assignors {
			a, _ := assignorByName(n)
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = n
			p.Metadata = g.subscription(a, topics)
			req.Protocols = append(req.Protocols, p)
		}
		sent := time.Now()
		resp, err := req.RequestWith(ctx, c.cl)
		if err != nil {
			return joined{}, &GroupError{Group: g.cfg.id, Op: "join", Err: err}
		}
		g.answered(sent)
		err = codeErr(resp.ErrorCode)
		switch {
		case err == nil:
			j := joined{generation: resp.Generation, memberID: resp.MemberID, leader: resp.LeaderID == resp.MemberID, skip: resp.SkipAssignment, members: resp.Members}
			if resp.Protocol != nil {
				j.protocol = *resp.Protocol
			}
			if _, ok := assignorByName(j.protocol); !ok || !slices.Contains(g.cfg.assignors, j.protocol) {
				return joined{}, &GroupError{Group: g.cfg.id, Op: "join", Err: fmt.Errorf("coordinator chose protocol %q, which this member did not offer", j.protocol)}
			}
			g.mu.Lock()
			g.memberID, g.generation = j.memberID, j.generation
			g.mu.Unlock()
			return j, nil
		case attempt >= 8:
			return joined{}, &GroupError{Group: g.cfg.id, Op: "join", Err: err}
		case isCode(err, kerr.MemberIDRequired):
			g.mu.Lock()
			g.memberID = resp.MemberID
			g.mu.Unlock()
		case isCode(err, kerr.UnknownMemberID):
			g.loseAll(true)
		case isCode(err, kerr.RebalanceInProgress):
			if !sleep(ctx, g.c.cfg.tick) {
				return joined{}, ctx.Err()
			}
		case isCode(err, kerr.FencedInstanceID), isCode(err, kerr.GroupAuthorizationFailed),
			isCode(err, kerr.InconsistentGroupProtocol), isCode(err, kerr.InvalidSessionTimeout),
			isCode(err, kerr.GroupMaxSizeReached), isCode(err, kerr.UnsupportedVersion):
			g.fatal("join", err)
			return joined{}, errFatal
		default:
			return joined{}, &GroupError{Group: g.cfg.id, Op: "join", Err: err}
		}
	}
}

// sync sends SyncGroup (with every member's assignment when leading) and
// returns this member's assignment and, for a leader, the partition counts
// it assigned from.
func (g *group) sync(ctx context.Context, j joined, topics []string) (tpSet, map[string]int32, error) {
	c := g.c
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group = g.cfg.id
	req.Generation = j.generation
	req.MemberID = j.memberID
	req.InstanceID = g.cfg.instanceID
	pt, pn := groupProtocolType, j.protocol
	req.ProtocolType, req.Protocol = &pt, &pn
	var counts map[string]int32
	if j.leader && !j.skip {
		var assignments map[string][]byte
		assignments, counts = g.lead(ctx, j, topics)
		for _, id := range slices.Sorted(maps.Keys(assignments)) {
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = id, assignments[id]
			req.GroupAssignment = append(req.GroupAssignment, a)
		}
	}
	sent := time.Now()
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, nil, &GroupError{Group: g.cfg.id, Op: "sync", Err: err}
	}
	g.answered(sent)
	err = codeErr(resp.ErrorCode)
	switch {
	case err == nil:
	case isCode(err, kerr.RebalanceInProgress):
		return nil, nil, errRejoin
	case isCode(err, kerr.IllegalGeneration):
		g.loseAll(false)
		return nil, nil, errRejoin
	case isCode(err, kerr.UnknownMemberID):
		g.loseAll(true)
		return nil, nil, errRejoin
	case isCode(err, kerr.FencedInstanceID), isCode(err, kerr.GroupAuthorizationFailed):
		g.fatal("sync", err)
		return nil, nil, errFatal
	default:
		return nil, nil, &GroupError{Group: g.cfg.id, Op: "sync", Err: err}
	}
	a, err := decodeAssignment(resp.MemberAssignment)
	if err != nil {
		// The leader sent what no consumer can read: surface it and
		// rejoin after a backoff (a new leader may do better).
		g.surface("sync", err)
		return nil, nil, &GroupError{Group: g.cfg.id, Op: "sync", Err: err}
	}
	return setOf(a.Topics), counts, nil
}

// lead assigns the group's partitions with the chosen assignor. A member
// whose subscription cannot be decoded is surfaced and assigned nothing.
func (g *group) lead(ctx context.Context, j joined, topics []string) (map[string][]byte, map[string]int32) {
	a, _ := assignorByName(j.protocol)
	members := make([]assignMember, 0, len(j.members))
	all := slices.Clone(topics)
	for _, m := range j.members {
		sub, err := decodeSubscription(m.ProtocolMetadata, m.MemberID)
		if err != nil {
			g.surface("assign", err)
			sub = groupSubscription{Generation: -1}
		}
		members = append(members, assignMember{id: m.MemberID, instanceID: m.InstanceID, sub: sub})
		all = append(all, sub.Topics...)
	}
	sort.Strings(all)
	all = slices.Compact(all)
	g.watch(all)
	counts := g.partitionCounts(ctx, all)
	enc, err := assignmentFor(members, a.assign(members, counts))
	if err != nil {
		g.surface("assign", err)
		return nil, counts
	}
	return enc, counts
}

// heartbeat sends Heartbeat every interval until sess ends, and ends the
// session with the error of the first answer that is neither NONE nor
// tolerated (nil: nothing is), or with ErrGroupSessionExpired once a
// session timeout passed without any answer: the coordinator has evicted
// the member by then and may have given its partitions to others.
func (g *group) heartbeat(sess context.Context, end context.CancelCauseFunc, j joined, tolerated error) {
	t := time.NewTicker(g.cfg.heartbeatInterval)
	defer t.Stop()
	expires := time.Now().Add(g.cfg.sessionTimeout)
	for {
		select {
		case <-sess.Done():
			return
		case <-t.C:
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group = g.cfg.id
		req.Generation = j.generation
		req.MemberID = j.memberID
		req.InstanceID = g.cfg.instanceID
		sent := time.Now()
		rctx, cancel := context.WithDeadline(sess, expires)
		resp, err := req.RequestWith(rctx, g.c.cl)
		cancel()
		if err != nil {
			if sess.Err() == nil && !time.Now().Before(expires) {
				end(&GroupError{Group: g.cfg.id, Op: "heartbeat", Err: ErrGroupSessionExpired})
				return
			}
			continue // transport trouble: the next beat retries
		}
		// The coordinator saw the member no earlier than when this beat
		// was sent.
		expires = sent.Add(g.cfg.sessionTimeout)
		g.answered(sent)
		if err := codeErr(resp.ErrorCode); err != nil && (tolerated == nil || !errors.Is(err, tolerated)) {
			end(&GroupError{Group: g.cfg.id, Op: "heartbeat", Err: err})
			return
		}
	}
}

// waitSession waits until the session ends, the subscription changes,
// the metadata the assignment was made from changes (a topic's partition
// count, or, for a regex, the matching topics), or no Poll ran for
// MaxPollInterval (errPollExpired).
func (g *group) waitSession(sess context.Context, end context.CancelCauseFunc, topics []string, counts map[string]int32) {
	interval := min(max(g.c.cfg.metadataMaxAge, 200*time.Millisecond), 30*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	watch := slices.Clone(topics)
	for tp := range counts {
		watch = append(watch, tp)
	}
	sort.Strings(watch)
	watch = slices.Compact(watch)
	// A leader compares with the counts it assigned from: partitions
	// added after it read them (while SyncGroup, OffsetFetch or OnAssigned
	// ran) must still trigger a rejoin.
	base := g.cachedCounts(watch)
	if counts != nil {
		base = maps.Clone(counts)
	}
	g.mu.Lock()
	regex := g.regex != nil
	g.mu.Unlock()
	pt := g.pollTimer()
	defer pt.Stop()
	for {
		select {
		case <-sess.Done():
			return
		case <-g.rejoin:
			end(errRejoin)
			return
		case <-pt.C:
			if expired, _ := g.pollExpired(pt); expired {
				end(errPollExpired)
				return
			}
			continue
		case <-t.C:
		}
		if !maps.Equal(base, g.cachedCounts(watch)) {
			end(errRejoin)
			return
		}
		if regex {
			if now, err := g.subscribedTopics(sess); err == nil && !slices.Equal(now, topics) {
				end(errRejoin)
				return
			}
		}
	}
}

// cachedCounts returns the partition counts the refresher holds.
func (g *group) cachedCounts(topics []string) map[string]int32 {
	out := map[string]int32{}
	for _, t := range topics {
		if tm, err := g.c.meta.Topic(t); err == nil && len(tm.Partitions) > 0 {
			out[t] = int32(len(tm.Partitions))
		}
	}
	return out
}

// leaveClassic leaves the group (LeaveGroup); errors are ignored: the
// session expires anyway.
func (g *group) leaveClassic(ctx context.Context) {
	g.mu.Lock()
	member := g.memberID
	g.memberID, g.generation = "", -1
	g.mu.Unlock()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = g.cfg.id
	req.MemberID = member
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = member, g.cfg.instanceID
	reason := "kepoch consumer closing"
	m.Reason = &reason
	req.Members = append(req.Members, m)
	_, _ = req.RequestWith(ctx, g.c.cl)
}
