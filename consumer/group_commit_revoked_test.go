package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// TestNoCommitOfRevokedPartition: a commit the application made
// while it owned a partition, still queued when the partition is revoked
// (the coordinator is slow to answer the commit ahead of it), must not be
// stored once the revoke callback has run. It goes with the generation it
// was made in, which the coordinator refuses (it went once with the
// generation current when it was sent, the one after the revocation, and
// was accepted).
func TestNoCommitOfRevokedPartition(t *testing.T) {
	c := newCluster(t, 1)
	createTopic(t, c, "u", 1)
	produceRange(t, c, 0, 0, 10)
	seq := 0
	m := startMember(t, c, "m", "late-commit", &seq, consumer.DisableAutoCommit(), consumer.Assignors(consumer.RangeAssignor))
	waitFor(t, 10*time.Second, "10 records", func() bool { r, _ := m.got(); return len(r) == 10 })
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	gen1 := m.cons.GroupMetadata().Generation

	syncs := countRequests(c, kmsg.SyncGroup)
	syncsBefore := syncs()
	// The coordinator holds the first OffsetCommit until released.
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		first := false
		once.Do(func() { first = true })
		if first {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	done := make(chan error, 2)
	cb := func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { done <- err }
	m.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: {Offset: 5, LeaderEpoch: 0}}, cb)
	m.cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: {Offset: 7, LeaderEpoch: 0}}, cb)

	// The application moves to topic u: t[0] is revoked.
	if err := m.cons.Subscribe("u"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "t[0] revoked", func() bool { return slices.Contains(m.log.log(), "revoked [t[0]]") })
	waitFor(t, 10*time.Second, "the next generation", func() bool { return m.cons.GroupMetadata().Generation > gen1 })
	waitFor(t, 10*time.Second, "the new generation synced", func() bool { return syncs() > syncsBefore })
	time.Sleep(300 * time.Millisecond) // the group is stable again
	close(release)
	err1, err2 := <-done, <-done
	t.Logf("generation %d → %d; commit errors: %v | %v", gen1, m.cons.GroupMetadata().Generation, err1, err2)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := m.cons.Committed(ctx, tp)
	if err != nil {
		t.Fatal(err)
	}
	if om, ok := got[tp]; ok {
		t.Fatalf("t[0] committed at %+v after its revoke callback returned (the commit was made in generation %d)", om, gen1)
	}
}
