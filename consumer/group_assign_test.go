package consumer

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"
)

func member(id string, topics ...string) assignMember {
	return assignMember{id: id, sub: groupSubscription{Version: 3, Topics: topics, Generation: -1}}
}

// render lists each member's partitions as "t0p1" strings.
func render(out map[string]tpSet) map[string][]string {
	r := map[string][]string{}
	for id, s := range out {
		r[id] = []string{}
		for _, tp := range s.sorted() {
			r[id] = append(r[id], fmt.Sprintf("%sp%d", tp.Topic, tp.Partition))
		}
	}
	return r
}

func checkAssign(t *testing.T, a assignor, ms []assignMember, parts map[string]int32, want map[string][]string) {
	t.Helper()
	if got := render(a.assign(ms, parts)); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", a.name(), got, want)
	}
}

// The examples of the Java assignors' documentation.
func TestRangeAssignorJavaExamples(t *testing.T) {
	parts := map[string]int32{"t0": 3, "t1": 3}
	checkAssign(t, rangeAssignor{}, []assignMember{member("C0", "t0", "t1"), member("C1", "t0", "t1")}, parts,
		map[string][]string{"C0": {"t0p0", "t0p1", "t1p0", "t1p1"}, "C1": {"t0p2", "t1p2"}})
	// 5 partitions over 3 members: 2, 2, 1.
	checkAssign(t, rangeAssignor{}, []assignMember{member("b", "t"), member("c", "t"), member("a", "t")}, map[string]int32{"t": 5},
		map[string][]string{"a": {"tp0", "tp1"}, "b": {"tp2", "tp3"}, "c": {"tp4"}})
	// Unknown topics and members without subscriptions get nothing.
	checkAssign(t, rangeAssignor{}, []assignMember{member("a", "t", "gone"), member("b")}, map[string]int32{"t": 2},
		map[string][]string{"a": {"tp0", "tp1"}, "b": {}})
}

func TestRoundRobinAssignorJavaExamples(t *testing.T) {
	parts := map[string]int32{"t0": 3, "t1": 3}
	checkAssign(t, roundRobinAssignor{}, []assignMember{member("C0", "t0", "t1"), member("C1", "t0", "t1")}, parts,
		map[string][]string{"C0": {"t0p0", "t0p2", "t1p1"}, "C1": {"t0p1", "t1p0", "t1p2"}})
	parts = map[string]int32{"t0": 1, "t1": 2, "t2": 3}
	checkAssign(t, roundRobinAssignor{}, []assignMember{member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")}, parts,
		map[string][]string{"C0": {"t0p0"}, "C1": {"t1p0"}, "C2": {"t1p1", "t2p0", "t2p1", "t2p2"}})
}

// Static members (group.instance.id) come first, ordered by instance id,
// as Java's MemberInfo orders them.
func TestMemberOrderStaticFirst(t *testing.T) {
	z, y := member("a-dyn", "t"), member("b-static", "t")
	y.instanceID = strp("zz")
	x := member("c-static", "t")
	x.instanceID = strp("aa")
	checkAssign(t, rangeAssignor{}, []assignMember{z, y, x}, map[string]int32{"t": 3},
		map[string][]string{"c-static": {"tp0"}, "b-static": {"tp1"}, "a-dyn": {"tp2"}})
}

// stickyRound runs one cooperative-sticky rebalance of a group whose
// members own prev at generation gen, and returns the assignment.
func stickyRound(ms []assignMember, prev map[string]tpSet, gen int32, parts map[string]int32) map[string]tpSet {
	in := make([]assignMember, len(ms))
	for i, m := range ms {
		m.sub.Owned = prev[m.id].group()
		m.sub.Generation = gen
		m.sub.UserData = encodeStickyGeneration(gen)
		in[i] = m
	}
	return stickyAssignor{}.assign(in, parts)
}

func loads(out map[string]tpSet) (lo, hi, total int) {
	lo = 1 << 30
	for _, s := range out {
		lo, hi, total = min(lo, len(s)), max(hi, len(s)), total+len(s)
	}
	return lo, hi, total
}

func checkValid(t *testing.T, ms []assignMember, out map[string]tpSet, parts map[string]int32) {
	t.Helper()
	seen := tpSet{}
	for _, m := range ms {
		for tp := range out[m.id] {
			if seen.has(tp) {
				t.Fatalf("%v assigned twice", tp)
			}
			seen.add(tp)
			if !subscribes(&m, tp.Topic) || tp.Partition >= parts[tp.Topic] {
				t.Fatalf("%v assigned to %s, which does not subscribe to it", tp, m.id)
			}
		}
	}
}

// A member joining a balanced group takes exactly its share, in two
// rebalances: in the first, every owner keeps all but what moves and the
// moving partitions are withheld; in the second, the newcomer gets them.
func TestCooperativeStickyJoinMovesOnlyTheShare(t *testing.T) {
	parts := map[string]int32{"t": 12}
	ms := []assignMember{member("a", "t"), member("b", "t"), member("c", "t")}
	first := stickyRound(ms, nil, -1, parts)
	if lo, hi, total := loads(first); lo != 4 || hi != 4 || total != 12 {
		t.Fatalf("fresh group: %v", render(first))
	}
	ms = append(ms, member("d", "t"))
	second := stickyRound(ms, first, 1, parts)
	checkValid(t, ms, second, parts)
	for _, id := range []string{"a", "b", "c"} {
		if len(second[id]) != 3 || len(second[id].minus(first[id])) != 0 {
			t.Fatalf("round 2: owner %s got %v; want 3 of its own %v", id, render(second)[id], render(first)[id])
		}
	}
	if len(second["d"]) != 0 {
		t.Fatalf("round 2: newcomer got %v before the owners revoked", render(second)["d"])
	}
	third := stickyRound(ms, second, 2, parts)
	checkValid(t, ms, third, parts)
	if lo, hi, total := loads(third); lo != 3 || hi != 3 || total != 12 {
		t.Fatalf("round 3: %v", render(third))
	}
	for _, id := range []string{"a", "b", "c"} {
		if !reflect.DeepEqual(third[id], second[id]) {
			t.Fatalf("round 3 moved %s's partitions: %v → %v", id, render(second)[id], render(third)[id])
		}
	}
	// Stable: another rebalance changes nothing.
	if fourth := stickyRound(ms, third, 3, parts); !reflect.DeepEqual(fourth, third) {
		t.Fatalf("round 4 not stable: %v → %v", render(third), render(fourth))
	}
}

// A member leaving: its partitions go to the others at once (nobody else
// claims them), and nothing else moves.
func TestCooperativeStickyLeave(t *testing.T) {
	parts := map[string]int32{"t": 9}
	ms := []assignMember{member("a", "t"), member("b", "t"), member("c", "t")}
	first := stickyRound(ms, nil, -1, parts)
	second := stickyRound(ms[:2], first, 1, parts)
	checkValid(t, ms[:2], second, parts)
	if lo, hi, total := loads(second); lo != 4 || hi != 5 || total != 9 {
		t.Fatalf("after leave: %v", render(second))
	}
	for _, id := range []string{"a", "b"} {
		if len(first[id].minus(second[id])) != 0 {
			t.Fatalf("%s lost partitions: %v → %v", id, render(first)[id], render(second)[id])
		}
	}
}

// Claims from an older generation are not sticky, and a partition claimed
// twice in the newest generation belongs to nobody until reassigned.
func TestCooperativeStickyClaims(t *testing.T) {
	parts := map[string]int32{"t": 4}
	a, b := member("a", "t"), member("b", "t")
	a.sub.Owned, a.sub.Generation = []topicParts{{Topic: "t", Partitions: []int32{0, 1}}}, 5
	b.sub.Owned, b.sub.Generation = []topicParts{{Topic: "t", Partitions: []int32{1, 2}}}, 5
	out := stickyAssignor{}.assign([]assignMember{a, b}, parts)
	checkValid(t, []assignMember{a, b}, out, parts)
	if !out["a"].has(TopicPartition{"t", 0}) || !out["b"].has(TopicPartition{"t", 2}) {
		t.Fatalf("sole claims not kept: %v", render(out))
	}
	// t1 is claimed by both: whoever gets it did claim it, so nothing
	// is withheld and every partition is assigned.
	if _, _, total := loads(out); total != 4 {
		t.Fatalf("double claim: %v", render(out))
	}
	// b is a generation behind: its claim on t2 is ignored for
	// stickiness, but still withholds t2 from any other member.
	b.sub.Generation = 4
	out = stickyAssignor{}.assign([]assignMember{a, b}, parts)
	checkValid(t, []assignMember{a, b}, out, parts)
	if !out["a"].has(TopicPartition{"t", 0}) || !out["a"].has(TopicPartition{"t", 1}) {
		t.Fatalf("current generation's claims not kept: %v", render(out))
	}
	if out["a"].has(TopicPartition{"t", 2}) {
		t.Fatalf("t2 given to a while b still claims it: %v", render(out))
	}
}

// Random groups with random, unequal subscriptions, run to a fixed point:
// every round is valid, a partition only changes hands through a round
// where nobody holds it, and with equal subscriptions the result is
// balanced.
func TestCooperativeStickyRandomGroups(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 200; iter++ {
		nt := 1 + rng.Intn(4)
		parts := map[string]int32{}
		var topics []string
		for i := 0; i < nt; i++ {
			tn := fmt.Sprintf("t%d", i)
			topics = append(topics, tn)
			parts[tn] = int32(1 + rng.Intn(10))
		}
		equal := rng.Intn(2) == 0
		var ms []assignMember
		for i := 0; i < 1+rng.Intn(6); i++ {
			var subs []string
			for _, tn := range topics {
				if equal || rng.Intn(2) == 0 {
					subs = append(subs, tn)
				}
			}
			ms = append(ms, member(fmt.Sprintf("m%d", i), subs...))
		}
		var prev map[string]tpSet
		gen := int32(-1)
		for round := 0; round < 20; round++ {
			// Churn: sometimes a member leaves or a new one joins.
			if round > 0 && round%5 == 0 && len(ms) > 1 && rng.Intn(2) == 0 {
				ms = ms[1:]
			} else if round%5 == 0 && rng.Intn(2) == 0 {
				ms = append(ms, member(fmt.Sprintf("n%d", round), topics...))
			}
			out := stickyRound(ms, prev, gen, parts)
			checkValid(t, ms, out, parts)
			if prev != nil {
				for id, s := range out {
					for tp := range s.minus(prev[id]) {
						for other, ps := range prev {
							if other != id && ps.has(tp) && isMember(ms, other) {
								t.Fatalf("iter %d round %d: %v moved from %s to %s without a revoke", iter, round, tp, other, id)
							}
						}
					}
				}
			}
			prev, gen = out, gen+1
			if gen == 0 {
				gen = 1
			}
		}
		if equal {
			lo, hi, _ := loads(prev)
			if hi-lo > 1 {
				t.Fatalf("iter %d: unbalanced fixed point %v", iter, render(prev))
			}
		}
	}
}

func isMember(ms []assignMember, id string) bool {
	for _, m := range ms {
		if m.id == id {
			return true
		}
	}
	return false
}

// The leader encodes each member's assignment at the member's own
// subscription version.
func TestAssignmentForMemberVersions(t *testing.T) {
	old := member("old", "t")
	old.sub.Version = 0
	fut := member("new", "t")
	fut.sub.Version = 7
	ms := []assignMember{old, fut}
	enc, err := assignmentFor(ms, rangeAssignor{}.assign(ms, map[string]int32{"t": 2}))
	if err != nil {
		t.Fatal(err)
	}
	for id, wantV := range map[string]int16{"new": 3, "old": 0} {
		a, err := decodeAssignment(enc[id])
		if err != nil || a.Version != wantV || len(a.Topics) != 1 {
			t.Fatalf("%s: %+v %v", id, a, err)
		}
	}
	var ids []string
	for id := range enc {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if !reflect.DeepEqual(ids, []string{"new", "old"}) {
		t.Fatal(ids)
	}
}
