package integration

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/kepoch/kepoch/metadata"
)

// brokerSessionTimeout is the controller's broker.session.timeout.ms, as
// scripts/kafka-local.sh sets it: a SIGKILLed broker is fenced after this
// long.
func brokerSessionTimeout(t *testing.T) time.Duration {
	t.Helper()
	script, err := os.ReadFile("../scripts/kafka-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`broker\.session\.timeout\.ms=(\d+)`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/kafka-local.sh sets no broker.session.timeout.ms")
	}
	ms, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestRefresherFollowsLeaderKill kills a partition's leader and checks that
// the shared refresher sees the new leader and its higher epoch within the
// broker session timeout plus one refresh, and tells subscribers.
func TestRefresherFollowsLeaderKill(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := TopicName("meta-kill")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{3, 1, 2}}, nil); err != nil {
		t.Fatal(err)
	}
	r := metadata.NewRefresher(c.Client, metadata.MaxAge(time.Second), metadata.Backoff(50*time.Millisecond, 500*time.Millisecond))
	defer r.Close()
	unwatch := r.Watch(topic)
	defer unwatch()
	before, err := r.WaitFor(ctx, topic, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if before.Leader != 3 {
		t.Fatalf("leader %d before the kill; want 3", before.Leader)
	}
	sub := r.Subscribe(topic)
	defer sub.Close()

	if err := c.Kill(ctx, 3); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The budget: fencing after the session timeout, the controller's
	// election, and one refresh (max age 1 s), with slack for two loaded
	// cores (JVMs paused by a collection, the controller's own pace).
	session := brokerSessionTimeout(t)
	wctx, wcancel := context.WithTimeout(ctx, session+1*time.Second+10*time.Second)
	defer wcancel()
	var after metadata.Partition
	for {
		after, err = r.WaitFor(wctx, topic, 0, before.LeaderEpoch+1)
		if err != nil {
			t.Fatalf("no new epoch %v after the kill: %v (stats %+v)", time.Since(killed), err, r.Stats())
		}
		if after.Leader >= 0 && after.Leader != 3 {
			break
		}
		before.LeaderEpoch = after.LeaderEpoch // leaderless interim epoch; wait for the next
	}
	seen := time.Since(killed)
	t.Logf("leader 3 killed; refresher saw leader %d epoch %d after %v (broker session timeout %v)", after.Leader, after.LeaderEpoch, seen.Round(time.Millisecond), session)

	// The cluster agrees.
	st, err := c.Describe(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != after.Leader || st.LeaderEpoch != after.LeaderEpoch {
		t.Fatalf("refresher says leader %d epoch %d; the cluster says %v", after.Leader, after.LeaderEpoch, st)
	}
	// Subscribers were told, without polling.
	evctx, evcancel := context.WithTimeout(ctx, time.Second)
	defer evcancel()
	var sawChange bool
	for !sawChange {
		evs, err := sub.Next(evctx)
		if err != nil {
			t.Fatalf("no LeaderChanged event for the new leader: %v", err)
		}
		for _, ev := range evs {
			if ev.Kind == metadata.LeaderChanged && ev.Leader == after.Leader && ev.LeaderEpoch == after.LeaderEpoch {
				sawChange = true
			}
		}
	}
}
