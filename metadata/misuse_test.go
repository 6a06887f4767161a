package metadata

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kepoch/kepoch/errors"
)

// TestOptionsValidated: no option value is refused (NewRefresher has no
// error to return): a nil clock or jitter keeps the default instead of
// making the refresher's goroutine panic at its first round trip.
func TestOptionsValidated(t *testing.T) {
	fc := newFakeCluster(newFakeClock())
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	r := NewRefresher(fc, WithClock(nil), WithJitter(nil), Confirmations(-1), Backoff(-1, -2), RequestTimeout(-1), MaxAge(-1))
	defer r.Close()
	r.Watch("t")
	for i := range 2 { // the second round trip follows the first's (jittered) backoff
		if err := r.Refresh(ctxBg, ReasonWatch); err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
	}
	if _, err := r.Lookup("t", 0); err != nil {
		t.Fatal(err)
	}
}

// TestMisuseTyped: a wait no partition can satisfy (an empty topic, a
// negative partition, a minEpoch below -1) is refused at once with an
// error matching errors.ErrInvalidArgument that names the argument and its
// value, not left to wait until ctx ends.
func TestMisuseTyped(t *testing.T) {
	r, fc, _ := newTestRefresher(t)
	fc.set("t", id(1), fakePartition{leader: 1, epoch: 0})
	var nilCtx context.Context // what a caller passing nil passes
	// Canceled: a wait that is not refused ends with ctx's error instead.
	ctx, cancel := context.WithCancel(ctxBg)
	cancel()
	for _, tc := range []struct {
		what  string
		call  func() error
		names []string
	}{
		{"WaitFor empty topic", func() error { _, err := r.WaitFor(ctx, "", 0, -1); return err }, []string{"WaitFor", "argument topic", `""`}},
		{"WaitFor negative partition", func() error { _, err := r.WaitFor(ctx, "t", -1, -1); return err }, []string{"WaitFor", "argument partition", `-1 of "t"`}},
		{"WaitFor minEpoch", func() error { _, err := r.WaitFor(ctx, "t", 0, -2); return err }, []string{"WaitFor", "argument minEpoch", "-2"}},
		{"WaitForTopic empty topic", func() error { _, _, err := r.WaitForTopic(ctx, ""); return err }, []string{"WaitForTopic", "argument topic", `""`}},
		{"WaitForPartitions empty topic", func() error { _, _, err := r.WaitForPartitions(ctx, "", 2); return err }, []string{"WaitForPartitions", "argument topic", `""`}},
		// A nil context is refused, not dereferenced (a panic).
		{"Refresh nil ctx", func() error { return r.Refresh(nilCtx, ReasonManual) }, []string{"Refresh", "argument ctx", "nil"}},
		{"WaitFor nil ctx", func() error { _, err := r.WaitFor(nilCtx, "t", 0, -1); return err }, []string{"WaitFor", "argument ctx", "nil"}},
		{"WaitForTopic nil ctx", func() error { _, _, err := r.WaitForTopic(nilCtx, "t"); return err }, []string{"WaitForTopic", "argument ctx", "nil"}},
		{"WaitForPartitions nil ctx", func() error { _, _, err := r.WaitForPartitions(nilCtx, "t", 1); return err }, []string{"WaitForPartitions", "argument ctx", "nil"}},
		{"Subscription.Next nil ctx", func() error { _, err := r.Subscribe().Next(nilCtx); return err }, []string{"Subscription.Next", "argument ctx", "nil"}},
	} {
		err := catchPanic(tc.call)
		if !errors.Is(err, errors.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an error matching ErrInvalidArgument", tc.what, err)
			continue
		}
		for _, n := range append([]string{"metadata: "}, tc.names...) {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%s: %q does not name %q", tc.what, err, n)
			}
		}
	}
}

// catchPanic returns f's error, or an error saying it panicked.
func catchPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}
