package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestTopicNamesKeepTheAssignmentsID: while a topic is recreated, the
// coordinator's assignment and metadata can name two IDs for one topic
// name. The ID a KIP-848 heartbeat reports the member's partitions of that
// topic under is the one the assignment names: it was picked in map order,
// so heartbeats named the other ID about half the time, and the
// coordinator read the partitions it had assigned as released (handing a
// partition being revoked to another member before this one let go).
func TestTopicNamesKeepTheAssignmentsID(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := New(SeedBrokers(c.ListenAddrs()...), Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	unwatch := cons.meta.Watch("t")
	defer unwatch()
	if _, _, err := cons.meta.WaitForTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	now := c.TopicInfo("t").TopicID // metadata's ID
	g := cons.grp
	g.mu.Lock()
	g.topics = []string{"t"}
	g.mu.Unlock()
	for i := range 40 {
		// The assignment still names the deleted incarnation, which
		// the member resolved before.
		old := [16]byte{0xde, byte(i)}
		g.mu.Lock()
		g.nameOf[old] = "t"
		g.mu.Unlock()
		names := g.topicNames(ctx, [][16]byte{old})
		if names[old] != "t" {
			t.Fatalf("names %v", names)
		}
		if got := g.topicID("t"); got != old {
			t.Fatalf("round %d: the heartbeat names t by %x, metadata's ID (%x), not the assignment's %x", i, got, now, old)
		}
	}
}
