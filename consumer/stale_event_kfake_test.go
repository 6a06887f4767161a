package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/metadata"
)

// A metadata event from a round trip before the topic was recreated, stepped
// after the partition moved to the new incarnation (the tick loop and seeks
// read metadata as it is now, while events wait in a queue), is no second
// recreation: nothing is reported and the new topic's records go on from
// where they are, none delivered again. Stepped as it was, the event's old
// topic ID made the partition report Recreated and start over at the old
// incarnation's offsets, and the next event, with the new ID, again.
func TestStaleMetadataEventIsNoRecreation(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 20)
	cons, _ := startAt0(t, c, 20)
	old := c.TopicInfo(topic)
	if err := c.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	produce(t, c, 0, "new", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []consumer.Record
	var evs []consumer.TruncationEvent
	for len(recs) < 5 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d, events %v)", err, len(recs), evs)
		}
		recs, evs = append(recs, f.Records...), append(evs, f.Truncations...)
	}
	if len(evs) != 1 || evs[0].Kind != consumer.Recreated {
		t.Fatalf("events %v; want one Recreated", evs)
	}
	// The old incarnation's leader, as an event queued before the
	// recreation carries it.
	consumer.StepMetadataEvent(cons, metadata.Event{Kind: metadata.LeaderChanged, Topic: topic, TopicID: metadata.TopicID(old.TopicID),
		Partition: 0, PrevLeader: -1, PrevLeaderEpoch: -1, Leader: 0, LeaderEpoch: 0})
	produce(t, c, 0, "more", 3)
	var more []consumer.Record
	for len(more) < 3 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d)", err, len(more))
		}
		if len(f.Truncations) > 0 {
			t.Fatalf("a stale metadata event reported %v", f.Truncations)
		}
		more = append(more, f.Records...)
	}
	for i, r := range more {
		if r.Offset != int64(5+i) {
			t.Fatalf("record %d after the stale event at offset %d, want %d (%q)", i, r.Offset, 5+i, r.Value)
		}
	}
}
