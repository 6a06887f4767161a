package seek

import (
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
