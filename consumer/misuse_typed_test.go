package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/seek"
)

// wantTyped fails unless err matches sentinel and its message holds every
// one of names (the option or argument, and the refused value).
func wantTyped(t *testing.T, what string, err, sentinel error, names ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: %v; want an error matching %v", what, err, sentinel)
		return
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("%s: %q does not name %q", what, err, n)
		}
	}
}

// TestOptionsValidated: every option New refuses gives an error matching
// errors.ErrInvalidOption that names the option and the refused value.
func TestOptionsValidated(t *testing.T) {
	seeds := consumer.SeedBrokers("127.0.0.1:1")
	grp := consumer.Group("g")
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	long := strings.Repeat("x", 1<<15)
	for _, tc := range []struct {
		option, value string
		opts          []consumer.Opt
	}{
		{"SeedBrokers", "none given", nil},
		{"WithClient", "[127.0.0.1:1]", []consumer.Opt{consumer.WithClient(cl), seeds}},
		{"WithClient", "1 TransportOpts", []consumer.Opt{consumer.WithClient(cl), consumer.TransportOpts(kgo.ClientID("x"))}},
		{"TruncationPolicy", "0 ", []consumer.Opt{seeds, consumer.TruncationPolicy(0)}},
		{"TruncationPolicy", "4 ", []consumer.Opt{seeds, consumer.TruncationPolicy(seek.PolicyNone + 1)}},
		{"FetchMaxWait", "-1s", []consumer.Opt{seeds, consumer.FetchMaxWait(-time.Second)}},
		{"FetchMaxWait", "6m0s", []consumer.Opt{seeds, consumer.FetchMaxWait(6 * time.Minute)}},
		{"FetchMinBytes", "0 ", []consumer.Opt{seeds, consumer.FetchMinBytes(0)}},
		{"FetchMaxPartitionBytes", "-1 ", []consumer.Opt{seeds, consumer.FetchMaxPartitionBytes(-1)}},
		{"FetchMaxBytes", "-1 ", []consumer.Opt{seeds, consumer.FetchMaxBytes(-1)}},
		{"FetchMaxBytes", "10 is less than FetchMaxPartitionBytes 100", []consumer.Opt{seeds, consumer.FetchMaxBytes(10), consumer.FetchMaxPartitionBytes(100)}},
		{"MaxBufferedBytes", "1 ", []consumer.Opt{seeds, consumer.MaxBufferedBytes(1)}},
		{"MaxPollRecords", "-1 ", []consumer.Opt{seeds, consumer.MaxPollRecords(-1)}},
		{"DecompressParallelism", "0 ", []consumer.Opt{seeds, consumer.DecompressParallelism(0)}},
		{"DecompressParallelism", "65 ", []consumer.Opt{seeds, consumer.DecompressParallelism(65)}},
		{"RetryBackoff", "0s", []consumer.Opt{seeds, consumer.RetryBackoff(0)}},
		{"RequestTimeout", "500ms", []consumer.Opt{seeds, consumer.RequestTimeout(500 * time.Millisecond)}},
		{"LineageSize", "1 ", []consumer.Opt{seeds, consumer.LineageSize(1)}},
		{"DeliveryHistory", "-1 ", []consumer.Opt{seeds, consumer.DeliveryHistory(-1)}},
		{"EpochHistorySize", "0 ", []consumer.Opt{seeds, consumer.EpochHistorySize(0)}},
		{"EpochHistorySize", "65537 ", []consumer.Opt{seeds, consumer.EpochHistorySize(1<<16 + 1)}},
		{"MaxEpochWaits", "0 ", []consumer.Opt{seeds, consumer.MaxEpochWaits(0)}},
		{"MissingPartitionReport", "-1s", []consumer.Opt{seeds, consumer.MissingPartitionReport(-time.Second)}},
		{"GCReserve", "-1 ", []consumer.Opt{seeds, consumer.GCReserve(-1)}},
		// Group options.
		{"GroupInstanceID", `"i" given without Group`, []consumer.Opt{seeds, consumer.GroupInstanceID("i")}},
		{"Group", "32768 bytes", []consumer.Opt{seeds, consumer.Group(long)}},
		{"GroupInstanceID", `""`, []consumer.Opt{seeds, grp, consumer.GroupInstanceID("")}},
		{"GroupInstanceID", "32768 bytes", []consumer.Opt{seeds, grp, consumer.GroupInstanceID(long)}},
		{"WithGroupProtocol", "3 ", []consumer.Opt{seeds, grp, consumer.WithGroupProtocol(3)}},
		{"Assignors", "none given", []consumer.Opt{seeds, grp, consumer.Assignors()}},
		{"Assignors", `"sticky"`, []consumer.Opt{seeds, grp, consumer.Assignors("sticky")}},
		{"Assignors", `"range" is listed twice`, []consumer.Opt{seeds, grp, consumer.Assignors(consumer.RangeAssignor, consumer.RangeAssignor)}},
		{"SessionTimeout", "999ms", []consumer.Opt{seeds, grp, consumer.SessionTimeout(999 * time.Millisecond)}},
		{"RebalanceTimeout", "0s", []consumer.Opt{seeds, grp, consumer.RebalanceTimeout(0)}},
		{"HeartbeatInterval", "5ms", []consumer.Opt{seeds, grp, consumer.HeartbeatInterval(5 * time.Millisecond)}},
		{"HeartbeatInterval", "45s", []consumer.Opt{seeds, grp, consumer.HeartbeatInterval(45 * time.Second)}},
		{"AutoCommitInterval", "1ms", []consumer.Opt{seeds, grp, consumer.AutoCommitInterval(time.Millisecond)}},
		{"MaxPollInterval", "-1s", []consumer.Opt{seeds, grp, consumer.MaxPollInterval(-time.Second)}},
		{"NoCommitStart", "offset -1", []consumer.Opt{seeds, grp, consumer.NoCommitStart(consumer.At(-1))}},
		{"NoCommitStart", "timestamp -3", []consumer.Opt{seeds, grp, consumer.NoCommitStart(consumer.AtTimestamp(-3))}},
		{"NoCommitStart", "kind 0", []consumer.Opt{seeds, grp, consumer.NoCommitStart(consumer.Start{})}},
		{"NoCommitStart", "nearest 5", []consumer.Opt{seeds, grp, consumer.NoCommitStart(consumer.NearestTo(5, 1))}},
	} {
		cons, err := consumer.New(tc.opts...)
		if cons != nil {
			cons.Close(context.Background())
		}
		wantTyped(t, tc.option+" "+tc.value, err, errors.ErrInvalidOption, "option "+tc.option+": ", tc.value)
	}
	// Without a Group, its options are not checked (none is used); with
	// DisableAutoCommit, neither is AutoCommitInterval.
	for _, opts := range [][]consumer.Opt{
		{seeds, consumer.SessionTimeout(0)},
		{seeds, grp, consumer.DisableAutoCommit(), consumer.AutoCommitInterval(0)},
	} {
		cons, err := consumer.New(opts...)
		if err != nil {
			t.Errorf("New refused options it does not use: %v", err)
			continue
		}
		cons.Close(context.Background())
	}
}

// TestMisuseTyped: every call argument a consumer refuses gives an error
// matching errors.ErrInvalidArgument naming the argument and the value;
// mixing Assign and Subscribe matches ErrAssignmentMode.
func TestMisuseTyped(t *testing.T) {
	c := newCluster(t, 2)
	cons := newConsumer(t, c, consumer.Group("g-misuse"))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		t.Fatal(err)
	}
	assign := func(a consumer.Assignment) func() error {
		return func() error {
			return cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}, a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		what  string
		call  func() error
		names []string
	}{
		{"Assign empty topic", assign(consumer.Assignment{Partition: 0, Start: consumer.Earliest()}), []string{"Assign", "#1 Topic", `""`}},
		{"Assign negative partition", assign(consumer.Assignment{Topic: topic, Partition: -1, Start: consumer.Earliest()}), []string{"Assign", "#1 Partition", "-1"}},
		{"Assign no start", assign(consumer.Assignment{Topic: topic, Partition: 1}), []string{"Assign", "#1 Start", "kind 0"}},
		{"Assign negative offset", assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(-2)}), []string{"#1 Start", "offset -2"}},
		{"Assign negative epoch offset", assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.AtEpoch(-1, 3)}), []string{"#1 Start", "offset -1"}},
		{"Assign negative timestamp", assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.AtTimestamp(-1)}), []string{"#1 Start", "timestamp -1"}},
		{"Seek negative offset", func() error { return cons.Seek(topic, 0, -1) }, []string{"Seek", "argument offset", "-1"}},
		{"SeekTo negative offset", func() error { return cons.SeekTo(topic, 0, consumer.At(-5)) }, []string{"SeekTo", "argument start", "offset -5"}},
		{"SeekTo negative timestamp", func() error { return cons.SeekTo(topic, 0, consumer.AtTimestamp(-3)) }, []string{"SeekTo", "timestamp -3"}},
		{"SeekTo no start", func() error { return cons.SeekTo(topic, 0, consumer.Start{}) }, []string{"SeekTo", "kind 0"}},
		{"Assign epoch below -1", assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.AtEpoch(5, -2)}), []string{"#1 Start", "epoch -2"}},
		{"SeekToNearest epoch below -1", func() error {
			_, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: 3, LeaderEpoch: -3})
			return err
		}, []string{"SeekToNearest", "argument om", "leader epoch -3"}},
		{"SeekToNearest negative offset", func() error {
			_, err := cons.SeekToNearest(ctx, topic, 0, consumer.OffsetAndMetadata{Offset: -1, LeaderEpoch: 2})
			return err
		}, []string{"SeekToNearest", "argument om", "offset -1"}},
		{"Subscribe no topics", func() error { return cons.Subscribe() }, []string{"Subscribe", "argument topics", "none given"}},
		{"Subscribe empty topic", func() error { return cons.Subscribe(topic, "") }, []string{"Subscribe", "argument topics", `""`}},
		{"Subscribe long topic", func() error { return cons.Subscribe(strings.Repeat("t", 1<<15)) }, []string{"Subscribe", "32768 bytes"}},
		{"SubscribeRegex bad expr", func() error { return cons.SubscribeRegex("t(") }, []string{"SubscribeRegex", "argument expr", `"t("`}},
		{"Committed empty topic", func() error {
			_, err := cons.Committed(ctx, consumer.TopicPartition{Topic: topic}, consumer.TopicPartition{Partition: 1})
			return err
		}, []string{"Committed", "argument tps", `""`}},
		{"Committed negative partition", func() error {
			_, err := cons.Committed(ctx, consumer.TopicPartition{Topic: topic, Partition: -1})
			return err
		}, []string{"Committed", "argument tps", "-1"}},
	} {
		wantTyped(t, tc.what, tc.call(), errors.ErrInvalidArgument, append([]string{"consumer: "}, tc.names...)...)
	}
	if got := cons.Assigned(); len(got) != 1 {
		t.Errorf("refused Assigns changed the assignment to %v", got)
	}
	// Refused commit entries: one *PartitionError each, and nothing sent.
	bad := map[consumer.TopicPartition]consumer.OffsetAndMetadata{
		{Topic: "", Partition: 0}:     {Offset: 1, LeaderEpoch: 0},
		{Topic: topic, Partition: -2}: {Offset: 1, LeaderEpoch: 0},
		{Topic: topic, Partition: 1}:  {Offset: -7, LeaderEpoch: 0},
		{Topic: topic, Partition: 2}:  {Offset: 4, LeaderEpoch: -5},
	}
	wantProblems := map[int32]string{0: `topic ""`, -2: "partition -2", 1: "offset -7", 2: "leader epoch -5"}
	check := func(what string, err error) {
		pes := partitionErrs(t, err, errors.ErrInvalidArgument)
		if len(pes) != len(bad) {
			t.Errorf("%s: %d errors %v; want %d", what, len(pes), err, len(bad))
		}
		for _, pe := range pes {
			if pe.Op != "commit" || !strings.Contains(pe.Error(), "argument offsets") || !strings.Contains(pe.Error(), wantProblems[pe.Partition]) {
				t.Errorf("%s: %v; want a commit error naming argument offsets and %s", what, pe, wantProblems[pe.Partition])
			}
		}
	}
	check("CommitSync", cons.CommitSync(ctx, bad))
	done := make(chan error, 1)
	cons.CommitAsync(bad, func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { done <- err })
	select {
	case err := <-done:
		check("CommitAsync", err)
	case <-ctx.Done():
		t.Fatal("CommitAsync's done never called")
	}

	// Assign by hand, then Subscribe; Subscribe, then Assign.
	wantTyped(t, "Subscribe after Assign", cons.Subscribe(topic), consumer.ErrAssignmentMode, "Subscribe after Assign")
	sub := newConsumer(t, c, consumer.Group("g-misuse-sub"))
	if err := sub.Subscribe(topic); err != nil {
		t.Fatal(err)
	}
	wantTyped(t, "Assign after Subscribe", sub.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}),
		consumer.ErrAssignmentMode, "Assign on a subscribed consumer")
	for _, err := range []error{cons.Subscribe(topic), sub.Assign()} {
		if errors.Is(err, errors.ErrInvalidArgument) {
			t.Errorf("%v: mixing modes is not an invalid argument", err)
		}
	}
}

// TestNilContextRefused: every call that takes a context refuses a nil one
// with an error matching errors.ErrInvalidArgument that names the call and
// the argument, and does nothing: no panic in the caller, none on the
// consumer's own goroutines (CommitSync handed the nil to the commit
// goroutine, whose panic ended the process), and the consumer works on.
func TestNilContextRefused(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 5)
	cons := newConsumer(t, c, consumer.Group("g-nil-ctx"))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context // what a caller passing nil passes
	for _, tc := range []struct {
		call string
		f    func() error
	}{
		{"Poll", func() error { _, err := cons.Poll(nilCtx); return err }},
		{"Committed", func() error { _, err := cons.Committed(nilCtx, tp0); return err }},
		{"SeekToNearest", func() error {
			_, err := cons.SeekToNearest(nilCtx, topic, 0, consumer.OffsetAndMetadata{Offset: 1, LeaderEpoch: 0})
			return err
		}},
		{"CommitSync", func() error { return cons.CommitSync(nilCtx, nil) }},
		{"Close", func() error { return cons.Close(nilCtx) }},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s(nil): panic %v", tc.call, r)
				}
			}()
			wantTyped(t, tc.call+"(nil)", tc.f(), errors.ErrInvalidArgument, "consumer: "+tc.call, "argument ctx")
		}()
	}
	// Refused, Close closed nothing: the records are read and committed.
	recs, _, errs := pollUntil(t, cons, 5, 10*time.Second)
	if len(recs) != 5 || len(errs) > 0 {
		t.Fatalf("after the refused calls: %d records, errors %v", len(recs), errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.CommitSync(ctx, nil); err != nil {
		t.Fatalf("CommitSync: %v", err)
	}
}
