package batch

import (
	"testing"

	"github.com/kepoch/kepoch/internal/compress"
)

// TestIterateAllocs holds the iterate path to its allocation budget: once
// an Iterator's buffers have grown, decoding a fetch allocates nothing (the
// budget is one allocation per batch); with Retain, at most three per
// batch (records, headers, decompressed bytes).
func TestIterateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	for _, codec := range compress.Codecs {
		fetch := benchFetch(t, codec, 100)
		for _, tc := range []struct {
			retain   bool
			perBatch float64
		}{{false, 0}, {true, 3}} {
			var it Iterator
			o := Options{Topic: "t", Retain: tc.retain}
			run := func() {
				it.Reset(fetch, o)
				for it.Next() {
				}
				if it.Err() != nil || it.Consumed() != len(fetch) {
					t.Fatalf("%s: %v", codec, it.Err())
				}
			}
			run() // grow the buffers
			allocs := testing.AllocsPerRun(20, run)
			if perBatch := allocs / benchBatches; perBatch > tc.perBatch {
				t.Errorf("%s retain=%v: %.2f allocations per batch, budget %.0f", codec, tc.retain, perBatch, tc.perBatch)
			}
		}
	}
}
