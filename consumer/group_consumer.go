package consumer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The KIP-848 consumer group protocol, driven by the member loop: one
// ConsumerGroupHeartbeat at a time, every heartbeat interval the
// coordinator sets, each carrying the member's whole state (epoch,
// subscription, owned partitions by topic ID). The coordinator assigns; an
// answer with an assignment is the member's target, reconciled at once:
// partitions no longer in it are revoked (commit, OnRevoked), then new ones
// are assigned (OffsetFetch with epochs, OnAssigned), and the next
// heartbeat, sent immediately, reports the new owned set. The coordinator
// hands a partition to a member only after its previous owner reported it
// released, so no partition is owned twice.
//
//	FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID → OnLost, rejoin with epoch 0
//	no Poll for MaxPollInterval → OnLost, leave (epoch -1, static -2),
//	rejoin with epoch 0 at the next Poll
//	NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE → find the coordinator again
//	GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_ASSIGNOR, UNRELEASED_INSTANCE_ID,
//	INVALID_REQUEST, INVALID_REGULAR_EXPRESSION, GROUP_MAX_SIZE_REACHED,
//	UNSUPPORTED_VERSION (also a coordinator whose ApiVersions lacks
//	ConsumerGroupHeartbeat) → surfaced, membership ends
//
// ConsumerGroupHeartbeat is sent to the coordinator the member finds itself
// (FindCoordinator), since kgo does not retry it nor forget a stale
// coordinator on its behalf; commits and offset fetches go through kgo's
// coordinator handling as in the classic protocol.

// newMemberID returns a client-generated member id (ConsumerGroupHeartbeat
// v1+): a random UUID in Kafka's URL-safe base64 form.
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// memberState848 is the member loop's view of its KIP-848 membership.
type memberState848 struct {
	epoch       int32
	interval    time.Duration
	coordinator int32 // -1: unknown
	// regexSent: the coordinator may hold a regex subscription of this
	// member; a null regex means "unchanged" to it, so a member that
	// switches to topic names must send an empty regex to clear it.
	regexSent bool
}

func (g *group) runConsumer() {
	ctx := g.ctx
	g.mu.Lock()
	if g.memberID == "" {
		g.memberID = newMemberID()
	}
	g.mu.Unlock()
	st := memberState848{interval: g.cfg.heartbeatInterval, coordinator: -1}
	failures := 0
	backoff := func() bool {
		failures++
		return sleep(ctx, min(g.c.cfg.tick<<min(failures, 6), 5*time.Second))
	}
	// Reconciliation (commits, callbacks, OffsetFetch) runs on its own
	// goroutine, one at a time, so that heartbeats go on meanwhile; the
	// loop waits for it before it returns or drops the partitions. A new
	// assignment, or a fence, abandons the reading of the committed
	// offsets of the one under way (never its revocation): that read may
	// wait as long as a transaction stays open (UNSTABLE_OFFSET_COMMIT),
	// and meanwhile the member reports the partitions as owned and could
	// release none the coordinator moves.
	var (
		reconciling chan struct{} // closed when the running reconciliation ends; nil when none runs
		changed     bool          // set by the reconciliation before it closes reconciling
		pending     *kmsg.ConsumerGroupHeartbeatResponseAssignment
		current     *kmsg.ConsumerGroupHeartbeatResponseAssignment // the running reconciliation's
		abandon     context.CancelFunc
	)
	startReconcile := func() {
		a := pending
		pending = nil
		done := make(chan struct{})
		reconciling = done
		rctx, cancel := context.WithCancel(ctx)
		current, abandon = a, cancel
		go func() {
			defer close(done)
			defer cancel()
			changed = g.reconcile848(rctx, a)
		}()
	}
	waitReconcile := func() {
		if reconciling != nil {
			abandon()
			<-reconciling
			reconciling = nil
		}
		pending = nil
	}
	defer waitReconcile()
	for ctx.Err() == nil {
		resp, err := g.heartbeat848(ctx, &st)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if st.coordinator >= 0 && g.lacks848(ctx, st.coordinator) {
				// kgo refuses the request itself: the broker never
				// answers UNSUPPORTED_VERSION for an API it does not list.
				waitReconcile()
				g.fatal("heartbeat", fmt.Errorf("%w: the coordinator does not support ConsumerGroupHeartbeat (KIP-848, Kafka 4.0+)", kerr.UnsupportedVersion))
				return
			}
			st.coordinator = -1
			if !backoff() {
				return
			}
			continue
		}
		err = codeErr(resp.ErrorCode)
		switch {
		case err == nil:
		case isCode(err, kerr.NotCoordinator), isCode(err, kerr.CoordinatorNotAvailable):
			st.coordinator = -1
			if !backoff() {
				return
			}
			continue
		case isCode(err, kerr.CoordinatorLoadInProgress):
			if !backoff() {
				return
			}
			continue
		case isCode(err, kerr.FencedMemberEpoch), isCode(err, kerr.UnknownMemberID):
			waitReconcile()
			g.loseAll(false)
			st.epoch = 0
			continue
		case isCode(err, kerr.GroupAuthorizationFailed), isCode(err, kerr.UnsupportedAssignor),
			isCode(err, kerr.UnreleasedInstanceID), isCode(err, kerr.InvalidRequest),
			isCode(err, kerr.InvalidRegularExpression), isCode(err, kerr.GroupMaxSizeReached),
			isCode(err, kerr.UnsupportedVersion), isCode(err, kerr.FencedInstanceID):
			if resp.ErrorMessage != nil {
				err = fmt.Errorf("%w: %s", err, *resp.ErrorMessage)
			}
			waitReconcile()
			g.fatal("heartbeat", err)
			return
		default:
			g.surface("heartbeat", err)
			if !backoff() {
				return
			}
			continue
		}
		failures = 0
		if resp.MemberID != nil && *resp.MemberID != "" {
			g.mu.Lock()
			g.memberID = *resp.MemberID
			g.mu.Unlock()
		}
		st.epoch = resp.MemberEpoch
		g.mu.Lock()
		g.generation = st.epoch
		g.mu.Unlock()
		if resp.HeartbeatIntervalMillis > 0 {
			st.interval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		if resp.Assignment != nil {
			pending = resp.Assignment
			switch {
			case reconciling == nil:
				startReconcile()
			case !sameAssignment(current, pending):
				abandon()
			}
		}
		t := time.NewTimer(st.interval)
		pt := g.pollTimer()
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				pt.Stop()
				return
			case <-g.rejoin:
				break wait
			case <-pt.C:
				expired, since := g.pollExpired(pt)
				if !expired {
					continue
				}
				waitReconcile()
				epoch := int32(-1)
				if g.cfg.instanceID != nil {
					epoch = -2 // a static member that will come back
				}
				if !g.leaveForPoll(since, func(ctx context.Context) { g.leaveConsumer(ctx, epoch) }) {
					t.Stop()
					return
				}
				st.epoch = 0
				break wait
			case <-t.C:
				break wait
			case <-reconciling:
				reconciling = nil
				moved := changed
				if pending != nil {
					startReconcile()
				}
				if moved {
					break wait // report the new owned set at once
				}
			}
		}
		t.Stop()
		pt.Stop()
	}
}

// heartbeat848 sends one full ConsumerGroupHeartbeat to the coordinator,
// finding it first if needed.
func (g *group) heartbeat848(ctx context.Context, st *memberState848) (*kmsg.ConsumerGroupHeartbeatResponse, error) {
	c := g.c
	if st.coordinator < 0 {
		node, err := g.findCoordinator(ctx)
		if err != nil {
			return nil, err
		}
		st.coordinator = node
	}
	g.mu.Lock()
	member := g.memberID
	topics, re := g.topics, g.regexExpr
	owned := make(tpSet, len(g.owned)+len(g.assigning))
	for tp := range g.owned {
		owned.add(tp)
	}
	for tp := range g.assigning {
		owned.add(tp) // being added: not released
	}
	g.mu.Unlock()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group = g.cfg.id
	req.MemberID = member
	req.MemberEpoch = st.epoch
	req.InstanceID = g.cfg.instanceID
	req.RackID = g.c.cfg.rack
	req.RebalanceTimeoutMillis = int32(g.cfg.rebalanceTimeout / time.Millisecond)
	if re != "" {
		req.SubscribedTopicRegex = &re
		req.SubscribedTopicNames = []string{}
		st.regexSent = true
	} else {
		req.SubscribedTopicNames = append([]string{}, topics...)
		if st.regexSent {
			none := ""
			req.SubscribedTopicRegex = &none
		}
	}
	if g.cfg.serverAssignor != "" {
		sa := g.cfg.serverAssignor
		req.ServerAssignor = &sa
	}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{} // empty, not null: a (re)join must send it empty
	if st.epoch > 0 {
		for _, t := range owned.group() {
			id := g.topicID(t.Topic)
			if id == ([16]byte{}) {
				continue
			}
			rt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			rt.TopicID, rt.Partitions = id, t.Partitions
			req.Topics = append(req.Topics, rt)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	kr, err := c.cl.Broker(int(st.coordinator)).Request(rctx, req)
	if err != nil {
		return nil, err
	}
	return kr.(*kmsg.ConsumerGroupHeartbeatResponse), nil
}

// lacks848 reports whether broker node, asked for its API versions, does
// not list ConsumerGroupHeartbeat. A failed question reports false.
func (g *group) lacks848(ctx context.Context, node int32) bool {
	rctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
	defer cancel()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kepoch", "1" // v3+ refuses empty names
	kr, err := g.c.cl.Broker(int(node)).Request(rctx, req)
	if err != nil {
		return false
	}
	resp := kr.(*kmsg.ApiVersionsResponse)
	return resp.ErrorCode == 0 && !listsKey(resp, kmsg.ConsumerGroupHeartbeat)
}

// listsKey reports whether an ApiVersions answer lists request key k.
func listsKey(resp *kmsg.ApiVersionsResponse, k kmsg.Key) bool {
	for _, a := range resp.ApiKeys {
		if a.ApiKey == int16(k) && a.MaxVersion >= 0 {
			return true
		}
	}
	return false
}

// findCoordinator asks any broker for the group's coordinator.
func (g *group) findCoordinator(ctx context.Context) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = g.cfg.id
	req.CoordinatorKeys = []string{g.cfg.id}
	req.CoordinatorType = 0
	rctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
	defer cancel()
	resp, err := req.RequestWith(rctx, g.c.cl)
	if err != nil {
		return -1, err
	}
	node, code := resp.NodeID, resp.ErrorCode
	for _, co := range resp.Coordinators {
		if co.Key == g.cfg.id {
			node, code = co.NodeID, co.ErrorCode
		}
	}
	if err := codeErr(code); err != nil {
		return -1, err
	}
	return node, nil
}

// topicID returns a topic's ID from the member's names or metadata.
func (g *group) topicID(topic string) [16]byte {
	g.mu.Lock()
	id, ok := g.idOf[topic]
	g.mu.Unlock()
	if ok {
		return id
	}
	if tm, err := g.c.meta.Topic(topic); err == nil {
		return tm.ID
	}
	return [16]byte{}
}

// topicNames resolves topic IDs to names: from what the member learned,
// then from the refresher, then with a Metadata request for every topic.
func (g *group) topicNames(ctx context.Context, ids [][16]byte) map[[16]byte]string {
	out := map[[16]byte]string{}
	var missing bool
	g.mu.Lock()
	for _, id := range ids {
		if n, ok := g.nameOf[id]; ok {
			out[id] = n
		}
	}
	watched := append([]string(nil), g.topics...)
	g.mu.Unlock()
	for _, t := range watched {
		if tm, err := g.c.meta.Topic(t); err == nil && tm.ID != ([16]byte{}) {
			out[tm.ID] = t
		}
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			missing = true
		}
	}
	if missing {
		req := kmsg.NewPtrMetadataRequest()
		rctx, cancel := context.WithTimeout(ctx, g.c.cfg.requestTimeout)
		resp, err := req.RequestWith(rctx, g.c.cl)
		cancel()
		if err == nil {
			for _, t := range resp.Topics {
				if t.Topic != nil && t.TopicID != ([16]byte{}) {
					out[t.TopicID] = *t.Topic
				}
			}
		}
	}
	// A name may have two IDs here while its topic is recreated (the
	// assignment's and metadata's): the member's partitions of it are
	// reported under the one the assignment names, as the coordinator
	// knows them. The member keeps only the names of the assignment's
	// IDs, and the IDs it knew for topics it still owns (being revoked:
	// reported under those until released): what it learned of other
	// topics (an all-topics answer names every topic of the cluster)
	// would grow with every topic the cluster ever had.
	g.mu.Lock()
	owned := map[string]bool{}
	for tp := range g.owned {
		owned[tp.Topic] = true
	}
	nameOf := make(map[[16]byte]string, len(ids))
	idOf := make(map[string][16]byte, len(ids))
	for n, id := range g.idOf {
		if owned[n] {
			idOf[n], nameOf[id] = id, n
		}
	}
	for _, id := range ids {
		if n, ok := out[id]; ok {
			idOf[n], nameOf[id] = id, n
		}
	}
	g.nameOf, g.idOf = nameOf, idOf
	g.mu.Unlock()
	return out
}

// reconcile848 makes the owned partitions the coordinator's assignment:
// revokes what is no longer assigned, then assigns what is new. Partitions
// of topics whose names cannot be resolved yet are left for a later
// heartbeat. It reports whether the owned set changed.
func (g *group) reconcile848(ctx context.Context, a *kmsg.ConsumerGroupHeartbeatResponseAssignment) bool {
	var ids [][16]byte
	for _, t := range a.Topics {
		ids = append(ids, t.TopicID)
	}
	names := g.topicNames(ctx, ids)
	target := tpSet{}
	for _, t := range a.Topics {
		name, ok := names[t.TopicID]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			target.add(TopicPartition{name, p})
		}
	}
	owned := g.ownedSet()
	revoked, added := owned.minus(target), target.minus(owned)
	g.revokeParts(g.life(), revoked, true, false)
	if err := g.assignParts(ctx, added); err != nil && ctx.Err() == nil {
		g.surface("assign", err)
	}
	return len(revoked) > 0 || len(added) > 0
}

// sameAssignment reports whether two KIP-848 assignments name the same
// partitions (a full heartbeat's answer repeats an unchanged one).
func sameAssignment(a, b *kmsg.ConsumerGroupHeartbeatResponseAssignment) bool {
	set := func(x *kmsg.ConsumerGroupHeartbeatResponseAssignment) map[[16]byte]map[int32]bool {
		out := map[[16]byte]map[int32]bool{}
		for _, t := range x.Topics {
			if out[t.TopicID] == nil {
				out[t.TopicID] = map[int32]bool{}
			}
			for _, p := range t.Partitions {
				out[t.TopicID][p] = true
			}
		}
		return out
	}
	return maps.EqualFunc(set(a), set(b), maps.Equal)
}

// leaveConsumer leaves the group with member epoch -1 or, for a static
// member that will come back under its instance id, -2 (the coordinator
// keeps its assignment until the session expires). kgo retries leaves.
func (g *group) leaveConsumer(ctx context.Context, epoch int32) {
	g.mu.Lock()
	member := g.memberID
	g.generation = -1
	g.mu.Unlock()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group = g.cfg.id
	req.MemberID = member
	req.MemberEpoch = epoch
	req.InstanceID = g.cfg.instanceID
	_, _ = req.RequestWith(ctx, g.c.cl)
}
