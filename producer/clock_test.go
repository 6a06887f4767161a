package producer

import (
	"testing"
	"time"
	"unsafe"
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

// TestRecordLayout: encoding a batch reads a record's Key and Value (its
// timestamp and headers flag travel in pending), so they must stay in the
// record's first 64 bytes, one cache line for a record allocated in the
// 128-byte size class.
func TestRecordLayout(t *testing.T) {
	var r Record
	if end := unsafe.Offsetof(r.Value) + unsafe.Sizeof(r.Value); end > 64 || unsafe.Offsetof(r.Key) > 64 {
		t.Fatalf("Key at %d, Value ends at %d: beyond the first 64 bytes", unsafe.Offsetof(r.Key), end)
	}
	if s := unsafe.Sizeof(r); s > 128 {
		t.Fatalf("Record is %d bytes, over the 128-byte size class", s)
	}
}
