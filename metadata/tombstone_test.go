package metadata

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
)

// cstep is one answer merged and then compacted, as a round trip does.
type cstep struct {
	in     *response
	wanted []string // the topics watched
	events []ev
	live   []string // cached topics with partitions
	tombs  []string // tombstones, oldest first
	other  []string // cached topics with no partitions that are no tombstone
	after  []le
	floors map[string][]int32
}

// entries lists a state's cached topics: with partitions, tombstones
// (oldest first) and the rest.
func entries(s *state) (live, tombs, other []string) {
	for name, t := range s.topics {
		switch {
		case len(t.Partitions) > 0:
			live = append(live, name)
		case t.tomb != 0:
			tombs = append(tombs, name)
		default:
			other = append(other, name)
		}
	}
	sort.Strings(live)
	sort.Strings(other)
	sort.Slice(tombs, func(i, j int) bool { return s.topics[tombs[i]].tomb < s.topics[tombs[j]].tomb })
	return live, tombs, other
}

func TestCompact(t *testing.T) {
	const N = 2
	A, B := id(0xA), id(0xB)
	unknown := terr("t", errors.ErrUnknownTopicOrPartition)
	watched := []string{"t"}
	created := cstep{in: from(1, answer(tp("t", A, p(0, 1, 5), p(1, 2, 7)))), wanted: watched, live: []string{"t"},
		events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}, {PartitionAdded, "t", 1, -1, -1, 2, 7}}}
	removed := []cstep{
		created,
		{in: answer(unknown), wanted: watched, events: []ev{}, live: []string{"t"}},
		{in: answer(unknown), wanted: watched, events: []ev{{PartitionRemoved, "t", 0, 1, 5, -1, -1}, {PartitionRemoved, "t", 1, 2, 7, -1, -1}}, other: []string{"t"}},
		// released: only its ID and floors are kept
		{in: answer(), events: []ev{}, tombs: []string{"t"}, floors: map[string][]int32{"t": {5, 7}}},
	}
	tests := []struct {
		name  string
		n     int // Confirmations; 0: N
		limit int
		steps []cstep
	}{
		{
			name:  "a removed topic nobody watches becomes a tombstone of its ID and epoch floors",
			limit: 10,
			steps: removed,
		},
		{
			name:  "a lagging broker's answer naming a tombstone's ID below its floors leaves it removed",
			limit: 10,
			steps: append(slices.Clone(removed),
				cstep{in: answer(tp("t", A, p(0, 1, 4), p(1, 2, 7))), events: []ev{}, tombs: []string{"t"}, after: []le{{"t", 0, -1, -1}}, floors: map[string][]int32{"t": {5, 7}}},
				// absent from an all-topics answer: still the same tombstone
				cstep{in: allAnswer(), events: []ev{}, tombs: []string{"t"}, floors: map[string][]int32{"t": {5, 7}}},
				cstep{in: answer(tp("t", A, p(0, 1, 4), p(1, 2, 7))), events: []ev{}, tombs: []string{"t"}, after: []le{{"t", 0, -1, -1}}},
				// named again at its floors: back at once, epochs kept
				cstep{in: answer(tp("t", A, p(0, 1, 5), p(1, 2, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}, {PartitionAdded, "t", 1, -1, -1, 2, 7}}, live: []string{"t"}, after: []le{{"t", 0, 1, 5}}},
			),
		},
		{
			name:  "a tombstone's floors hold until N answers in a row name its ID below them",
			limit: 10,
			steps: append(slices.Clone(removed),
				cstep{in: answer(tp("t", A, p(0, 1, 4), p(1, 2, 7))), events: []ev{}, tombs: []string{"t"}, floors: map[string][]int32{"t": {5, 7}}},
				cstep{in: answer(tp("t", A, p(0, 1, 4), p(1, 2, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 4}, {PartitionAdded, "t", 1, -1, -1, 2, 7}}, live: []string{"t"}, after: []le{{"t", 0, 1, 4}}},
			),
		},
		{
			name:  "a tombstone's topic recreated under a new ID is a new incarnation",
			limit: 10,
			steps: append(slices.Clone(removed),
				// the broker that named A names B: shown newer
				cstep{in: from(1, answer(tp("t", B, p(0, 3, 0)))), events: []ev{{TopicRecreated, "t", 0, -1, -1, 3, 0}}, live: []string{"t"}, after: []le{{"t", 0, 3, 0}}},
			),
		},
		{
			name:  "a tombstone's new ID from a broker not heard from is adopted after N answers",
			limit: 10,
			steps: append(slices.Clone(removed),
				cstep{in: from(2, answer(tp("t", B, p(0, 3, 0)))), events: []ev{}, tombs: []string{"t"}},
				cstep{in: answer(tp("t", B, p(0, 3, 0))), events: []ev{{TopicRecreated, "t", 0, -1, -1, 3, 0}}, live: []string{"t"}, after: []le{{"t", 0, 3, 0}}},
			),
		},
		{
			name:  "a removed topic is kept while watched, whatever the limit",
			limit: 0,
			steps: []cstep{
				created,
				{in: answer(unknown), wanted: watched, events: []ev{}, live: []string{"t"}},
				{in: answer(unknown), wanted: watched, events: []ev{{PartitionRemoved, "t", 0, 1, 5, -1, -1}, {PartitionRemoved, "t", 1, 2, 7, -1, -1}}, other: []string{"t"}},
				{in: answer(unknown), wanted: watched, events: []ev{}, other: []string{"t"}, floors: map[string][]int32{"t": {5, 7}}},
				{in: answer(unknown), events: []ev{}},
			},
		},
		{
			name:  "tombstones beyond the limit are dropped oldest first",
			n:     1,
			limit: 2,
			steps: []cstep{
				{in: answer(tp("a", A, p(0, 1, 1)), tp("b", B, p(0, 1, 2)), tp("c", id(0xC), p(0, 1, 3)), tp("d", id(0xD), p(0, 1, 4))), wanted: []string{"a", "b", "c", "d"},
					events: []ev{{PartitionAdded, "a", 0, -1, -1, 1, 1}, {PartitionAdded, "b", 0, -1, -1, 1, 2}, {PartitionAdded, "c", 0, -1, -1, 1, 3}, {PartitionAdded, "d", 0, -1, -1, 1, 4}},
					live:   []string{"a", "b", "c", "d"}},
				{in: answer(terr("b", errors.ErrUnknownTopicOrPartition), terr("d", errors.ErrUnknownTopicOrPartition)), wanted: []string{"a", "c"},
					events: []ev{{PartitionRemoved, "b", 0, 1, 2, -1, -1}, {PartitionRemoved, "d", 0, 1, 4, -1, -1}},
					live:   []string{"a", "c"}, tombs: []string{"b", "d"}},
				{in: answer(terr("a", errors.ErrUnknownTopicOrPartition)), wanted: []string{"c"},
					events: []ev{{PartitionRemoved, "a", 0, 1, 1, -1, -1}},
					live:   []string{"c"}, tombs: []string{"d", "a"}},
				// a topic never answered with partitions, released
				{in: answer(terr("x", errors.ErrUnknownTopicOrPartition)), wanted: []string{"c", "x"}, events: []ev{}, live: []string{"c"}, tombs: []string{"d", "a"}, other: []string{"x"}},
				{in: answer(), wanted: []string{"c"}, events: []ev{}, live: []string{"c"}, tombs: []string{"a", "x"}},
				// a dropped tombstone's topic is a first sighting again
				{in: answer(tp("b", B, p(0, 1, 0))), wanted: []string{"c"}, events: []ev{{PartitionAdded, "b", 0, -1, -1, 1, 0}}, live: []string{"b", "c"}, tombs: []string{"a", "x"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.n
			if n == 0 {
				n = N
			}
			st := emptyState()
			for i, s := range tt.steps {
				next, events := merge(st, s.in, n)
				before := deepCopy(next)
				next = compact(next, func(name string) bool { return slices.Contains(s.wanted, name) }, tt.limit)
				if !reflect.DeepEqual(deepCopy(before), before) {
					t.Fatalf("step %d: compact modified its input state", i)
				}
				st = next
				if got := short(events); !reflect.DeepEqual(got, s.events) {
					t.Fatalf("step %d events:\n got %v\nwant %v", i, got, s.events)
				}
				live, tombs, other := entries(st)
				if !slices.Equal(live, s.live) || !slices.Equal(tombs, s.tombs) || !slices.Equal(other, s.other) {
					t.Fatalf("step %d: live %v, tombstones %v, other %v; want %v, %v, %v", i, live, tombs, other, s.live, s.tombs, s.other)
				}
				for _, want := range s.after {
					got, _ := st.lookup(want.topic, want.partition)
					if got.Leader != want.leader || got.LeaderEpoch != want.epoch {
						t.Fatalf("step %d: %s[%d] = leader %d epoch %d, want %d %d", i, want.topic, want.partition, got.Leader, got.LeaderEpoch, want.leader, want.epoch)
					}
				}
				for _, name := range s.tombs {
					if _, err := st.topic(name); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
						t.Fatalf("step %d: tombstone %s reads %v, want unknown", i, name, err)
					}
				}
				for name, want := range s.floors {
					if got := st.topics[name].floors; !slices.Equal(got, want) {
						t.Fatalf("step %d: %s floors %v, want %v", i, name, got, want)
					}
				}
			}
		})
	}
}

func (f *fakeCluster) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.topics, name)
}

// A client that sees many topics created and deleted (a regex subscription
// over short-lived topics) keeps a bounded cache: each deleted topic is
// kept as a tombstone, and tombstones beyond the limit are dropped.
func TestRefresherTombstonesBounded(t *testing.T) {
	const limit, perRound = 10, 7
	r, fc, _ := newTestRefresher(t, Backoff(0, 0), Confirmations(1), tombstoneLimit(limit))
	defer r.WatchAll()()
	for round := 1; round <= 5; round++ {
		var names []string
		for i := range perRound {
			name := fmt.Sprintf("r%d-t%d", round, i)
			names = append(names, name)
			fc.set(name, TopicID{byte(round), byte(i), 1}, fakePartition{leader: 1, epoch: 3})
		}
		if err := r.Refresh(ctxBg, 0); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if _, err := r.Topic(name); err != nil {
				t.Fatalf("round %d: %s: %v", round, name, err)
			}
			fc.remove(name)
		}
		if err := r.Refresh(ctxBg, 0); err != nil {
			t.Fatal(err)
		}
		live, gone := 0, 0
		for _, ts := range r.cur.Load().topics {
			if len(ts.Partitions) > 0 {
				live++
			} else {
				gone++
			}
		}
		if live != 0 || gone > limit {
			t.Fatalf("after round %d: %d live entries, %d tombstones (bound %d)", round, live, gone, limit)
		}
		// the latest round's are among the tombstones kept
		for _, name := range names {
			if _, err := r.Topic(name); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
				t.Fatalf("round %d: deleted %s reads %v", round, name, err)
			}
			if ts := r.cur.Load().topics[name]; ts == nil || !slices.Equal(ts.floors, []int32{3}) {
				t.Fatalf("round %d: deleted %s is no tombstone with its floor: %+v", round, name, ts)
			}
		}
	}
}

// A watched topic the cache holds no partition of (removed) is refreshed
// when watched again; released, it becomes a tombstone.
func TestRefresherWatchRemovedTopic(t *testing.T) {
	r, fc, _ := newTestRefresher(t, Backoff(0, 0), Confirmations(1))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 4})
	unwatch := r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	fc.remove("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if ts := r.cur.Load().topics["t"]; ts == nil || len(ts.Partitions) != 0 || ts.tomb != 0 {
		t.Fatalf("watched deleted topic: %+v, want removed, no tombstone", ts)
	}
	unwatch()
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	if ts := r.cur.Load().topics["t"]; ts == nil || ts.tomb == 0 || ts.ID != id(1) {
		t.Fatalf("released deleted topic: %+v, want a tombstone", ts)
	}
	fc.set("t", id(2), fakePartition{leader: 2, epoch: 0})
	n := fc.callCount()
	defer r.Watch("t")()
	fc.waitCalls(t, n+1) // watched again: asked about at once
	waitFor(t, func() bool { tp, err := r.Topic("t"); return err == nil && tp.ID == id(2) })
}

// A topic released while it existed and deleted afterwards (a regex
// subscription that stops watching a topic once its own listing lacks it,
// a consumer whose partitions of it were revoked) is asked about by the
// periodic refresh, not by other round trips, and asked again until its
// removal is confirmed: then only a tombstone of it is kept. Without that
// it kept its partitions cached for good.
func TestRefresherReleasedTopicFoundGone(t *testing.T) {
	r, fc, clock := newTestRefresher(t, Backoff(0, 0), Confirmations(3), MaxAge(time.Minute))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 4})
	fc.set("w", id(2), fakePartition{leader: 1, epoch: 0})
	defer r.Watch("w")()
	unwatch := r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	unwatch()
	fc.remove("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	last := func() fakeCall { return fc.call(fc.callCount() - 1) }
	if got := last().topics; !slices.Equal(got, []string{"w"}) {
		t.Fatalf("a triggered round trip asked for %v, want only the watched topic", got)
	}
	n := fc.callCount()
	clock.Advance(time.Minute)
	fc.waitCalls(t, n+3) // the periodic refresh, then until removed
	waitFor(t, func() bool { ts := r.cur.Load().topics["t"]; return ts != nil && ts.tomb != 0 })
	for i := n; i < n+3; i++ {
		if got := fc.call(i).topics; !slices.Equal(got, []string{"t", "w"}) {
			t.Fatalf("round trip %d after the release asked for %v, want [t w]", i-n, got)
		}
	}
	if ts := r.cur.Load().topics["t"]; !slices.Equal(ts.floors, []int32{4}) || ts.ID != id(1) {
		t.Fatalf("tombstone %+v, want ID 1 with floor 4", ts)
	}
	clock.Advance(time.Minute)
	fc.waitCalls(t, n+4)
	if got := fc.call(n + 3).topics; !slices.Equal(got, []string{"w"}) {
		t.Fatalf("the next periodic refresh asked for %v, want [w]: a tombstone is not asked about", got)
	}
}

// A released topic is asked about at least once per MaxAge also while
// triggered round trips keep coming more often than that (a producer's
// leaderless partition triggers one every retry backoff): each of them
// put the periodic refresh off again, and the released topic was never
// asked about, so never found gone.
func TestRefresherReleasedTopicAskedUnderTriggers(t *testing.T) {
	r, fc, clock := newTestRefresher(t, Backoff(0, 0), Confirmations(3), MaxAge(time.Minute))
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 4})
	fc.set("w", id(2), fakePartition{leader: 1, epoch: 0})
	defer r.Watch("w")()
	unwatch := r.Watch("t")
	if err := r.Refresh(ctxBg, 0); err != nil {
		t.Fatal(err)
	}
	unwatch()
	n := fc.callCount()
	for range 5 { // 150 s of round trips 30 s apart
		clock.Advance(30 * time.Second)
		if err := r.Refresh(ctxBg, ReasonWait); err != nil {
			t.Fatal(err)
		}
	}
	asked := 0
	for i := n; i < fc.callCount(); i++ {
		if slices.Contains(fc.call(i).topics, "t") {
			asked++
		}
	}
	if asked < 2 {
		t.Fatalf("in 150 s of triggered round trips the released topic was asked about %d times, want one per minute", asked)
	}
}
