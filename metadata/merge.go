package metadata

import (
	"maps"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// The merge rules, applied per partition by merge (all pure: the same state
// and answer always give the same new state and events):
//
//  1. An answer with leader epoch -1 never replaces a known epoch: the
//     cached partition is kept unchanged (a leaderless window, or a broker
//     that has no epoch, franz-go #1331). It does not count as a rewind.
//     When no epoch is known either, the answer is adopted.
//  2. A higher epoch, or any epoch when none was known, is adopted with its
//     leader, replicas, ISR and offline replicas.
//  3. The same epoch is adopted (replicas and ISR may have changed).
//  4. A lower epoch is rejected (KIP-232: stale metadata from a lagging
//     broker) and the cached partition kept, unless n consecutive answers
//     have reported a lower epoch for the partition (n = the refresher's
//     Confirmations, default 5; 0 = never): then the latest is adopted
//     (franz-go #119: after an unclean election a broker briefly exposed
//     a higher epoch and died; the surviving cluster's lower epoch is real).
//     Any answer at or above the cached epoch resets the count; an answer
//     with epoch -1 leaves it alone.
//  5. Incarnations. A topic ID names one incarnation of a topic: a topic
//     deleted and created again under its name gets a new ID, and its
//     epochs start over. A broker's metadata only moves forward, so when a
//     broker that answered ID X for a name answers Y, Y replaced X; a
//     chain of such moves from X to Y shows Y newer than X. An answer
//     whose broker is not known (a seed connection, a Requestor that does
//     not say) shows nothing.
//     a. An answer naming an ID some broker was seen moving away from is
//        stale (a broker lagging behind a recreation): the topic's entry
//        is ignored whole, whatever it says, however often.
//     b. An answer naming an ID shown newer than the cached one is a new
//        incarnation: all partitions are replaced whatever their epochs,
//        counters reset (TopicRecreated).
//     c. An answer naming another ID not shown newer (the first answer of
//        a broker about the topic, or one whose broker is not known) keeps
//        the cache as it is, unless n consecutive answers naming the topic
//        name that same ID (none the cached one): then it is adopted as in
//        b (the brokers that could show the order may be gone). With n = 0
//        only a shown order adopts a new ID. Such an answer leaves the
//        state unsettled: the refresher asks again (ReasonUnsettled), so
//        that the next broker's answer settles it.
//     Both IDs must be known; an answer without an ID is the cached
//     incarnation, and an ID learned for the first time is no recreation.
//  6. A partition answer with an error code other than
//     REPLICA_NOT_AVAILABLE has no usable leader: its leader is taken as -1
//     (the epoch rules above still decide whether it is adopted).
//  7. Partitions missing from an answer keep their cached state (a broker
//     that does not know about added partitions yet). Kafka numbers a
//     topic's partitions from 0 and lists all it knows, so a partition
//     numbered at or above both the count the answer lists and the count
//     cached is no partition: it is ignored (as are negative numbers and
//     repeats), never grown to.
//  8. A topic-level error keeps the cached partitions and records the
//     error on the topic. UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID (or
//     absence from an all-topics answer) n consecutive times removes the
//     partitions (0 = never). The removed partitions' epochs are kept: an
//     answer naming the topic again under the same ID with a partition
//     below its removed epoch is held back (the topic stays removed) until
//     n consecutive answers say so, as rule 4 holds back a lower epoch;
//     epochs of one topic ID never go back because the cache had dropped
//     them (a broker lagging behind the deletion, or one that called it
//     unknown wrongly). While a cached topic's count is under way (1 to
//     n-1) the state is unsettled, as in rule 5c: the refresher asks again
//     until the topic is removed or answered again. A removed topic no
//     caller watches is kept as a bounded tombstone (compact): its ID and
//     epoch floors, dropped oldest first beyond the refresher's limit.
//  9. Epochs from Metadata answers below v9 are not trusted (KAFKA-9212)
//     and read as -1.
//
// Every leader or epoch change that is adopted yields one Event. An answer
// that changes nothing (no topic, partition, broker, controller or cluster
// ID, no error and no count of the rules above, nothing unsettled) leaves
// the state as it was: merge returns prev itself, so a Version read before
// it is still current.

// state is one immutable snapshot of the cache. merge and applyHint return a
// new state and never modify their input, so readers may hold a *state
// without locks.
type state struct {
	brokers    []Broker // sorted by NodeID
	controller int32
	clusterID  string
	topics     map[string]*topicState
	// unsettled: the answer merged into this state named a topic ID that
	// rule 5c held back.
	unsettled bool
	// tombs numbers the tombstones compact makes (the last one given).
	tombs uint64
}

type topicState struct {
	Topic
	rewinds []int // per partition: consecutive answers with a lower epoch
	missing int   // consecutive answers saying the topic does not exist

	// Incarnations (rule 5). Shared between states: copied on write.
	reported   map[int32]TopicID // per broker: the last ID it answered for the topic
	moves      []idMove          // IDs brokers were seen moving from and to, newest last (at most maxMoves)
	challenger TopicID           // an ID not shown newer than the cached one…
	challenges int               // …named by this many consecutive answers

	// floors holds, per partition, the leader epoch the partitions rule 8
	// removed (of ID) had, and returns counts consecutive answers naming
	// ID again below them.
	floors  []int32
	returns int

	// tomb is nonzero when the entry is a tombstone (see compact): its
	// place in the order tombstones were made, oldest first.
	tomb uint64
}

// idMove: a broker answered from, then to.
type idMove struct{ from, to TopicID }

// maxMoves bounds a topic's remembered ID moves (each recreation seen adds
// at most one per broker).
const maxMoves = 32

func emptyState() *state {
	return &state{controller: -1, topics: map[string]*topicState{}}
}

// response is a decoded Metadata answer.
type response struct {
	all        bool  // the request asked for all topics
	broker     int32 // the broker that answered, -1 if not known
	brokers    []Broker
	controller int32
	clusterID  string
	topics     []respTopic
}

type respTopic struct {
	name       string
	id         TopicID
	internal   bool
	err        error
	partitions []respPartition
}

type respPartition struct {
	partition int32
	leader    int32
	epoch     int32
	replicas  []int32
	isr       []int32
	offline   []int32
	err       error
}

// decode turns a kmsg answer from broker (-1: not known) into a response
// (rules 6 and 9). It returns the answer's top-level error (Metadata v13+)
// if there is one.
func decode(resp *kmsg.MetadataResponse, all bool, broker int32) (*response, error) {
	if err := errors.FromCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	trusted := resp.GetVersion() >= 9
	if broker < 0 {
		broker = -1
	}
	out := &response{all: all, broker: broker, controller: resp.ControllerID}
	if resp.ClusterID != nil {
		out.clusterID = *resp.ClusterID
	}
	for _, b := range resp.Brokers {
		br := Broker{NodeID: b.NodeID, Host: b.Host, Port: b.Port}
		if b.Rack != nil {
			br.Rack = *b.Rack
		}
		out.brokers = append(out.brokers, br)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic == "" {
			continue // an ID-only answer (UNKNOWN_TOPIC_ID) names no topic
		}
		rt := respTopic{name: *t.Topic, id: TopicID(t.TopicID), internal: t.IsInternal, err: errors.FromCode(t.ErrorCode)}
		for _, p := range t.Partitions {
			rp := respPartition{
				partition: p.Partition,
				leader:    p.Leader,
				epoch:     p.LeaderEpoch,
				replicas:  slices.Clone(p.Replicas),
				isr:       slices.Clone(p.ISR),
				offline:   slices.Clone(p.OfflineReplicas),
				err:       errors.FromCode(p.ErrorCode),
			}
			if !trusted || rp.epoch < 0 {
				rp.epoch = -1
			}
			if rp.leader < 0 || (rp.err != nil && !errors.Is(rp.err, errors.ErrReplicaNotAvailable)) {
				rp.leader = -1
			}
			rt.partitions = append(rt.partitions, rp)
		}
		out.topics = append(out.topics, rt)
	}
	return out, nil
}

// merge applies one answer to prev. n is the number of consecutive answers
// needed to believe a lower epoch or a topic's removal (0: never). It
// returns prev itself when the answer changes nothing (see unchanged).
func merge(prev *state, in *response, n int) (*state, []Event) {
	next := &state{
		brokers:    prev.brokers,
		controller: prev.controller,
		clusterID:  prev.clusterID,
		topics:     make(map[string]*topicState, len(prev.topics)+len(in.topics)),
		tombs:      prev.tombs,
	}
	for name, t := range prev.topics {
		next.topics[name] = t
	}
	if len(in.brokers) > 0 {
		next.brokers = slices.Clone(in.brokers)
		sort.Slice(next.brokers, func(i, j int) bool { return next.brokers[i].NodeID < next.brokers[j].NodeID })
	}
	if in.controller >= 0 {
		next.controller = in.controller
	}
	if in.clusterID != "" {
		next.clusterID = in.clusterID
	}

	var events []Event
	same := true // every topic entry of next is prev's
	seen := make(map[string]bool, len(in.topics))
	for _, rt := range in.topics {
		if seen[rt.name] {
			continue
		}
		seen[rt.name] = true
		old := prev.topics[rt.name]
		nt, evs := mergeTopic(old, rt, n, in.broker)
		nt = keepSame(old, nt)
		same = same && nt == old
		if nt.challenges > 0 && (old == nil || nt.challenger != old.challenger || nt.challenges != old.challenges) {
			next.unsettled = true
		}
		if nt.removing(n) {
			next.unsettled = true
		}
		next.topics[rt.name] = nt
		events = append(events, evs...)
	}
	if in.all {
		// Absent from an answer listing every topic: the topic is gone.
		var absent []string
		for name := range prev.topics {
			if !seen[name] {
				absent = append(absent, name)
			}
		}
		sort.Strings(absent)
		for _, name := range absent {
			old := prev.topics[name]
			nt, evs := mergeTopic(old, respTopic{name: name, err: errors.ErrUnknownTopicOrPartition}, n, in.broker)
			nt = keepSame(old, nt)
			same = same && nt == old
			if nt.removing(n) {
				next.unsettled = true
			}
			next.topics[name] = nt
			events = append(events, evs...)
		}
	}
	if same && len(events) == 0 && unchanged(prev, next) {
		return prev, nil
	}
	return next, events
}

// unchanged reports whether next, made by merge from prev with prev's own
// topic entries, says nothing prev does not: same brokers, controller and
// cluster ID, and neither unsettled (prev's flag asks the refresher for
// another round trip, which next, settled, must end).
func unchanged(prev, next *state) bool {
	return !prev.unsettled && !next.unsettled &&
		prev.controller == next.controller && prev.clusterID == next.clusterID &&
		slices.Equal(prev.brokers, next.brokers) && prev.tombs == next.tombs
}

// keepSame returns old when nt, what an answer made of it, holds the same
// state, so that an answer changing nothing keeps the entry (and the state)
// it found.
func keepSame(old, nt *topicState) *topicState {
	if old != nil && nt != old && sameTopic(old, nt) {
		return old
	}
	return nt
}

// sameTopic reports whether two entries hold the same state: what Topic
// and Lookup answer and every count and record the merge rules read. An
// error is the same only as the same value (a code without a known error
// makes a new one each time: reported as a change, which costs only a new
// Version).
func sameTopic(a, b *topicState) bool {
	return a.Name == b.Name && a.ID == b.ID && a.Internal == b.Internal && a.Err == b.Err &&
		slices.EqualFunc(a.Partitions, b.Partitions, samePartition) &&
		slices.Equal(a.rewinds, b.rewinds) && a.missing == b.missing &&
		maps.Equal(a.reported, b.reported) && slices.Equal(a.moves, b.moves) &&
		a.challenger == b.challenger && a.challenges == b.challenges &&
		slices.Equal(a.floors, b.floors) && a.returns == b.returns && a.tomb == b.tomb
}

func samePartition(a, b Partition) bool {
	return a.Topic == b.Topic && a.TopicID == b.TopicID && a.Partition == b.Partition &&
		a.Leader == b.Leader && a.LeaderEpoch == b.LeaderEpoch &&
		slices.Equal(a.Replicas, b.Replicas) && slices.Equal(a.ISR, b.ISR) &&
		slices.Equal(a.OfflineReplicas, b.OfflineReplicas)
}

// compact turns every cached topic that has no partitions (removed by rule
// 8, or never answered with any) and that wanted (the topics some caller
// watches) does not name into a tombstone, and drops the oldest tombstones
// beyond limit (limit < 0: none kept). A tombstone is an ordinary entry
// without partitions: its topic ID, the epoch floors of its removed
// partitions, the IDs brokers were seen naming for it and its last error,
// so that every merge rule still applies to it (a lagging broker's answer
// naming its ID below the floors is held back, a new ID is judged as for
// any cached topic), but it is counted and dropped oldest first, so that a
// client that sees many short-lived topics holds a bounded cache. A
// dropped tombstone's topic is unknown to the cache: an answer naming it
// again is adopted as a first sighting. A tombstone named by wanted again
// is a plain entry again (never dropped). compact never modifies s; it
// returns s when nothing changes.
func compact(s *state, wanted func(string) bool, limit int) *state {
	var change []string // entries whose tombstone mark changes, sorted
	count := 0
	for name, t := range s.topics {
		tomb := len(t.Partitions) == 0 && !wanted(name)
		if tomb {
			count++
		}
		if tomb != (t.tomb != 0) {
			change = append(change, name)
		}
	}
	limit = max(limit, 0)
	if len(change) == 0 && count <= limit {
		return s
	}
	next := *s
	next.topics = make(map[string]*topicState, len(s.topics))
	for name, t := range s.topics {
		next.topics[name] = t
	}
	sort.Strings(change)
	for _, name := range change {
		c := *next.topics[name]
		if c.tomb == 0 {
			next.tombs++
			c.tomb = next.tombs
		} else {
			c.tomb = 0
		}
		next.topics[name] = &c
	}
	if count > limit {
		tombs := make([]string, 0, count)
		for name, t := range next.topics {
			if t.tomb != 0 {
				tombs = append(tombs, name)
			}
		}
		sort.Slice(tombs, func(i, j int) bool { return next.topics[tombs[i]].tomb < next.topics[tombs[j]].tomb })
		for _, name := range tombs[:count-limit] {
			delete(next.topics, name)
		}
	}
	return &next
}

func mergeTopic(old *topicState, rt respTopic, n int, broker int32) (*topicState, []Event) {
	if rt.err != nil {
		return mergeTopicError(old, rt, n)
	}
	if old != nil && !rt.id.IsZero() {
		// Rule 5.
		old = old.observe(broker, rt.id)
		switch {
		case old.retired(rt.id):
			return old, nil // a: stale
		case old.ID.IsZero() || old.ID == rt.id:
			old = old.challenge(TopicID{})
		case old.shownNewer(rt.id):
			return freshTopic(old, rt, true) // b
		default:
			old = old.challenge(rt.id)
			if n <= 0 || old.challenges < n {
				return old, nil
			}
			return freshTopic(old, rt, true) // c
		}
	}
	if old == nil {
		nt, events := freshTopic(nil, rt, false)
		return nt.observe(broker, rt.id), events
	}
	if len(old.Partitions) == 0 {
		if held, nt := old.holdReturn(rt, n); held {
			return nt, nil
		}
		return freshTopic(old, rt, false)
	}

	nt := old.clone()
	nt.Err = nil
	nt.missing = 0
	nt.Internal = rt.internal
	if nt.ID.IsZero() && !rt.id.IsZero() {
		nt.ID = rt.id
		for i := range nt.Partitions {
			nt.Partitions[i].TopicID = rt.id
		}
	}
	oldLen := len(nt.Partitions)
	parts := sortedPartitions(rt.partitions, oldLen)
	nt.grow(parts)

	var events []Event
	for _, rp := range parts {
		i := int(rp.partition)
		if i >= oldLen {
			nt.Partitions[i] = partitionFrom(nt.Name, nt.ID, rp)
			events = append(events, event(PartitionAdded, FromMetadata, placeholder(nt.Name, nt.ID, rp.partition), nt.Partitions[i]))
			continue
		}
		np, rewinds, kind := mergePartition(nt.Partitions[i], nt.rewinds[i], rp, n)
		if kind != 0 {
			events = append(events, event(kind, FromMetadata, nt.Partitions[i], np))
		}
		nt.Partitions[i] = np
		nt.rewinds[i] = rewinds
	}
	return nt, events
}

// mergePartition applies rules 1-4 to one partition. It returns the new
// partition, the new rewind count and the kind of event, 0 for none.
func mergePartition(old Partition, rewinds int, rp respPartition, n int) (Partition, int, EventKind) {
	cand := old
	cand.Leader = rp.leader
	cand.LeaderEpoch = rp.epoch
	cand.Replicas = rp.replicas
	cand.ISR = rp.isr
	cand.OfflineReplicas = rp.offline
	changed := cand.Leader != old.Leader || cand.LeaderEpoch != old.LeaderEpoch

	switch {
	case rp.epoch < 0 && old.LeaderEpoch >= 0:
		return old, rewinds, 0 // rule 1
	case rp.epoch < 0, old.LeaderEpoch < 0, rp.epoch >= old.LeaderEpoch:
		if changed {
			return cand, 0, LeaderChanged // rules 1 (nothing known), 2, 3
		}
		return cand, 0, 0
	}
	rewinds++ // rule 4
	if n > 0 && rewinds >= n {
		return cand, 0, EpochRewound
	}
	return old, rewinds, 0
}

func mergeTopicError(old *topicState, rt respTopic, n int) (*topicState, []Event) {
	if old != nil && len(old.Partitions) == 0 && old.missing > 0 && old.returns == 0 && old.Err == rt.err {
		// Called unknown again with nothing to remove (a tombstone, or a
		// topic never answered with partitions): missing counts toward
		// removing partitions and nothing else reads it, returns has no
		// count to end. Counting on would clone the entry for nothing,
		// every tombstone once per all-topics answer.
		return old, nil
	}
	var nt *topicState
	if old == nil {
		nt = &topicState{Topic: Topic{Name: rt.name, ID: rt.id}}
	} else {
		nt = old.clone()
	}
	nt.Err = rt.err
	if !errors.Is(rt.err, errors.ErrUnknownTopicOrPartition) && !errors.Is(rt.err, errors.ErrUnknownTopicID) {
		nt.missing = 0
		return nt, nil
	}
	nt.missing++
	nt.returns = 0
	if n <= 0 || nt.missing < n || len(nt.Partitions) == 0 {
		return nt, nil
	}
	events := make([]Event, 0, len(nt.Partitions))
	for _, p := range nt.Partitions {
		gone := p
		gone.Leader, gone.LeaderEpoch = -1, -1
		events = append(events, event(PartitionRemoved, FromMetadata, p, gone))
	}
	nt.floors = make([]int32, len(nt.Partitions))
	for i, p := range nt.Partitions {
		nt.floors[i] = p.LeaderEpoch
	}
	nt.Partitions, nt.rewinds = nil, nil
	return nt, events
}

// removing reports whether the topic is on its way to rule 8's removal:
// partitions cached, and answered unknown fewer than n times in a row. The
// refresher asks again (ReasonUnsettled) until it is settled either way, so
// that a deleted topic is known gone within the backoff's few round trips,
// not n periodic refreshes (MaxAge each) later: until then Produce takes
// records for it that can only fail at their delivery timeout.
func (t *topicState) removing(n int) bool {
	return n > 0 && t.missing > 0 && t.missing < n && len(t.Partitions) > 0
}

// holdReturn applies rule 8's floor to an answer naming a removed topic:
// it reports whether the answer is held back (and the topic returned with
// the count), because it names the removed partitions' topic ID with a
// partition below the epoch it had, fewer than n times in a row.
func (t *topicState) holdReturn(rt respTopic, n int) (bool, *topicState) {
	if len(t.floors) == 0 || t.ID.IsZero() || rt.id != t.ID {
		return false, t
	}
	below := false
	for _, rp := range rt.partitions {
		if i := int(rp.partition); i >= 0 && i < len(t.floors) && rp.epoch >= 0 && rp.epoch < t.floors[i] {
			below = true
		}
	}
	if !below {
		return false, t
	}
	c := *t
	c.returns++
	if n > 0 && c.returns >= n {
		return false, &c
	}
	return true, &c
}

// freshTopic builds a topic seen for the first time (or again, after its
// partitions were removed), or a new incarnation.
func freshTopic(old *topicState, rt respTopic, recreated bool) (*topicState, []Event) {
	nt := &topicState{Topic: Topic{Name: rt.name, ID: rt.id, Internal: rt.internal}}
	if old != nil {
		if rt.id.IsZero() {
			nt.ID = old.ID
		}
		nt.reported, nt.moves = old.reported, old.moves
	}
	parts := sortedPartitions(rt.partitions, 0)
	nt.grow(parts)
	for i := range nt.Partitions {
		nt.Partitions[i] = placeholder(nt.Name, nt.ID, int32(i))
	}
	kind := PartitionAdded
	if recreated {
		kind = TopicRecreated
	}
	answered := make([]bool, len(nt.Partitions))
	for _, rp := range parts {
		nt.Partitions[rp.partition] = partitionFrom(nt.Name, nt.ID, rp)
		answered[rp.partition] = true
	}
	var events []Event
	for i, np := range nt.Partitions {
		prev := placeholder(nt.Name, nt.ID, int32(i))
		if recreated && i < len(old.Partitions) {
			prev = old.Partitions[i]
		}
		// Every partition of a new incarnation is reported, even one the
		// answer skipped; a first sighting reports what was answered.
		if answered[i] || recreated {
			events = append(events, event(kind, FromMetadata, prev, np))
		}
	}
	if recreated {
		for i := len(nt.Partitions); i < len(old.Partitions); i++ {
			p := old.Partitions[i]
			gone := p
			gone.TopicID = nt.ID
			gone.Leader, gone.LeaderEpoch = -1, -1
			events = append(events, event(PartitionRemoved, FromMetadata, p, gone))
		}
	}
	return nt, events
}

// applyHint applies a KIP-951 CurrentLeader hint: adopted only if the topic
// and partition are cached, the hint names a leader and an epoch, and the
// epoch is newer than the cached one.
func applyHint(prev *state, topic string, id TopicID, partition, leader, epoch int32) (*state, *Event) {
	t := prev.topics[topic]
	if t == nil || partition < 0 || int(partition) >= len(t.Partitions) || leader < 0 || epoch < 0 {
		return prev, nil
	}
	if !id.IsZero() && !t.ID.IsZero() && id != t.ID {
		// About another incarnation than the cached one (a request sent
		// before the topic was recreated, or answered by a broker still
		// serving the old topic): its epochs are not this topic's.
		return prev, nil
	}
	old := t.Partitions[partition]
	if old.LeaderEpoch >= 0 && epoch <= old.LeaderEpoch {
		return prev, nil
	}
	nt := t.clone()
	np := old
	np.Leader, np.LeaderEpoch = leader, epoch
	nt.Partitions[partition] = np
	nt.rewinds[partition] = 0

	next := *prev
	next.topics = make(map[string]*topicState, len(prev.topics))
	for name, ts := range prev.topics {
		next.topics[name] = ts
	}
	next.topics[topic] = nt
	ev := event(LeaderChanged, FromHint, old, np)
	return &next, &ev
}

// observe records that broker (-1: not known) answered id for the topic:
// if it last answered another ID, it moved from that one to id. It returns
// t itself when nothing is new.
func (t *topicState) observe(broker int32, id TopicID) *topicState {
	if broker < 0 || id.IsZero() {
		return t
	}
	last := t.reported[broker]
	if last == id {
		return t
	}
	c := *t
	c.reported = make(map[int32]TopicID, len(t.reported)+1)
	for b, x := range t.reported {
		c.reported[b] = x
	}
	c.reported[broker] = id
	if !last.IsZero() && !slices.Contains(t.moves, idMove{last, id}) {
		c.moves = append(slices.Clone(t.moves), idMove{last, id})
		if len(c.moves) > maxMoves {
			c.moves = c.moves[len(c.moves)-maxMoves:]
		}
	}
	return &c
}

// retired reports whether a broker was seen moving away from id.
func (t *topicState) retired(id TopicID) bool {
	return slices.ContainsFunc(t.moves, func(m idMove) bool { return m.from == id })
}

// shownNewer reports whether brokers' moves lead from the cached ID to id.
func (t *topicState) shownNewer(id TopicID) bool {
	seen := map[TopicID]bool{t.ID: true}
	frontier := []TopicID{t.ID}
	for len(frontier) > 0 {
		from := frontier[0]
		frontier = frontier[1:]
		for _, m := range t.moves {
			if m.from != from || seen[m.to] {
				continue
			}
			if m.to == id {
				return true
			}
			seen[m.to] = true
			frontier = append(frontier, m.to)
		}
	}
	return false
}

// challenge counts one more consecutive answer naming id instead of the
// cached ID (zero: an answer naming the cached ID, which ends the count).
func (t *topicState) challenge(id TopicID) *topicState {
	switch {
	case id.IsZero() && t.challenger.IsZero():
		return t
	case id.IsZero():
		c := *t
		c.challenger, c.challenges = TopicID{}, 0
		return &c
	}
	c := *t
	if c.challenger != id {
		c.challenger, c.challenges = id, 0
	}
	c.challenges++
	return &c
}

func (t *topicState) clone() *topicState {
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	c.rewinds = slices.Clone(t.rewinds)
	if len(c.rewinds) < len(c.Partitions) {
		c.rewinds = append(c.rewinds, make([]int, len(c.Partitions)-len(c.rewinds))...)
	}
	return &c
}

// grow extends the partition slices to cover every partition in parts.
func (t *topicState) grow(parts []respPartition) {
	size := len(t.Partitions)
	for _, rp := range parts {
		if int(rp.partition)+1 > size {
			size = int(rp.partition) + 1
		}
	}
	for i := len(t.Partitions); i < size; i++ {
		t.Partitions = append(t.Partitions, placeholder(t.Name, t.ID, int32(i)))
	}
	for len(t.rewinds) < size {
		t.rewinds = append(t.rewinds, 0)
	}
}

// sortedPartitions returns the usable partitions of an answer, sorted by
// number: negative numbers and repeats (the first is kept) are dropped, and
// so is any number at or above both the count of distinct partitions listed
// and known, the count the cache already holds. Kafka numbers a topic's
// partitions from 0 and lists every one it knows, so such a number is no
// partition; grown to, it would give the topic a partition count it does
// not have (partition 2147483647: two billion placeholders, the process's
// memory). A broker that lists fewer partitions than are cached (behind an
// addition, rule 7) still has every one it lists applied.
func sortedPartitions(ps []respPartition, known int) []respPartition {
	out := make([]respPartition, 0, len(ps))
	seen := make(map[int32]bool, len(ps))
	for _, p := range ps {
		if p.partition < 0 || seen[p.partition] {
			continue
		}
		seen[p.partition] = true
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].partition < out[j].partition })
	limit := max(known, len(out))
	for len(out) > 0 && int(out[len(out)-1].partition) >= limit {
		out = out[:len(out)-1]
	}
	return out
}

func placeholder(topic string, id TopicID, partition int32) Partition {
	return Partition{Topic: topic, TopicID: id, Partition: partition, Leader: -1, LeaderEpoch: -1}
}

func partitionFrom(topic string, id TopicID, rp respPartition) Partition {
	return Partition{
		Topic: topic, TopicID: id, Partition: rp.partition,
		Leader: rp.leader, LeaderEpoch: rp.epoch,
		Replicas: rp.replicas, ISR: rp.isr, OfflineReplicas: rp.offline,
	}
}

func event(kind EventKind, src Source, prev, next Partition) Event {
	return Event{
		Kind: kind, Source: src,
		Topic: next.Topic, TopicID: next.TopicID, Partition: next.Partition,
		PrevLeader: prev.Leader, PrevLeaderEpoch: prev.LeaderEpoch,
		Leader: next.Leader, LeaderEpoch: next.LeaderEpoch,
	}
}

// lookup returns the partition and, if it has no usable leader or is not
// cached, why.
func (s *state) lookup(topic string, partition int32) (Partition, error) {
	t := s.topics[topic]
	if t == nil || partition < 0 || int(partition) >= len(t.Partitions) {
		err := error(errors.ErrUnknownTopicOrPartition)
		if t != nil && t.Err != nil && len(t.Partitions) == 0 {
			err = t.Err
		}
		return placeholder(topic, TopicID{}, partition), err
	}
	p := t.Partitions[partition]
	if p.Leader < 0 {
		return p, errors.ErrLeaderNotAvailable
	}
	return p, nil
}

func (s *state) topic(name string) (Topic, error) {
	t := s.topics[name]
	if t == nil {
		return Topic{Name: name}, errors.ErrUnknownTopicOrPartition
	}
	if len(t.Partitions) == 0 {
		err := t.Err
		if err == nil {
			err = errors.ErrUnknownTopicOrPartition
		}
		return t.Topic, err
	}
	return t.Topic, nil
}
