package consumer

import (
	"context"
	"fmt"
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

// TestTopicNamesKeepOnlyTheAssignments: resolving an assignment's topic
// IDs with an all-topics Metadata request learned the name of every topic
// of the cluster, and every ID resolved was kept for good: a member of a
// cluster whose topics come and go (a regex subscription over short-lived
// topics) grew its maps with each. Only the assignment's IDs are kept, and
// those of topics the member still owns.
func TestTopicNamesKeepOnlyTheAssignments(t *testing.T) {
	others := make([]string, 20)
	for i := range others {
		others[i] = fmt.Sprintf("other-%d", i)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, append([]string{"t", "u"}, others...)...))
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
	g := cons.grp
	tid, uid := c.TopicInfo("t").TopicID, c.TopicInfo("u").TopicID
	sizes := func() (int, int) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.nameOf), len(g.idOf)
	}
	// Nothing learned yet: the names come from an all-topics answer.
	if names := g.topicNames(ctx, [][16]byte{tid}); names[tid] != "t" {
		t.Fatalf("names %v", names)
	}
	if n, i := sizes(); n != 1 || i != 1 {
		t.Fatalf("after resolving one ID the member keeps %d names and %d IDs, want 1 and 1", n, i)
	}
	// t still owned (being revoked) when the assignment moves to u.
	g.mu.Lock()
	g.owned = tpSet{}
	g.owned.add(TopicPartition{"t", 0})
	g.mu.Unlock()
	if names := g.topicNames(ctx, [][16]byte{uid}); names[uid] != "u" {
		t.Fatalf("names %v", names)
	}
	if got := g.topicID("t"); got != tid {
		t.Fatalf("owned t is named %x, want %x", got, tid)
	}
	if n, i := sizes(); n != 2 || i != 2 {
		t.Fatalf("with t owned and u assigned the member keeps %d names and %d IDs, want 2 and 2", n, i)
	}
	g.mu.Lock()
	g.owned = tpSet{}
	g.mu.Unlock()
	g.topicNames(ctx, [][16]byte{uid})
	if n, i := sizes(); n != 1 || i != 1 {
		t.Fatalf("after t was released the member keeps %d names and %d IDs, want 1 and 1", n, i)
	}
}
