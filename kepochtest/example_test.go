package kepochtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/kepochtest"
)

// An application's test: its payments consumer must notice that an
// unclean leader election took back payments it had already processed,
// learn exactly which, and then process the new lineage once. (The body
// is what goes in your TestXxx(t *testing.T); TestUncleanElectionConsumerRewinds
// runs the same flow.)
func Example() {
	var t *testing.T // your test's t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := kepochtest.New(t, kepochtest.Topic("payments", 1))
	c.Produce(ctx, "payments", 0, "p0", "p1", "p2") // offsets 0..2
	c.Produce(ctx, "payments", 0, "p3", "p4")       // offsets 3..4, one batch

	cons, _ := consumer.New(consumer.SeedBrokers(c.Seeds()...), consumer.TruncationPolicy(consumer.PolicyEarliest))
	defer cons.Close(ctx)
	cons.Assign(consumer.Assignment{Topic: "payments", Partition: 0, Start: consumer.Earliest()})
	// ... the application processes p0..p4 ...

	tr, err := c.UncleanElection(ctx, "payments", 0, 3) // p3, p4 are gone
	if err != nil {
		t.Fatal(err)
	}
	c.Produce(ctx, "payments", 0, "r3") // the new leader's record takes offset 3
	end, _ := c.EpochEnd(ctx, "payments", 0, tr.OldEpoch)

	f, _ := cons.Poll(ctx) // (poll until the break arrives)
	for _, e := range f.Truncations {
		if e.Kind != consumer.Diverged || e.Divergent.Offset != end.EndOffset || e.Replaced.From != tr.Lost.From {
			t.Fatalf("the application was told %v; the broker says epoch %d ends at %d", e, end.LeaderEpoch, end.EndOffset)
		}
	}
	// ... assert the application compensated for p3 and p4, and processed r3 once ...
}
