package consumer

import (
	"fmt"
	"slices"
	"sort"
)

// The classic group protocol assigns partitions on the client: the group
// leader runs the assignor the coordinator chose (the one every member
// supports, by vote) over every member's subscription. kepoch's assignors
// carry the Java client's names and read and write the same metadata, so a
// kepoch consumer can lead a group of Java consumers and follow a Java
// leader. range and roundrobin place partitions exactly as Java's do;
// cooperative-sticky gives the same guarantees (balance, stickiness, a
// moving partition revoked before it is reassigned), not necessarily the
// same placement.

// The assignor names (the Java client's), for Assignors.
const (
	// RangeAssignor assigns, per topic, consecutive partition ranges to the
	// members subscribed to it, in member order (eager).
	RangeAssignor = "range"
	// RoundRobinAssignor deals all partitions, sorted by topic and
	// partition, to the members in turn, skipping members not subscribed
	// to a partition's topic (eager).
	RoundRobinAssignor = "roundrobin"
	// CooperativeStickyAssignor keeps every partition with its owner as
	// far as balance allows and moves partitions in two rebalances: the
	// owner revokes only the partitions that move, and they are assigned
	// to their new owner in the follow-up rebalance (KIP-429).
	CooperativeStickyAssignor = "cooperative-sticky"
)

// assignor is one classic-protocol partition assignor.
type assignor interface {
	name() string
	// cooperative reports whether the assignor supports incremental
	// cooperative rebalancing (a member keeps its partitions while it
	// rejoins).
	cooperative() bool
	// userData is the subscription user data of a member at generation
	// gen.
	userData(gen int32) []byte
	// assign assigns every partition of the subscribed topics (partitions
	// gives each topic's partition count) to members.
	assign(members []assignMember, partitions map[string]int32) map[string]tpSet
}

// assignMember is one group member as the leader sees it.
type assignMember struct {
	id         string
	instanceID *string
	sub        groupSubscription
}

func assignorByName(name string) (assignor, bool) {
	switch name {
	case RangeAssignor:
		return rangeAssignor{}, true
	case RoundRobinAssignor:
		return roundRobinAssignor{}, true
	case CooperativeStickyAssignor:
		return stickyAssignor{}, true
	}
	return nil, false
}

// sortMembers orders members as Java's assignors do: members with a group
// instance id first, by instance id; then the others by member id.
func sortMembers(ms []assignMember) []assignMember {
	out := append([]assignMember(nil), ms...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.instanceID != nil && b.instanceID != nil:
			if *a.instanceID != *b.instanceID {
				return *a.instanceID < *b.instanceID
			}
			return a.id < b.id
		case a.instanceID != nil:
			return true
		case b.instanceID != nil:
			return false
		}
		return a.id < b.id
	})
	return out
}

func emptyAssignment(members []assignMember) map[string]tpSet {
	out := make(map[string]tpSet, len(members))
	for _, m := range members {
		out[m.id] = tpSet{}
	}
	return out
}

func subscribes(m *assignMember, topic string) bool {
	for _, t := range m.sub.Topics {
		if t == topic {
			return true
		}
	}
	return false
}

// subscribedTopics lists the topics any member subscribes to that have
// partitions, sorted.
func subscribedTopics(members []assignMember, partitions map[string]int32) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range members {
		for _, t := range m.sub.Topics {
			if !seen[t] && partitions[t] > 0 {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}

// --- range ---

type rangeAssignor struct{}

func (rangeAssignor) name() string          { return RangeAssignor }
func (rangeAssignor) cooperative() bool     { return false }
func (rangeAssignor) userData(int32) []byte { return nil }

func (rangeAssignor) assign(members []assignMember, partitions map[string]int32) map[string]tpSet {
	out := emptyAssignment(members)
	sorted := sortMembers(members)
	for _, t := range subscribedTopics(members, partitions) {
		var subs []string
		for i := range sorted {
			if subscribes(&sorted[i], t) {
				subs = append(subs, sorted[i].id)
			}
		}
		n, m := int(partitions[t]), len(subs)
		per, extra := n/m, n%m
		for i, id := range subs {
			start := per*i + min(i, extra)
			length := per
			if i < extra {
				length++
			}
			for p := start; p < start+length; p++ {
				out[id].add(TopicPartition{t, int32(p)})
			}
		}
	}
	return out
}

// --- roundrobin ---

type roundRobinAssignor struct{}

func (roundRobinAssignor) name() string          { return RoundRobinAssignor }
func (roundRobinAssignor) cooperative() bool     { return false }
func (roundRobinAssignor) userData(int32) []byte { return nil }

func (roundRobinAssignor) assign(members []assignMember, partitions map[string]int32) map[string]tpSet {
	out := emptyAssignment(members)
	sorted := sortMembers(members)
	next := 0
	for _, t := range subscribedTopics(members, partitions) {
		for p := int32(0); p < partitions[t]; p++ {
			for !subscribes(&sorted[next%len(sorted)], t) {
				next++
			}
			out[sorted[next%len(sorted)].id].add(TopicPartition{t, p})
			next++
		}
	}
	return out
}

// --- cooperative-sticky ---

type stickyAssignor struct{}

func (stickyAssignor) name() string              { return CooperativeStickyAssignor }
func (stickyAssignor) cooperative() bool         { return true }
func (stickyAssignor) userData(gen int32) []byte { return encodeStickyGeneration(gen) }

// assign keeps the partitions members own (as claimed by the members of
// the newest generation; a partition two of them claim is nobody's),
// deals the rest to the least loaded eligible member, then moves
// partitions from a member to an eligible one with at least two fewer
// until no such move exists — fewest moves first from partitions nobody
// owned. Finally, a partition assigned to a member that did not own it
// while another member still claims it is withheld: its owner revokes it
// first, and the follow-up rebalance assigns it (KIP-429).
func (stickyAssignor) assign(members []assignMember, partitions map[string]int32) map[string]tpSet {
	out := emptyAssignment(members)
	sorted := sortMembers(members)
	order := make(map[string]int, len(sorted))
	for i, m := range sorted {
		order[m.id] = i
	}
	eligible := map[string][]string{} // topic → members subscribed, in order
	for _, t := range subscribedTopics(members, partitions) {
		for i := range sorted {
			if subscribes(&sorted[i], t) {
				eligible[t] = append(eligible[t], sorted[i].id)
			}
		}
	}
	exists := func(tp TopicPartition) bool {
		return tp.Partition >= 0 && tp.Partition < partitions[tp.Topic] && len(eligible[tp.Topic]) > 0
	}

	maxGen := int32(-1)
	for i := range sorted {
		maxGen = max(maxGen, stickyGeneration(&sorted[i].sub))
	}
	claimedBy := map[TopicPartition][]string{} // every claim, any generation
	owner := map[TopicPartition]string{}       // valid claims
	conflict := tpSet{}
	for i := range sorted {
		m := &sorted[i]
		current := stickyGeneration(&m.sub) == maxGen
		for tp := range setOf(m.sub.Owned) {
			claimedBy[tp] = append(claimedBy[tp], m.id)
			if !current || !exists(tp) || !subscribes(m, tp.Topic) {
				continue
			}
			if _, dup := owner[tp]; dup {
				conflict.add(tp)
				continue
			}
			owner[tp] = m.id
		}
	}
	for tp := range conflict {
		delete(owner, tp)
	}
	kept := tpSet{}
	for tp, id := range owner {
		out[id].add(tp)
		kept.add(tp)
	}

	// Deal the unowned partitions, most constrained first.
	var free []TopicPartition
	for t, ms := range eligible {
		if len(ms) == 0 {
			continue
		}
		for p := int32(0); p < partitions[t]; p++ {
			if tp := (TopicPartition{t, p}); !kept.has(tp) {
				free = append(free, tp)
			}
		}
	}
	sort.Slice(free, func(i, j int) bool {
		a, b := free[i], free[j]
		if la, lb := len(eligible[a.Topic]), len(eligible[b.Topic]); la != lb {
			return la < lb
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	leastLoaded := func(ids []string) string {
		best := ""
		for _, id := range ids {
			if best == "" || len(out[id]) < len(out[best]) {
				best = id
			}
		}
		return best
	}
	for _, tp := range free {
		out[leastLoaded(eligible[tp.Topic])].add(tp)
	}

	// Balance: move one partition at a time from a member to an eligible
	// member with at least two fewer. Each move lowers the sum of squared
	// loads, so this ends.
	for {
		byLoad := append([]assignMember(nil), sorted...)
		sort.SliceStable(byLoad, func(i, j int) bool { return len(out[byLoad[i].id]) > len(out[byLoad[j].id]) })
		moved := false
		for _, over := range byLoad {
			tps := out[over.id].sorted()
			// Partitions nobody owned before move first.
			sort.SliceStable(tps, func(i, j int) bool { return !kept.has(tps[i]) && kept.has(tps[j]) })
			for _, tp := range tps {
				under := leastLoaded(eligible[tp.Topic])
				if len(out[over.id])-len(out[under]) >= 2 {
					delete(out[over.id], tp)
					out[under].add(tp)
					kept = kept.minus(tpSet{tp: {}})
					moved = true
					break
				}
			}
			if moved {
				break
			}
		}
		if !moved {
			break
		}
	}

	// Cooperative: a partition changing owner is first revoked.
	for id, tps := range out {
		for tp := range tps {
			if by := claimedBy[tp]; len(by) > 0 && !slices.Contains(by, id) {
				delete(tps, tp)
			}
		}
	}
	return out
}

// assignmentFor builds the SyncGroup assignments of a leader: each member's
// partitions, encoded at the member's own subscription version (at most 3).
func assignmentFor(members []assignMember, assigned map[string]tpSet) (map[string][]byte, error) {
	out := make(map[string][]byte, len(members))
	for _, m := range members {
		v := min(m.sub.Version, subscriptionVersion)
		a := groupAssignment{Version: v, Topics: assigned[m.id].group()}
		for _, t := range a.Topics {
			if !validGroupString(t.Topic) {
				return nil, fmt.Errorf("consumer: topic name of %d bytes", len(t.Topic))
			}
		}
		out[m.id] = a.encode(nil)
	}
	return out, nil
}
