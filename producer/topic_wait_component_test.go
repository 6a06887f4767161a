package producer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/producer"
)

// leaderlessP0 answers Metadata through a real client, with partition 0 of
// every topic made leaderless (a broker down, as a cluster reports it).
type leaderlessP0 struct{ cl *kgo.Client }

func (l leaderlessP0) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, err := l.cl.Request(ctx, req)
	if m, ok := resp.(*kmsg.MetadataResponse); ok && err == nil {
		for i := range m.Topics {
			for j := range m.Topics[i].Partitions {
				p := &m.Topics[i].Partitions[j]
				if p.Partition == 0 {
					p.Leader = -1
					p.LeaderEpoch++
					p.ErrorCode = 5 // LEADER_NOT_AVAILABLE
				}
			}
		}
	}
	return resp, err
}

// leaderlessP0Refresher is a refresher for c whose answers make partition 0
// of every topic leaderless; it is closed when the test ends.
func leaderlessP0Refresher(t *testing.T, c *kfake.Cluster) *metadata.Refresher {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := metadata.NewRefresher(leaderlessP0{cl}, metadata.Backoff(10*time.Millisecond, 50*time.Millisecond))
	t.Cleanup(r.Close)
	return r
}

// A record for partition 1 of a known 3-partition topic must be accepted
// while partition 0 has no leader.
func TestProduceNotBlockedByLeaderlessPartition0(t *testing.T) {
	c := newCluster(t, 3)
	r := leaderlessP0Refresher(t, c)
	p := newProducer(t, c, producer.WithMetadata(r), producer.DisableIdempotence())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rec := &producer.Record{Topic: topic, Partition: 1, ExplicitPartition: true, Value: []byte("v")}
	if err := p.Produce(ctx, rec, nil); err != nil {
		tp, _ := r.Topic(topic)
		t.Fatalf("Produce to partition 1: %v (cached partitions: %d, p0 leader %d, p1 leader %d)",
			err, len(tp.Partitions), tp.Partitions[0].Leader, tp.Partitions[1].Leader)
	}
}

// Close must end a Produce that waits for a topic's metadata, also when the
// refresher is shared (not closed with the producer).
func TestCloseEndsProduceWaitingForTopic(t *testing.T) {
	c := newCluster(t, 3)
	r := sharedRefresher(t, c)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.WithMetadata(r))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.Produce(context.Background(), &producer.Record{Topic: "no-such-topic", Value: []byte("v")}, nil)
	}()
	time.Sleep(200 * time.Millisecond) // Produce is waiting for the topic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errors.ErrClosed) {
			t.Fatalf("Produce ended by Close: %v; want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Produce still blocked 2s after Close returned")
	}
}

// Unkeyed records go to partitions that have a leader: with partition 0
// leaderless, none is put in it (where it would wait for its delivery
// timeout), though each record's batch closes and the partition is picked
// anew.
func TestUnkeyedRecordsAvoidLeaderlessPartitions(t *testing.T) {
	c := newCluster(t, 3)
	r := leaderlessP0Refresher(t, c)
	p := newProducer(t, c, producer.WithMetadata(r), producer.RequestTimeout(500*time.Millisecond), producer.DeliveryTimeout(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := r.WaitForTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		res, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("v")})
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if res[0].Partition == 0 {
			t.Fatalf("record %d went to leaderless partition 0", i)
		}
	}
}

// A Produce to a topic that does not exist (and is not created) fails after
// MetadataWait with ErrMetadataTimeout and the broker's
// UNKNOWN_TOPIC_OR_PARTITION, instead of blocking as long as its context
// allows (forever with context.Background); ProduceSync likewise. A topic
// created within the wait is produced to.
func TestProduceUnknownTopicMetadataWait(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.MetadataWait(300*time.Millisecond))
	start := time.Now()
	err := p.Produce(context.Background(), &producer.Record{Topic: "no-such-topic", Value: []byte("v")},
		func(producer.Result) { t.Error("callback of a record never buffered") })
	if el := time.Since(start); el < 300*time.Millisecond || el > 5*time.Second {
		t.Fatalf("Produce returned after %v; want about MetadataWait (300ms)", el)
	}
	pe, ok := errors.AsType[*errors.PartitionError](err)
	if !ok || pe.Topic != "no-such-topic" || pe.Partition != -1 ||
		!errors.Is(err, errors.ErrMetadataTimeout) || !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("Produce to a missing topic: %v (%T); want a PartitionError matching ErrMetadataTimeout and ErrUnknownTopicOrPartition", err, err)
	}
	if _, err := p.ProduceSync(context.Background(), &producer.Record{Topic: "no-such-topic", Value: []byte("v")}); !errors.Is(err, errors.ErrMetadataTimeout) {
		t.Fatalf("ProduceSync to a missing topic: %v; want ErrMetadataTimeout", err)
	}
	// The caller's context still ends the wait first.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Produce(ctx, &producer.Record{Topic: "no-such-topic", Value: []byte("v")}, nil); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errors.ErrMetadataTimeout) {
		t.Fatalf("Produce with a shorter context: %v; want the context's error", err)
	}

	// A topic created while Produce waits is produced to.
	p2 := newProducer(t, c, producer.MetadataWait(10*time.Second))
	time.AfterFunc(300*time.Millisecond, func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		req := kmsg.NewCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "late-topic", 1, 1
		req.Topics = append(req.Topics, rt)
		if _, err := req.RequestWith(context.Background(), cl); err != nil {
			t.Error(err)
		}
	})
	res, err := p2.ProduceSync(testCtx(t, 15*time.Second), &producer.Record{Topic: "late-topic", Value: []byte("v")})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("ProduceSync to a topic created during the wait: %v %v", res, err)
	}
}

func TestMetadataWaitValidated(t *testing.T) {
	if _, err := producer.New(producer.SeedBrokers("127.0.0.1:1"), producer.MetadataWait(0)); !errors.Is(err, errors.ErrInvalidOption) {
		t.Fatalf("New with MetadataWait(0): %v; want ErrInvalidOption", err)
	}
}

// leaderSwitch answers Metadata through a real client with the partitions
// it is told made leaderless; every change raises every partition's leader
// epoch, so the refresher adopts it.
type leaderSwitch struct {
	cl         *kgo.Client
	mu         sync.Mutex
	leaderless map[int32]bool
	gen        int32
}

func (l *leaderSwitch) set(parts ...int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaderless = map[int32]bool{}
	for _, p := range parts {
		l.leaderless[p] = true
	}
	l.gen++
}

func (l *leaderSwitch) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, err := l.cl.Request(ctx, req)
	if m, ok := resp.(*kmsg.MetadataResponse); ok && err == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := range m.Topics {
			for j := range m.Topics[i].Partitions {
				p := &m.Topics[i].Partitions[j]
				p.LeaderEpoch += l.gen
				if l.leaderless[p.Partition] {
					p.Leader = -1
					p.ErrorCode = 5 // LEADER_NOT_AVAILABLE
				}
			}
		}
	}
	return resp, err
}

// newLeaderSwitch returns a switch (partitions leaderless at first) and a
// refresher answered through it, closed when the test ends.
func newLeaderSwitch(t *testing.T, c *kfake.Cluster, parts ...int32) (*leaderSwitch, *metadata.Refresher) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	l := &leaderSwitch{cl: cl}
	l.set(parts...)
	r := metadata.NewRefresher(l, metadata.MaxAge(100*time.Millisecond), metadata.Backoff(10*time.Millisecond, 50*time.Millisecond))
	t.Cleanup(r.Close)
	return l, r
}

// waitLeaderless waits until the refresher names no leader for part.
func waitLeaderless(t *testing.T, r *metadata.Refresher, part int32) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("partition %d leaderless", part), func() bool {
		lp, err := r.Lookup(topic, part)
		return err != nil || lp.Leader < 0
	})
	time.Sleep(50 * time.Millisecond) // the producer's metadata loop follows
}

// Unkeyed records leave a partition that loses its leader while they
// linger there: the sticky partition moves on (its batch, which no sink
// can send, is closed), so the records that follow go to a partition with
// a leader instead of waiting in the leaderless one for as long as it has
// none (until their delivery timeout).
func TestUnkeyedRecordsLeaveAPartitionThatLosesItsLeader(t *testing.T) {
	c := newCluster(t, 2)
	l, r := newLeaderSwitch(t, c, 1)
	p := newProducer(t, c, producer.WithMetadata(r), producer.Linger(2*time.Second), producer.DeliveryTimeout(time.Minute))
	ctx := testCtx(t, 20*time.Second)
	if _, _, err := r.WaitForTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	// Partition 1 has no leader: the first record sticks to partition 0,
	// where it lingers; then partition 0 loses its leader and 1 has one.
	first := sendAsync(t, ctx, p, &producer.Record{Topic: topic, Value: []byte("first")})
	l.set(0)
	waitLeaderless(t, r, 0)
	var rs []*producer.Record
	for i := range 10 {
		rs = append(rs, &producer.Record{Topic: topic, Value: []byte(fmt.Sprint("v", i))})
	}
	later := sendAsync(t, ctx, p, rs...)
	select {
	case <-later.all:
	case <-time.After(5 * time.Second):
		t.Error("records produced after partition 0 lost its leader not delivered after 5s (partition 1 has a leader)")
	}
	l.set()
	for _, res := range later.wait(10 * time.Second) {
		if res.Err != nil || res.Partition != 1 {
			t.Errorf("%s: partition %d, %v; want acknowledged in partition 1", res.Record.Value, res.Partition, res.Err)
		}
	}
	if res := first.wait(10 * time.Second)[0]; res.Err != nil || res.Partition != 0 {
		t.Fatalf("first: partition %d, %v; want acknowledged in partition 0 once it has a leader", res.Partition, res.Err)
	}
}

// An unkeyed record put in a leaderless partition (none had a leader) that
// expires there does not keep the partition sticky: once another partition
// has a leader, the next unkeyed record goes there, not to the partition
// that still has none.
func TestUnkeyedRecordsLeaveAPartitionWhereTheyExpired(t *testing.T) {
	c := newCluster(t, 2)
	l, r := newLeaderSwitch(t, c)
	p := newProducer(t, c, producer.WithMetadata(r), producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(500*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	for part := range int32(2) {
		mustOK(t, sendAll(t, ctx, p, prec(part, "before")))
	}
	l.set(0, 1)
	waitLeaderless(t, r, 0)
	waitLeaderless(t, r, 1)
	res, err := p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("first")})
	if !errors.Is(err, producer.ErrDeliveryTimeout) {
		t.Fatalf("first record, no partition with a leader: %v; want ErrDeliveryTimeout", err)
	}
	stuck := res[0].Partition
	l.set(stuck)
	eventually(t, 5*time.Second, "the other partition has a leader", func() bool {
		lp, err := r.Lookup(topic, 1-stuck)
		return err == nil && lp.Leader >= 0
	})
	res, err = p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("second")})
	if err != nil || res[0].Partition != 1-stuck {
		t.Fatalf("second record: partition %d, %v; want acknowledged in partition %d, which has a leader (%d has none)", res[0].Partition, err, 1-stuck, stuck)
	}
}
