package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Two Polls that take pieces of one answer (MaxPollRecords) and make their
// records after the lock, the later one first: the answer's Refs stay
// unpooled until both made theirs (decoded.holders), and each Poll makes
// its own records.
func TestSplitAnswerRefsHeldByEveryPoll(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
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
	for i := range 2 { // two batches, of one record each
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := New(SeedBrokers(c.ListenAddrs()...), MaxPollRecords(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	if err := cons.Assign(Assignment{Topic: "t", Partition: 0, Start: At(0)}); err != nil {
		t.Fatal(err)
	}
	var p *part
	for {
		cons.mu.Lock()
		p = cons.parts[TopicPartition{"t", 0}]
		if p.buf != nil && len(p.buf.d.spans) == 2 {
			break // the mutex stays held
		}
		cons.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("no answer with both batches was buffered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := p.buf.d
	var mk1, mk2 toMake
	f1 := cons.collectLocked(&mk1)
	f2 := cons.collectLocked(&mk2)
	cons.mu.Unlock()
	if mk1.n != 1 || mk2.n != 1 || p.buf != nil {
		t.Fatalf("pieces of %d and %d records, answer still buffered %v; want one record each, the answer over", mk1.n, mk2.n, p.buf != nil)
	}
	if got := d.holders.Load(); got != 3 {
		t.Fatalf("%d holds on the answer's Refs after both collects; want 3 (the answer's, each Poll's)", got)
	}
	cons.makeRecords(&f2, &mk2)
	if got := d.holders.Load(); got != 1 {
		t.Fatalf("%d holds after the second Poll made its records; want the first Poll's", got)
	}
	cons.makeRecords(&f1, &mk1)
	if got := d.holders.Load(); got != 0 {
		t.Fatalf("%d holds after both Polls; want none", got)
	}
	if string(f1.Records[0].Value) != "v0" || string(f2.Records[0].Value) != "v1" {
		t.Fatalf("records %q, %q; want v0, v1", f1.Records[0].Value, f2.Records[0].Value)
	}
}
