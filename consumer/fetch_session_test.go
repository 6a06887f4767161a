package consumer

import (
	"math"
	"slices"
	"testing"
)

func tps(ps ...int32) []TopicPartition {
	out := make([]TopicPartition, len(ps))
	for i, p := range ps {
		out[i] = TopicPartition{"t", p}
	}
	return out
}

func sorted(s []TopicPartition) []TopicPartition {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b TopicPartition) int { return int(a.Partition - b.Partition) })
	return s
}

func params(offset int64) fetchParams {
	return fetchParams{topicID: [16]byte{1}, offset: offset, currentLeaderEpoch: 0, lastFetchedEpoch: 0, maxBytes: 1 << 20}
}

func wantOf(offsets map[int32]int64) map[TopicPartition]fetchParams {
	w := map[TopicPartition]fetchParams{}
	for p, o := range offsets {
		w[TopicPartition{"t", p}] = params(o)
	}
	return w
}

// check compares a plan with what the request must carry.
func check(t *testing.T, step string, got plan, id, epoch int32, full bool, send, forget []TopicPartition) {
	t.Helper()
	if got.sessionID != id || got.sessionEpoch != epoch || got.full != full {
		t.Fatalf("%s: session %d epoch %d full %v; want %d %d %v", step, got.sessionID, got.sessionEpoch, got.full, id, epoch, full)
	}
	if g, w := sorted(got.send), sorted(send); !slices.Equal(g, w) {
		t.Fatalf("%s: sends %v; want %v", step, g, w)
	}
	if g, w := sorted(got.forget), sorted(forget); !slices.Equal(g, w) {
		t.Fatalf("%s: forgets %v; want %v", step, g, w)
	}
}

func TestFetchSessionFullThenIncremental(t *testing.T) {
	s := newFetchSession(true)
	want := wantOf(map[int32]int64{0: 0, 1: 0, 2: 0})
	pl := s.plan(want)
	check(t, "first", pl, 0, 0, true, tps(0, 1, 2), nil)
	s.answered(pl, want, 42)

	// Nothing changed: an incremental request naming nothing.
	pl = s.plan(want)
	check(t, "unchanged", pl, 42, 1, false, nil, nil)
	s.answered(pl, want, 42)
	pl = s.plan(want)
	check(t, "unchanged again", pl, 42, 2, false, nil, nil)
	s.answered(pl, want, 42)

	// Partition 1 got data: its new offset is re-sent, alone.
	want = wantOf(map[int32]int64{0: 0, 1: 17, 2: 0})
	pl = s.plan(want)
	check(t, "offset moved", pl, 42, 3, false, tps(1), nil)
	s.answered(pl, want, 42)
	pl = s.plan(want)
	check(t, "after offset moved", pl, 42, 4, false, nil, nil)

	// Any cached field changing re-sends the partition.
	for name, mod := range map[string]func(*fetchParams){
		"current leader epoch": func(f *fetchParams) { f.currentLeaderEpoch = 1 },
		"last fetched epoch":   func(f *fetchParams) { f.lastFetchedEpoch = 3 },
		"max bytes":            func(f *fetchParams) { f.maxBytes = 10 },
		"topic id":             func(f *fetchParams) { f.topicID = [16]byte{2} },
	} {
		w := wantOf(map[int32]int64{0: 0, 1: 17, 2: 0})
		f := w[TopicPartition{"t", 2}]
		mod(&f)
		w[TopicPartition{"t", 2}] = f
		check(t, name, s.plan(w), 42, 4, false, tps(2), nil)
	}
}

func TestFetchSessionForgetsUnwanted(t *testing.T) {
	s := newFetchSession(true)
	want := wantOf(map[int32]int64{0: 5, 1: 5, 2: 5})
	pl := s.plan(want)
	s.answered(pl, want, 7)

	// Partition 1 is buffered (or paused, or validating): forgotten.
	want = wantOf(map[int32]int64{0: 5, 2: 5})
	pl = s.plan(want)
	check(t, "forget", pl, 7, 1, false, nil, tps(1))
	s.answered(pl, want, 7)
	if _, ok := s.sent[TopicPartition{"t", 1}]; ok {
		t.Fatal("forgotten partition still in the session")
	}
	// Not forgotten twice.
	pl = s.plan(want)
	check(t, "forgotten once", pl, 7, 2, false, nil, nil)
	s.answered(pl, want, 7)

	// Back, even with the same parameters: named again.
	want = wantOf(map[int32]int64{0: 5, 1: 5, 2: 5})
	pl = s.plan(want)
	check(t, "re-added", pl, 7, 3, false, tps(1), nil)
	s.answered(pl, want, 7)

	// Everything unwanted at once, while another changes.
	want = wantOf(map[int32]int64{2: 9})
	pl = s.plan(want)
	check(t, "mixed", pl, 7, 4, false, tps(2), tps(0, 1))
	s.answered(pl, want, 7)
	if len(s.sent) != 1 || s.sent[TopicPartition{"t", 2}].offset != 9 {
		t.Fatalf("session holds %v", s.sent)
	}
}

// A plan that was never answered (the request failed) changes nothing, and
// reset starts over with a full request.
func TestFetchSessionErrorsReset(t *testing.T) {
	s := newFetchSession(true)
	want := wantOf(map[int32]int64{0: 0, 1: 0})
	pl := s.plan(want)
	s.answered(pl, want, 9)
	want = wantOf(map[int32]int64{0: 3, 1: 0})
	s.plan(want) // sent, but failed: no answered
	check(t, "retry after failure", s.plan(want), 9, 1, false, tps(0), nil)

	s.reset() // INVALID_FETCH_SESSION_EPOCH, a network error, a canceled request
	pl = s.plan(want)
	// Full, naming session 9: the broker closes it (it would otherwise
	// stay in its session cache until it aged out).
	check(t, "after reset", pl, 9, 0, true, tps(0, 1), nil)
	if len(s.sent) != 0 {
		t.Fatalf("reset kept %v", s.sent)
	}
	s.answered(pl, want, 10)
	check(t, "new session", s.plan(want), 10, 1, false, nil, nil)

	// An incremental request answered under another session id: the
	// broker's view is unknown.
	pl = s.plan(want)
	s.answered(pl, want, 11)
	check(t, "other session id", s.plan(want), 10, 0, true, tps(0, 1), nil)

	// FETCH_SESSION_ID_NOT_FOUND: the broker has no session 10 (and may
	// have given the ID to another client): a full request closing none.
	s.lost()
	check(t, "lost", s.plan(want), 0, 0, true, tps(0, 1), nil)
}

func TestFetchSessionIDZeroMeansNoSession(t *testing.T) {
	s := newFetchSession(true)
	want := wantOf(map[int32]int64{0: 0, 1: 0})
	for i := 0; i < 3; i++ {
		pl := s.plan(want)
		check(t, "full", pl, 0, 0, true, tps(0, 1), nil)
		s.answered(pl, want, 0) // the broker keeps no session
	}
	// A session that the broker closes (answers id 0 to an incremental
	// request) is over too.
	pl := s.plan(want)
	s.answered(pl, want, 5)
	pl = s.plan(want)
	check(t, "incremental", pl, 5, 1, false, nil, nil)
	s.answered(pl, want, 0)
	check(t, "closed by broker", s.plan(want), 0, 0, true, tps(0, 1), nil)
}

func TestFetchSessionDisabled(t *testing.T) {
	s := newFetchSession(false)
	want := wantOf(map[int32]int64{0: 0, 1: 0})
	for i := 0; i < 3; i++ {
		pl := s.plan(want)
		check(t, "sessionless", pl, 0, -1, true, tps(0, 1), nil)
		s.answered(pl, want, 0)
		if len(s.sent) != 0 {
			t.Fatalf("sessionless fetches remember %v", s.sent)
		}
	}
	s.reset()
	check(t, "sessionless after reset", s.plan(want), 0, -1, true, tps(0, 1), nil)
}

func TestFetchSessionEpochWraps(t *testing.T) {
	s := newFetchSession(true)
	want := wantOf(map[int32]int64{0: 0})
	pl := s.plan(want)
	s.answered(pl, want, 3)
	s.epoch = math.MaxInt32
	pl = s.plan(want)
	check(t, "max epoch", pl, 3, math.MaxInt32, false, nil, nil)
	s.answered(pl, want, 3)
	// Kafka's epochs go 1 … MaxInt32, then 1 again: never 0 (a new
	// session) nor negative (closing, or sessionless).
	check(t, "wrapped", s.plan(want), 3, 1, false, nil, nil)
}
