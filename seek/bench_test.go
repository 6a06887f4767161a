package seek

import "testing"

// BenchmarkStepBatchFetched measures the hot path: a batch accepted while
// fetching, in the same epoch as the position. It must not allocate.
func BenchmarkStepBatchFetched(b *testing.B) {
	p, req := fetchingPartition(b)
	b.ReportAllocs()
	off := p.pos.Offset
	for b.Loop() {
		p.Step(BatchFetched{Req: req, Base: off, Last: off + 99, Epoch: 7})
		off += 100
	}
}

// BenchmarkStepFetchRound is a whole fetch round: one batch, then the
// completion that emits the next Fetch action. It must not allocate.
func BenchmarkStepFetchRound(b *testing.B) {
	p, req := fetchingPartition(b)
	b.ReportAllocs()
	off := p.pos.Offset
	for b.Loop() {
		p.Step(BatchFetched{Req: req, Base: off, Last: off + 99, Epoch: 7})
		acts := p.Step(FetchCompleted{Req: req})
		req = acts[0].Fetch.Req
		off += 100
	}
}

func fetchingPartition(tb testing.TB) (*Partition, RequestID) {
	p, err := NewPartition(DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	p.Step(LeaderChanged{Leader: 1, Epoch: 7})
	acts := p.Step(Assigned{Start: At(0)})
	if len(acts) != 1 || acts[0].Kind != ActFetch {
		tb.Fatalf("want one fetch, got %v", acts)
	}
	return p, acts[0].Fetch.Req
}

// TestHotPathDoesNotAllocate pins the benchmarks' promise in the test run.
func TestHotPathDoesNotAllocate(t *testing.T) {
	p, req := fetchingPartition(t)
	off := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		p.Step(BatchFetched{Req: req, Base: off, Last: off + 9, Epoch: 7})
		acts := p.Step(FetchCompleted{Req: req})
		req = acts[0].Fetch.Req
		off += 10
	})
	if allocs != 0 {
		t.Fatalf("BatchFetched+FetchCompleted allocate %.1f times per round", allocs)
	}
	if p.pos.Offset != off {
		t.Fatalf("position %v, want offset %d", p.pos, off)
	}
}
