package producer

import (
	"testing"
	"time"
)

// TestClockNow: a timestamp from the clock lies between wall-clock readings
// taken before and after it, timestamps never go backwards, and the wall
// clock is read again once clockRebase has passed.
func TestClockNow(t *testing.T) {
	var c clock
	var last time.Time
	for i := 0; i < 20000; i++ {
		before := time.Now().UnixNano()
		got := c.now()
		after := time.Now().UnixNano()
		if ns := got.UnixNano(); ns < before || ns > after {
			t.Fatalf("call %d: %v outside [%d, %d]", i, got, before, after)
		}
		if got.Before(last) {
			t.Fatalf("call %d: %v before the previous %v", i, got, last)
		}
		last = got
	}
	base := c.base.Load()
	time.Sleep(2 * clockRebase)
	c.now()
	if c.base.Load() == base {
		t.Fatal("the wall clock was not read again after clockRebase")
	}
}
