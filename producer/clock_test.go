package producer

import (
	"testing"
	"time"
	"unsafe"
)

// TestClockNow: a timestamp from the clock lies between wall-clock readings
// taken before and after it, and timestamps never go backwards, both but
// for the clocks' rate difference (slack); the wall clock is read again
// once clockRebase has passed.
func TestClockNow(t *testing.T) {
	// Between two readings of the wall clock, c advances by the monotonic
	// clock, whose rate the wall clock's may differ from by a few hundred
	// parts per million (NTP slewing, a virtual machine's corrections):
	// nanoseconds in a clockRebase, where timestamps have milliseconds.
	// (Failed 3 runs in 30 under -race, by 7 ns, without this slack.)
	const slack = int64(50 * time.Microsecond)
	var c clock
	var last time.Time
	for i := 0; i < 20000; i++ {
		before := time.Now().UnixNano()
		got := c.now()
		after := time.Now().UnixNano()
		if ns := got.UnixNano(); ns < before-slack || ns > after+slack {
			t.Fatalf("call %d: %v outside [%d, %d] by more than %d ns", i, got, before, after, slack)
		}
		if got.UnixNano() < last.UnixNano()-slack {
			t.Fatalf("call %d: %v more than %d ns before the previous %v", i, got, slack, last)
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
