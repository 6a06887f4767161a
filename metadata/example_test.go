package metadata_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
)

// A partition's leader moves; the broker's NOT_LEADER_OR_FOLLOWER answer
// triggers a refresh and the subscriber sees the new leader epoch.
func ExampleRefresher() {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(2, "orders"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r := metadata.NewRefresher(cl)
	defer r.Close()
	// Subscribe before watching: the first refresh may end at once, and
	// a subscription sees only the events after it was made.
	sub := r.Subscribe("orders")
	defer sub.Close()
	defer r.Watch("orders")()

	p, err := r.WaitFor(ctx, "orders", 0, -1)
	if err != nil {
		panic(err)
	}
	t, _ := r.Topic("orders")
	fmt.Println("partitions:", len(t.Partitions), "epoch:", p.LeaderEpoch)
	added, err := sub.Next(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("events:", len(added), added[0].Kind)

	next := (p.Leader + 1) % 3
	if err := c.MoveTopicPartition("orders", 0, next); err != nil {
		panic(err)
	}
	// What a fetch to the old leader would now get:
	if reason, ok := metadata.ReasonFor(errors.ErrNotLeader); ok {
		r.Trigger(reason)
	}
	evs, err := sub.Next(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(evs[0].Kind, "epoch", evs[0].PrevLeaderEpoch, "->", evs[0].LeaderEpoch, "moved:", evs[0].Leader == next)
	// Output:
	// partitions: 2 epoch: 0
	// events: 2 partition-added
	// leader-changed epoch 0 -> 1 moved: true
}
