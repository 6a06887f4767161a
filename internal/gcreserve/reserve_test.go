package gcreserve

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestLargest(t *testing.T) {
	for _, tc := range []struct {
		holds map[int]int
		want  int
	}{
		{nil, 0},
		{map[int]int{}, 0},
		{map[int]int{8: 1}, 8},
		{map[int]int{8: 3, 16: 1, 4: 2}, 16},
		{map[int]int{8: 1, 16: 0}, 8}, // a size nobody holds any more
	} {
		if got := largest(tc.holds); got != tc.want {
			t.Errorf("largest(%v) = %d, want %d", tc.holds, got, tc.want)
		}
	}
}

// TestTakeRelease: the reserve is the largest claim held, shrinks when it
// is released, is freed with the last, and a Hold releases once however
// often it is told to.
func TestTakeRelease(t *testing.T) {
	if Current() != 0 {
		t.Fatalf("reserve %d before any claim", Current())
	}
	small, big := Take(1<<20), Take(4<<20)
	if got := Current(); got != 4<<20 {
		t.Fatalf("reserve %d with claims of 1 and 4 MiB, want 4 MiB", got)
	}
	other := Take(1 << 20)
	big.Release()
	big.Release() // idempotent: must not drop another holder's claim
	if got := Current(); got != 1<<20 {
		t.Fatalf("reserve %d after the 4 MiB claim went, want 1 MiB", got)
	}
	small.Release()
	if got := Current(); got != 1<<20 {
		t.Fatalf("reserve %d with one 1 MiB claim left, want 1 MiB", got)
	}
	if small.Size() != 0 || other.Size() != 1<<20 {
		t.Fatalf("claims of %d and %d bytes after releasing the first", small.Size(), other.Size())
	}
	other.Release()
	if got := Current(); got != 0 {
		t.Fatalf("reserve %d after every claim went", got)
	}
	for _, h := range []*Hold{nil, {}, Take(0), Take(-1)} {
		h.Release()
	}
	if got := Current(); got != 0 {
		t.Fatalf("reserve %d after empty claims", got)
	}
}

// TestGCOff: with GOGC=off no reserve is taken, and the claim is a no-op.
func TestGCOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	h := Take(1 << 20)
	defer h.Release()
	if got := Current(); got != 0 || h.Size() != 0 {
		t.Fatalf("reserve %d with GOGC=off", got)
	}
}

// TestFewerCycles is the reason the package exists: allocating the same
// short-lived 1 MiB blocks (a consumer's Fetch answers) while a reserve is
// held takes far fewer collections than without one.
func TestFewerCycles(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	churn := func() uint64 {
		runtime.GC()
		before := cycles()
		for range 256 {
			sink = make([]byte, 1<<20)
			sink[0] = 1
		}
		sink = nil
		return cycles() - before
	}
	without := churn()
	h := Take(32 << 20)
	with := churn()
	h.Release()
	t.Logf("256 MiB in 1 MiB blocks: %d collections without a reserve, %d with 32 MiB", without, with)
	if with*3 > without {
		t.Fatalf("%d collections with a 32 MiB reserve, %d without: want under a third", with, without)
	}
}

var sink []byte

func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/automatic:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
