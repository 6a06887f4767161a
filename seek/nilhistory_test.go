package seek

import (
	"errors"
	"fmt"
	"testing"
)

// A StartHistory whose History is nil (a Start built by hand, not by
// AtHistory) is an empty history: assigning or seeking to it steps as the
// same start with an empty history does, and it prints the same. It
// panicked in Step (the history's topic ID) and in String.
func TestStartHistoryNilIsEmpty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start Start
	}{
		{"epoch from the start", Start{Kind: StartHistory, Offset: 5, Epoch: 2}},
		{"no epoch", Start{Kind: StartHistory, Offset: 5, Epoch: NoEpoch}},
		{"offset 0", Start{Kind: StartHistory, Offset: 0, Epoch: NoEpoch}},
		{"log start", Start{Kind: StartHistory, Offset: -1, Epoch: NoEpoch}},
	} {
		for _, seekTo := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/seek=%v", tc.name, seekTo), func(t *testing.T) {
				empty := tc.start
				empty.History = NewEpochHistory(0)
				if got, want := tc.start.String(), empty.String(); got != want {
					t.Errorf("String() = %q; want %q, as with an empty history", got, want)
				}
				run := func(s Start) (string, string) {
					p, err := NewPartition(DefaultConfig())
					if err != nil {
						t.Fatal(err)
					}
					p.Step(LeaderChanged{Leader: 1, Epoch: 3})
					var ev Event = Assigned{Start: s}
					if seekTo {
						p.Step(Assigned{Start: At(0)})
						ev = Seek{Start: s}
					}
					return fmt.Sprint(p.Step(ev)), p.String()
				}
				acts, state := run(tc.start)
				wantActs, wantState := run(empty)
				if acts != wantActs || state != wantState {
					t.Errorf("stepped %v: actions %s, %s; want %s, %s, as with an empty history", tc.start.Kind, acts, state, wantActs, wantState)
				}
			})
		}
	}
}

// Every method of a nil *EpochHistory behaves as on an empty history that
// stays empty: the readers answer as for an empty one (MarshalBinary and
// AppendBinary panicked), the mutators (Observe, SetTopicID, Cut, Reset:
// they panicked) leave it nil and empty, and UnmarshalBinary, with nowhere
// to decode into, returns ErrNilHistory.
func TestNilEpochHistoryMethods(t *testing.T) {
	encoded, _ := NewEpochHistory(0).MarshalBinary()
	full, err := EpochHistoryOf([]EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 3, StartOffset: 10}}, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	encodedFull, _ := full.MarshalBinary()
	for _, tc := range []struct {
		name string
		call func(h *EpochHistory) any
		// want is the result on nil; none: the result on an empty
		// history.
		want any
	}{
		{"Size", func(h *EpochHistory) any { return h.Size() }, nil},
		{"Len", func(h *EpochHistory) any { return h.Len() }, nil},
		{"Entries", func(h *EpochHistory) any { return h.Entries() }, nil},
		{"End", func(h *EpochHistory) any { return h.End() }, nil},
		{"Dropped", func(h *EpochHistory) any { return h.Dropped() }, nil},
		{"TopicID", func(h *EpochHistory) any { return h.TopicID() }, nil},
		{"EpochOf", func(h *EpochHistory) any { e, ok := h.EpochOf(5); return fmt.Sprint(e, ok) }, nil},
		{"String", func(h *EpochHistory) any { return h.String() }, nil},
		{"Clone", func(h *EpochHistory) any { return h.Clone().String() }, nil},
		{"MarshalBinary", func(h *EpochHistory) any { b, err := h.MarshalBinary(); return fmt.Sprint(b, err) }, nil},
		{"AppendBinary", func(h *EpochHistory) any { b, err := h.AppendBinary([]byte{7}); return fmt.Sprint(b, err) }, nil},
		{"Observe", func(h *EpochHistory) any { h.Observe(2, 0, 9); return h.String() }, NewEpochHistory(0).String()},
		{"SetTopicID", func(h *EpochHistory) any { h.SetTopicID(TopicID{1}); return h.TopicID() }, TopicID{}},
		{"Cut", func(h *EpochHistory) any { h.Cut(3); return h.String() }, nil},
		{"Reset", func(h *EpochHistory) any { h.Reset(); return h.String() }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *EpochHistory
			got := fmt.Sprint(tc.call(h))
			want := fmt.Sprint(tc.want)
			if tc.want == nil {
				want = fmt.Sprint(tc.call(NewEpochHistory(0)))
			}
			if got != want {
				t.Errorf("nil.%s = %s; want %s", tc.name, got, want)
			}
			if h != nil || h.Len() != 0 || h.End() != NoOffset {
				t.Errorf("nil history not empty after %s: %v", tc.name, h)
			}
		})
	}
	for _, data := range [][]byte{encoded, encodedFull, nil} {
		var h *EpochHistory
		if err := h.UnmarshalBinary(data); !errors.Is(err, ErrNilHistory) || errors.Is(err, ErrCorruptHistory) {
			t.Errorf("nil.UnmarshalBinary(%x) = %v; want ErrNilHistory", data, err)
		}
	}
}
