package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// An assigned partition that metadata does not have (a topic that does not
// exist, then one deleted) is reported once in Poll's Errors after
// MissingPartitionReport, without halting it: the other partitions go on,
// and once the topic exists its records are delivered from the start
// position. Deleted again, it is reported again, once.
func TestMissingPartitionReported(t *testing.T) {
	c := newClusterWith(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const missing = "missing"
	cons := newConsumer(t, c, consumer.MissingPartitionReport(300*time.Millisecond))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)},
		consumer.Assignment{Topic: missing, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 0, 3)

	// collect polls for d and returns the records of each topic and the
	// errors.
	collect := func(d time.Duration) (map[string][]int64, []error) {
		recs := map[string][]int64{}
		var errs []error
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		for {
			f, err := cons.Poll(ctx)
			if err != nil {
				return recs, errs
			}
			for _, r := range f.Records {
				recs[r.Topic] = append(recs[r.Topic], r.Offset)
			}
			if len(f.Truncations) > 0 {
				t.Errorf("truncations %v", f.Truncations)
			}
			errs = append(errs, f.Errors...)
		}
	}
	wantMissing := func(errs []error) {
		t.Helper()
		if len(errs) != 1 {
			t.Fatalf("errors %v; want one report of %s[0]", errs, missing)
		}
		pe, ok := errors.AsType[*errors.PartitionError](errs[0])
		if !ok || pe.Op != "lookup" || pe.Topic != missing || pe.Partition != 0 || !errors.Is(pe, errors.ErrUnknownTopicOrPartition) {
			t.Fatalf("report %#v (%v); want a lookup PartitionError of %s[0] matching UNKNOWN_TOPIC_OR_PARTITION", errs[0], errs[0], missing)
		}
	}
	recs, errs := collect(2 * time.Second)
	if len(recs[topic]) != 3 {
		t.Fatalf("records of %s: %v; want 0..2 while %s is missing", topic, recs[topic], missing)
	}
	wantMissing(errs)

	create := kmsg.NewCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = missing, 1, 3
	create.Topics = append(create.Topics, ct)
	if _, err := create.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: missing, Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var got []int64
	for len(got) < 2 && time.Now().Before(deadline) {
		recs, errs := collect(300 * time.Millisecond)
		if len(errs) > 0 {
			t.Fatalf("errors %v after %s was created", errs, missing)
		}
		got = append(got, recs[missing]...)
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("records of the created %s: %v; want 0, 1", missing, got)
	}

	del := kmsg.NewDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(missing)
	del.Topics = append(del.Topics, dt)
	del.TopicNames = []string{missing}
	if _, err := del.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	var all []error
	deadline = time.Now().Add(15 * time.Second)
	for len(all) == 0 && time.Now().Before(deadline) {
		_, errs := collect(500 * time.Millisecond)
		all = append(all, errs...)
	}
	_, errs = collect(time.Second) // and no second report
	wantMissing(append(all, errs...))
}

func TestMissingPartitionReportValidated(t *testing.T) {
	if _, err := consumer.New(consumer.SeedBrokers("127.0.0.1:1"), consumer.MissingPartitionReport(-time.Second)); err == nil {
		t.Fatal("New accepted a negative MissingPartitionReport")
	}
}
