package metadata

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/kepoch/kepoch/errors"
)

// settled merges in until the state stops moving (each step's answer is
// the same), so that what a test merges next meets counts already at rest.
func settled(t *testing.T, st *state, in *response, n int) *state {
	t.Helper()
	for range 10 {
		next, _ := merge(st, in, n)
		if next == st {
			return st
		}
		st = next
	}
	t.Fatalf("state never settled under %+v", in)
	return nil
}

// An answer that changes nothing returns the state it was merged into, so
// a Version (the producer's cached topic shape) outlives the round trip.
func TestMergeUnchangedKeepsState(t *testing.T) {
	const n = 3
	A := id(0xA)
	tests := []struct {
		name string
		base []*response // merged first
		in   *response   // then twice: the second must keep the state
	}{
		{name: "topic", in: answer(tp("t", A, p(0, 1, 5), p(1, 2, 7)))},
		{name: "topic from a broker", in: from(2, answer(tp("t", A, p(0, 1, 5))))},
		{name: "leaderless partition", in: answer(tp("t", A, withErr(p(0, 1, 5), errors.ErrLeaderNotAvailable)))},
		{name: "epoch -1 over a known epoch", base: []*response{answer(tp("t", A, p(0, 1, 5)))}, in: answer(tp("t", A, p(0, 1, -1)))},
		{name: "topic error", in: answer(terr("denied", errors.ErrTopicAuthorization))},
		{name: "unknown topic never seen", in: answer(terr("u", errors.ErrUnknownTopicOrPartition))},
		{name: "all topics with a removed one", base: []*response{allAnswer(tp("gone", A, p(0, 1, 5)), tp("t", id(1), p(0, 1, 1)))},
			in: allAnswer(tp("t", id(1), p(0, 1, 1)))},
		{name: "removed topic answered unknown", base: []*response{answer(tp("t", A, p(0, 1, 5))), answer(terr("t", errors.ErrUnknownTopicOrPartition))},
			in: answer(terr("t", errors.ErrUnknownTopicOrPartition))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := emptyState()
			for _, b := range tt.base {
				st, _ = merge(st, b, n)
			}
			st = settled(t, st, tt.in, n)
			v := Version{st}
			next, events := merge(st, tt.in, n)
			if len(events) != 0 || (Version{next}) != v {
				t.Fatalf("the same answer again made a new state (events %v)", events)
			}
		})
	}
}

// Any answer that changes something, visible or a count of the merge
// rules, makes a new state: a Version read before it is no longer current.
func TestMergeChangeMakesNewState(t *testing.T) {
	const n = 3
	A, B := id(0xA), id(0xB)
	base := func() *response { return answer(tp("t", A, p(0, 1, 5), p(1, 2, 7))) }
	tests := []struct {
		name string
		pre  []*response // merged after base settled
		in   *response
	}{
		{name: "leader", in: answer(tp("t", A, p(0, 2, 5), p(1, 2, 7)))},
		{name: "epoch", in: answer(tp("t", A, p(0, 1, 6), p(1, 2, 7)))},
		{name: "replicas", in: func() *response {
			q := p(0, 1, 5)
			q.replicas = []int32{1, 2}
			return answer(tp("t", A, q, p(1, 2, 7)))
		}()},
		{name: "isr", in: func() *response {
			q := p(0, 1, 5)
			q.isr = []int32{1}
			return answer(tp("t", A, q, p(1, 2, 7)))
		}()},
		{name: "offline", in: func() *response {
			q := p(0, 1, 5)
			q.offline = []int32{3}
			return answer(tp("t", A, q, p(1, 2, 7)))
		}()},
		{name: "partition added", in: answer(tp("t", A, p(0, 1, 5), p(1, 2, 7), p(2, 3, 1)))},
		{name: "partition error", in: answer(tp("t", A, withErr(p(0, 1, 5), errors.ErrLeaderNotAvailable), p(1, 2, 7)))},
		{name: "internal", in: func() *response {
			rt := tp("t", A, p(0, 1, 5), p(1, 2, 7))
			rt.internal = true
			return answer(rt)
		}()},
		{name: "new topic", in: answer(tp("t", A, p(0, 1, 5), p(1, 2, 7)), tp("u", B, p(0, 1, 1)))},
		{name: "topic error", in: answer(terr("t", errors.ErrTopicAuthorization))},
		{name: "brokers", in: func() *response {
			r := base()
			r.brokers = r.brokers[:1]
			return r
		}()},
		{name: "controller", in: func() *response {
			r := base()
			r.controller = 2
			return r
		}()},
		{name: "cluster id", in: func() *response {
			r := base()
			r.clusterID = "other"
			return r
		}()},
		// Counts: nothing Topic shows changes, the next answers may.
		{name: "rule 4 lower epoch counted", in: answer(tp("t", A, p(0, 1, 4), p(1, 2, 7)))},
		{name: "rule 4 count ended", pre: []*response{answer(tp("t", A, p(0, 1, 4), p(1, 2, 7)))}, in: base()},
		{name: "rule 5 broker's ID recorded", in: from(3, base())},
		{name: "rule 5c other ID counted", in: answer(tp("t", B, p(0, 1, 1)))},
		{name: "rule 5c count ended", pre: []*response{answer(tp("t", B, p(0, 1, 1)))}, in: base()},
		{name: "rule 8 unknown counted", in: answer(terr("t", errors.ErrUnknownTopicOrPartition))},
		{name: "rule 8 absence counted", in: allAnswer()},
		{name: "rule 8 count ended", pre: []*response{answer(terr("t", errors.ErrUnknownTopicOrPartition))}, in: base()},
		{name: "rule 8 return below floors counted", pre: repeatResponse(answer(terr("t", errors.ErrUnknownTopicOrPartition)), n),
			in: answer(tp("t", A, p(0, 1, 4)))},
		{name: "rule 8 return count ended", pre: append(repeatResponse(answer(terr("t", errors.ErrUnknownTopicOrPartition)), n), answer(tp("t", A, p(0, 1, 4)))),
			in: answer(terr("t", errors.ErrUnknownTopicOrPartition))},
		{name: "removed topic's error", pre: repeatResponse(answer(terr("t", errors.ErrUnknownTopicOrPartition)), n),
			in: answer(terr("t", errors.ErrUnknownTopicID))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := settled(t, emptyState(), base(), n)
			for _, r := range tt.pre {
				st, _ = merge(st, r, n)
			}
			before := deepCopy(st)
			next, _ := merge(st, tt.in, n)
			if next == st {
				t.Fatalf("answer kept the state")
			}
			if reflect.DeepEqual(deepCopy(next), before) {
				t.Fatalf("test answer changes nothing: fix the test")
			}
		})
	}
}

func repeatResponse(r *response, k int) []*response {
	out := make([]*response, k)
	for i := range out {
		out[i] = r
	}
	return out
}

// A state left unsettled (rule 5c held an ID back) is not kept by an answer
// that changes nothing else: kept, it would have the refresher ask again
// and again, each answer keeping it unsettled.
func TestMergeUnsettledNotKept(t *testing.T) {
	const n = 3
	A, B := id(0xA), id(0xB)
	st := settled(t, emptyState(), answer(tp("t", A, p(0, 1, 5))), n)
	st, _ = merge(st, answer(tp("t", B, p(0, 1, 1))), n)
	if !st.unsettled {
		t.Fatal("rule 5c left the state settled")
	}
	next, _ := merge(st, answer(), n)
	if next == st || next.unsettled {
		t.Fatalf("an answer not naming the topic kept the unsettled state (same %v, unsettled %v)", next == st, next.unsettled)
	}
}

// sameTopic must compare every field of an entry: one it skipped would let
// an answer that changed it keep the old entry, its change lost.
func TestSameTopicComparesEveryField(t *testing.T) {
	base := func() *topicState {
		return &topicState{
			Topic: Topic{Name: "t", ID: id(1), Partitions: []Partition{{Topic: "t", TopicID: id(1), Leader: 1, LeaderEpoch: 5,
				Replicas: []int32{1}, ISR: []int32{1}, OfflineReplicas: []int32{1}}}, Err: errors.ErrTopicAuthorization},
			rewinds: []int{1}, missing: 1, reported: map[int32]TopicID{1: id(1)}, moves: []idMove{{id(2), id(1)}},
			challenger: id(3), challenges: 1, floors: []int32{4}, returns: 1, tomb: 1,
		}
	}
	if !sameTopic(base(), base()) {
		t.Fatal("equal entries compare different")
	}
	// Every leaf field of topicState and of its partitions, changed one at
	// a time by reflection, so that a field added later is covered.
	var walk func(path string, v func(*topicState) reflect.Value)
	count := 0
	walk = func(path string, at func(*topicState) reflect.Value) {
		typ := at(base()).Type()
		switch {
		case typ.Kind() == reflect.Struct && typ != reflect.TypeOf(TopicID{}) && typ != reflect.TypeOf(idMove{}):
			for i := range typ.NumField() {
				walk(path+"."+typ.Field(i).Name, func(ts *topicState) reflect.Value { return at(ts).Field(i) })
			}
			return
		case typ == reflect.TypeOf([]Partition{}):
			walk(path+"[0]", func(ts *topicState) reflect.Value { return at(ts).Index(0) })
			return
		}
		count++
		b := base()
		f := at(b)
		f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem() // unexported fields too
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int32, reflect.Uint64:
			if f.CanInt() {
				f.SetInt(f.Int() + 1)
			} else {
				f.SetUint(f.Uint() + 1)
			}
		case reflect.Array:
			f.Index(0).SetUint(f.Index(0).Uint() + 1)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
		case reflect.Interface:
			f.Set(reflect.ValueOf(fmt.Errorf("other")))
		default:
			t.Fatalf("%s: kind %v not covered by this test", path, f.Kind())
		}
		if sameTopic(base(), b) {
			t.Errorf("sameTopic ignores %s", path)
		}
	}
	walk("topicState", func(ts *topicState) reflect.Value { return reflect.ValueOf(ts).Elem() })
	if count < 20 {
		t.Fatalf("only %d fields walked", count)
	}
}

// Through the refresher: a round trip answered as the one before keeps
// Version, a round trip that shows a change does not.
func TestRefresherVersionKeptWhileUnchanged(t *testing.T) {
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("all=%v", all), func(t *testing.T) {
			r, fc, _ := newTestRefresher(t, Backoff(0, 0), Confirmations(1))
			fc.set("t", id(1), fakePartition{leader: 1, epoch: 3})
			fc.set("gone", id(2), fakePartition{leader: 1, epoch: 3})
			if all {
				defer r.WatchAll()()
			} else {
				defer r.Watch("t", "gone")()
			}
			if _, err := r.WaitFor(ctxBg, "gone", 0, 3); err != nil {
				t.Fatal(err)
			}
			fc.remove("gone") // a tombstone (all) or a watched removed topic
			for range 2 {
				if err := r.Refresh(ctxBg, 0); err != nil {
					t.Fatal(err)
				}
			}
			v := r.Version()
			if err := r.Refresh(ctxBg, 0); err != nil {
				t.Fatal(err)
			}
			if r.Version() != v {
				t.Fatal("an unchanged answer changed Version")
			}
			fc.setEpoch("t", 0, 2, 4)
			if err := r.Refresh(ctxBg, 0); err != nil {
				t.Fatal(err)
			}
			if r.Version() == v {
				t.Fatal("a leader change kept Version")
			}
		})
	}
}

// An all-topics answer costs no allocation per tombstone absent from it:
// a tombstone called unknown again has nothing to gain from it (rule 8
// removes partitions, it has none).
func TestMergeTombstonesAbsentNotCloned(t *testing.T) {
	const tombs, n = 1000, 2
	st := emptyState()
	var live []respTopic
	for i := range tombs {
		live = append(live, tp(fmt.Sprintf("t%d", i), TopicID{byte(i), byte(i >> 8), 1}, p(0, 1, 5)))
	}
	st, _ = merge(st, allAnswer(live...), n)
	for range n {
		st, _ = merge(st, allAnswer(), n)
	}
	st = compact(st, func(string) bool { return false }, 4096)
	_, gone, _ := entries(st)
	if len(gone) != tombs {
		t.Fatalf("%d tombstones, want %d", len(gone), tombs)
	}
	in := allAnswer()
	var next *state
	allocs := testing.AllocsPerRun(10, func() { next, _ = merge(st, in, n) })
	if next != st {
		t.Error("an answer absent of tombstones only changed the state")
	}
	// A few for the answer's bookkeeping (the new map, the sorted names),
	// none per tombstone.
	if allocs >= tombs/10 {
		t.Fatalf("%v allocations merging an all-topics answer past %d tombstones", allocs, tombs)
	}
	t.Logf("%v allocations for %d tombstones", allocs, tombs)
}
