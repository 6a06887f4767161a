package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/batch"
)

// TestStaleAnswerKeepsTheAwaitedOne: a stale Fetch answer with data (a fetch to the old leader whose answer
// had already arrived, and was being decoded, when the partition moved on
// to another broker: cancelLocked cannot undo an answer received) is
// handled after the answer the machine waits for was buffered. It must not
// replace that buffered answer: the machine would wait for its
// FetchCompleted forever, and the partition would never be fetched again.
func TestStaleAnswerKeepsTheAwaitedOne(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := New(SeedBrokers(c.ListenAddrs()...), FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	if err := cons.Assign(Assignment{Topic: "t", Partition: 0, Start: At(0)}); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	var p *part
	for {
		cons.mu.Lock()
		p = cons.parts[tp]
		if p.buf != nil {
			break // the mutex stays held: the current answer is buffered
		}
		cons.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("no answer was buffered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	current := p.buf.req

	// The stale answer: records 0..4 of an earlier fetch (request id 1 is
	// long superseded), from another broker's fetch loop.
	b := batch.NewBuilder(nil)
	b.Reset(batch.DefaultSpec())
	for i := range 5 {
		if err := b.Append(time.Now().UnixMilli(), nil, fmt.Appendf(nil, "v%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.RecordBatches = raw
	var it batch.Iterator
	old := &fetcher{c: cons, id: (c.LeaderFor("t", 0) + 1) % 3}
	d := cons.decode(&it, tp, &rp, 0)
	old.answerLocked(inflight{p: p, req: current - 1}, &rp, 16, d)
	cons.mu.Unlock()

	var got int
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	for got < 10 {
		f, err := cons.Poll(pctx)
		if err != nil {
			break
		}
		got += len(f.Records)
	}
	if got != 10 {
		t.Fatalf("polled %d records of 10 after a stale answer; partition: %s", got, DebugPartition(cons, "t", 0))
	}
}
