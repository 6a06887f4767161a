package consumer

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
)

// afterLeaderRequest reports a run of unanswered requests once, at the first
// failure bound after the run's first; an answer ends the run, and so does
// (by starting another) a failure of another broker.
func TestAfterLeaderRequest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fail := errors.New("refused")
	type step struct {
		at     time.Duration // since t0
		broker int32
		failed error
		report bool
		run    bool // a run is open after it
	}
	for _, tc := range []struct {
		name  string
		bound time.Duration
		steps []step
	}{
		{"reported once, at the bound", time.Second, []step{
			{0, 1, fail, false, true}, {500 * time.Millisecond, 1, fail, false, true},
			{time.Second, 1, fail, true, true}, {3 * time.Second, 1, fail, false, true},
		}},
		{"an answer ends the run, the next is reported again", time.Second, []step{
			{0, 1, fail, false, true}, {time.Second, 1, fail, true, true}, {2 * time.Second, 1, nil, false, false},
			{3 * time.Second, 1, fail, false, true}, {3500 * time.Millisecond, 1, fail, false, true}, {4 * time.Second, 1, fail, true, true},
		}},
		{"another leader's failure starts a new run", time.Second, []step{
			{0, 1, fail, false, true}, {900 * time.Millisecond, 2, fail, false, true}, {1500 * time.Millisecond, 2, fail, false, true},
			{1900 * time.Millisecond, 2, fail, true, true},
		}},
		{"bound 0: at the first failure", 0, []step{
			{0, 1, fail, true, true}, {time.Second, 1, fail, false, true},
		}},
	} {
		var r leaderRun
		for i, s := range tc.steps {
			var report bool
			r, report = afterLeaderRequest(r, s.broker, s.failed, t0.Add(s.at), tc.bound)
			if report != s.report || r.since.IsZero() == s.run {
				t.Errorf("%s: step %d: report %v, run %+v; want report %v, run open %v", tc.name, i, report, r, s.report, s.run)
			}
		}
	}
}
