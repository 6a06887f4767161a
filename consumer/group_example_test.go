package consumer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
)

// A group member: Subscribe lets the group assign partitions, which start
// at the group's commits (validated with their leader epochs); CommitSync
// stores what Poll returned, with the epochs.
func ExampleConsumer_Subscribe() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	defer cluster.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	for i := 0; i < 3; i++ {
		cl.ProduceSync(context.Background(), &kgo.Record{Topic: "orders", Value: []byte(fmt.Sprint("order-", i))})
	}
	cl.Close()

	cons, err := consumer.New(
		consumer.SeedBrokers(cluster.ListenAddrs()...),
		consumer.Group("billing"),
		consumer.DisableAutoCommit(),
		consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) { fmt.Println("assigned", tps) }),
		consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) { fmt.Println("revoked", tps) }),
	)
	if err != nil {
		panic(err)
	}
	if err := cons.Subscribe("orders"); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n := 0; n < 3; {
		f, err := cons.Poll(ctx)
		if err != nil {
			panic(err)
		}
		for _, r := range f.Records {
			fmt.Println(string(r.Value), "at", r.Offset, "epoch", r.LeaderEpoch)
			n++
		}
	}
	if err := cons.CommitSync(ctx, nil); err != nil {
		panic(err)
	}
	committed, _ := cons.Committed(ctx, consumer.TopicPartition{Topic: "orders", Partition: 0})
	fmt.Printf("committed %+v\n", committed[consumer.TopicPartition{Topic: "orders", Partition: 0}])
	_ = cons.Close(ctx)
	// Output:
	// assigned [orders[0]]
	// order-0 at 0 epoch 0
	// order-1 at 1 epoch 0
	// order-2 at 2 epoch 0
	// committed {Offset:3 LeaderEpoch:0 Metadata:}
	// revoked [orders[0]]
}
