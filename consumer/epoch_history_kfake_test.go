package consumer_test

import (
	"context"
	stderrors "errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/seek"
)

// validations records the LeaderEpoch of every OffsetForLeaderEpoch request
// partition 0 of the topic is named in.
type validations struct {
	mu     sync.Mutex
	epochs []int32
}

func observeValidations(c *kfake.Cluster) *validations {
	v := &validations{}
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.Partition == 0 {
					v.mu.Lock()
					v.epochs = append(v.epochs, rp.LeaderEpoch)
					v.mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	return v
}

func (v *validations) all() []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.epochs)
}

// persisted is what an application stores atomically with its output: the
// next offset to process and the encoded epoch history.
type persisted struct {
	offset  int64
	history []byte
}

func persist(t *testing.T, cons *consumer.Consumer, offset int64) persisted {
	t.Helper()
	h, ok := cons.EpochHistory(topic, 0)
	if !ok {
		t.Fatal("EpochHistory: partition not assigned")
	}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return persisted{offset: offset, history: b}
}

func (p persisted) start(t *testing.T) consumer.Start {
	t.Helper()
	h := consumer.NewEpochHistory(0)
	if err := h.UnmarshalBinary(p.history); err != nil {
		t.Fatal(err)
	}
	return consumer.AtHistory(p.offset, h)
}

// A consumer's epoch history follows what Poll delivered across a leader
// change; stored with an offset the application had processed up to (not
// the consumer's position), it restarts a new consumer that validates the
// offset with the epoch the history gives (asked as OffsetForLeaderEpoch
// before any fetch), then delivers every later record once, in order, and
// keeps growing the seeded history.
func TestEpochHistoryRestartValidatesAndContinues(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 30)
	a := newConsumer(t, c)
	if err := a.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, a, 30, 10*time.Second)
	if len(recs) != 30 || len(evs)+len(errs) > 0 {
		t.Fatalf("first 30: %d records, events %v, errors %v", len(recs), evs, errs)
	}
	// kfake cannot locate an old epoch while the new one holds no
	// records (Kafka can): hold OffsetForLeaderEpoch until it does.
	written := holdValidations(c)
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	produceRange(t, c, 0, 30, 50)
	close(written)
	more, evs, errs := pollUntil(t, a, 20, 10*time.Second)
	if len(more) != 20 || len(evs)+len(errs) > 0 {
		t.Fatalf("next 20: %d records, events %v, errors %v", len(more), evs, errs)
	}
	recs = append(recs, more...)
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 50})
	e0, e1 := recs[0].LeaderEpoch, recs[49].LeaderEpoch
	if e1 <= e0 || recs[29].LeaderEpoch != e0 || recs[30].LeaderEpoch != e1 {
		t.Fatalf("epochs: record 29 in %d, 30 in %d, 49 in %d", recs[29].LeaderEpoch, recs[30].LeaderEpoch, e1)
	}
	h, _ := a.EpochHistory(topic, 0)
	if want := []consumer.EpochEntry{{Epoch: e0, StartOffset: 0}, {Epoch: e1, StartOffset: 30}}; !slices.Equal(h.Entries(), want) || h.End() != 50 {
		t.Fatalf("history %v, want %v ending at 50", h, want)
	}
	// The application processed (and stored) up to offset 39, then
	// crashed; 10 more records arrive meanwhile.
	stored := persist(t, a, 40)
	closeNow(t, a)
	produceRange(t, c, 0, 50, 60)

	v := observeValidations(c)
	b := newConsumer(t, c, consumer.TruncationPolicy(consumer.PolicyNone))
	start := stored.start(t)
	if start.Epoch != e1 || start.Unvalidated() {
		t.Fatalf("AtHistory(40) derived epoch %d (unvalidated %v), want %d", start.Epoch, start.Unvalidated(), e1)
	}
	if err := b.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: start}); err != nil {
		t.Fatal(err)
	}
	again, evs, errs := pollUntil(t, b, 20, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("restart: events %v, errors %v", evs, errs)
	}
	checkInOrder(t, again, map[int32]int64{0: 40}, map[int32]int64{0: 60})
	if got := v.all(); len(got) == 0 || got[0] != e1 {
		t.Fatalf("OffsetForLeaderEpoch asked about epochs %v, want %d first", got, e1)
	}
	h, _ = b.EpochHistory(topic, 0)
	if want := []consumer.EpochEntry{{Epoch: e0, StartOffset: 0}, {Epoch: e1, StartOffset: 30}}; !slices.Equal(h.Entries(), want) || h.End() != 60 {
		t.Fatalf("restarted history %v, want %v ending at 60", h, want)
	}
	if pos, _ := b.Position(topic, 0); pos.Offset != 60 || pos.Epoch != e1 {
		t.Fatalf("position %v", pos)
	}
}

// A stored history that cannot give the epoch of the record before the
// stored offset makes the start unvalidated: Poll reports a
// *errors.PartitionError matching errors.ErrUnvalidated (once), nothing is
// validated or fetched, and a seek with At accepts the offset.
func TestEpochHistoryUnvalidatedStart(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 20)
	fetches := observeFetches(c)
	v := observeValidations(c)
	cons := newConsumer(t, c)

	taken, _ := seek.EpochHistoryOf([]seek.EpochEntry{{Epoch: 0, StartOffset: 5}}, 10, 0)
	for _, tc := range []struct {
		name   string
		offset int64
		h      *consumer.EpochHistory
	}{
		{"empty history", 15, consumer.NewEpochHistory(0)},
		{"nil history", 15, nil},
		{"offset 0", 0, taken},
		{"record before precedes the history", 5, taken},
		{"record before is past the history's end", 11, taken},
	} {
		start := consumer.AtHistory(tc.offset, tc.h)
		if !start.Unvalidated() {
			t.Fatalf("%s: start %v not unvalidated", tc.name, start)
		}
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: start}); err != nil {
			t.Fatal(err)
		}
		recs, evs, errs := pollUntil(t, cons, 0, 5*time.Second)
		if len(recs)+len(evs) > 0 || len(errs) != 1 {
			t.Fatalf("%s: records %d, events %v, errors %v; want one error", tc.name, len(recs), evs, errs)
		}
		var pe *errors.PartitionError
		if !stderrors.Is(errs[0], errors.ErrUnvalidated) || !stderrors.As(errs[0], &pe) ||
			pe.Topic != topic || pe.Partition != 0 || pe.Offset != tc.offset {
			t.Fatalf("%s: error %v", tc.name, errs[0])
		}
		if st, _ := cons.State(topic, 0); st != seek.StateHalted {
			t.Fatalf("%s: state %v", tc.name, st)
		}
		if pos, ok := cons.Position(topic, 0); !ok || pos.Offset != tc.offset || pos.Epoch != consumer.NoEpoch {
			t.Fatalf("%s: position %v %v", tc.name, pos, ok)
		}
	}
	expectQuiet(t, cons, 200*time.Millisecond)
	for _, f := range fetches.fetchedSince(0) {
		if _, ok := f.named[0]; ok {
			t.Fatalf("partition 0 fetched from an unvalidated start: %+v", f)
		}
	}
	if got := v.all(); len(got) > 0 {
		t.Fatalf("unvalidated starts were validated with epochs %v", got)
	}

	// The application accepts the offset unvalidated.
	if err := cons.Seek(topic, 0, 11); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 9, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("after At: events %v, errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 11}, map[int32]int64{0: 20})
}

// restartable is a kfake cluster persisted in a directory and listening on
// fixed ports, so that it can be stopped, have its log cut, and start again
// where the clients expect it (cmd/kepoch's demo does the same).
type restartable struct {
	t     *testing.T
	dir   string
	ports []int
	held  map[string]net.Listener
	c     *kfake.Cluster
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{t: t, dir: t.TempDir(), held: map[string]net.Listener{}}
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.ports = append(r.ports, l.Addr().(*net.TCPAddr).Port)
		r.held[l.Addr().String()] = l
	}
	t.Cleanup(func() {
		for _, l := range r.held {
			l.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
	})
	r.start()
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	listen := func(network, address string) (net.Listener, error) {
		if l, ok := r.held[address]; ok {
			delete(r.held, address)
			return l, nil
		}
		return net.Listen(network, address)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.Ports(r.ports...), kfake.ListenFn(listen), kfake.DataDir(r.dir), kfake.SeedTopics(1, topic))
	if err != nil {
		r.t.Fatal(err)
	}
	r.c = c
}

// restartLosingLastBatch stops the cluster, cuts the last record batch of
// partition 0 from its persisted segment (one byte short, the batch is
// dropped when the log loads) and starts it again: the acknowledged records
// of that batch are gone, as after an unclean leader election.
func (r *restartable) restartLosingLastBatch() {
	r.t.Helper()
	r.c.Close()
	pdir := filepath.Join(r.dir, "partitions", topic+"-0")
	seg := filepath.Join(pdir, "0.dat")
	st, err := os.Stat(seg)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.Truncate(seg, st.Size()-1); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(pdir, "snapshot.json")); err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
	r.start()
}

// A real truncation while the application is down: it stored (offset 30,
// history) after consuming 0..29, the broker restarts without the last
// batch (20..29) and a new leader epoch writes 20..24 anew. The restarted
// consumer (PolicyNone) reports the truncation before delivering anything:
// consumed 30, the divergence point exactly the leader's own
// OffsetForLeaderEpoch answer for the history's epoch; its history is cut
// there; seeking to the reported Resume reads the new lineage once.
func TestEpochHistoryRestartAfterTruncation(t *testing.T) {
	r := newRestartable(t)
	produceRange(t, r.c, 0, 0, 20)
	// One batch for restartLosingLastBatch to cut (kgo, lingering, could
	// split it: then only its last part was cut, 25..29).
	produceOneBatch(t, r.c, 0, 20, 30, compress.None)
	a := newConsumer(t, r.c)
	if err := a.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, a, 30, 10*time.Second)
	if len(recs) != 30 || len(evs)+len(errs) > 0 {
		t.Fatalf("first 30: %d records, events %v, errors %v", len(recs), evs, errs)
	}
	e0 := recs[29].LeaderEpoch
	stored := persist(t, a, 30)
	closeNow(t, a)

	r.restartLosingLastBatch()
	// kfake cannot locate an old epoch while the new one holds no
	// records (Kafka can): hold OffsetForLeaderEpoch until it does.
	written := holdValidations(r.c)
	if err := r.c.MoveTopicPartition(topic, 0, (r.c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}

	b := newConsumer(t, r.c, consumer.TruncationPolicy(consumer.PolicyNone), consumer.MetadataMaxAge(250*time.Millisecond))
	start := stored.start(t)
	if start.Epoch != e0 {
		t.Fatalf("derived epoch %d, want %d", start.Epoch, e0)
	}
	if err := b.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: start}); err != nil {
		t.Fatal(err)
	}
	produceRange(t, r.c, 0, 100, 105) // values p0-100..p0-104 at offsets 20..24
	close(written)

	recs, evs, errs = pollUntil(t, b, 0, 10*time.Second)
	if len(recs) > 0 || len(evs) != 1 || len(errs) != 1 {
		t.Fatalf("restart: records %d, events %v, errors %v; want one report before any record", len(recs), evs, errs)
	}
	answer := rawEpochEnd(t, r.c, e0)
	ev := evs[0]
	if ev.Kind != consumer.Diverged || !ev.Halted || ev.Consumed != (consumer.Position{Offset: 30, Epoch: e0}) ||
		ev.Divergent.Offset != answer.EndOffset || ev.Divergent.Epoch != answer.Epoch || !ev.Exact || ev.EpochPruned ||
		ev.Replaced != (consumer.Range{From: 20, To: 30}) {
		t.Fatalf("report %v (%+v); the leader answers OffsetForLeaderEpoch(%d) = %+v", ev, ev, e0, answer)
	}
	if answer.EndOffset != 20 {
		t.Fatalf("the leader answers %+v: the log was not cut at 20", answer)
	}
	var te *errors.LogTruncationError
	if !stderrors.As(errs[0], &te) {
		t.Fatalf("error %v", errs[0])
	}
	if d, ok := te.For(topic, 0); !ok || d.Divergent.Offset != 20 || d.Consumed.Offset != 30 {
		t.Fatalf("divergence %+v", d)
	}
	h, _ := b.EpochHistory(topic, 0)
	if want := []consumer.EpochEntry{{Epoch: e0, StartOffset: 0}}; !slices.Equal(h.Entries(), want) || h.End() != 20 {
		t.Fatalf("history after the report %v, want %v ending at 20", h, want)
	}

	if err := b.SeekTo(topic, 0, consumer.AtEpoch(ev.Resume.Offset, ev.Resume.Epoch)); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs = pollUntil(t, b, 5, 10*time.Second)
	if len(evs)+len(errs) > 0 || len(recs) != 5 {
		t.Fatalf("new lineage: %d records, events %v, errors %v", len(recs), evs, errs)
	}
	for i, rec := range recs {
		if rec.Offset != int64(20+i) || string(rec.Value) != value(0, int64(100+i)) || rec.LeaderEpoch <= e0 {
			t.Fatalf("record %d: %d@%d %q", i, rec.Offset, rec.LeaderEpoch, rec.Value)
		}
	}
	h, _ = b.EpochHistory(topic, 0)
	if want := []consumer.EpochEntry{{Epoch: e0, StartOffset: 0}, {Epoch: recs[0].LeaderEpoch, StartOffset: 20}}; !slices.Equal(h.Entries(), want) || h.End() != 25 {
		t.Fatalf("history in the new lineage %v, want %v ending at 25", h, want)
	}
}

// The topic is deleted and created again while the application is down:
// its stored (offset 20, history) describes records of the deleted
// incarnation. Whether the new incarnation's log is shorter than the
// stored offset (its OffsetForLeaderEpoch answer for the stored epoch then
// looks like a divergence at its end) or longer (it looks like the
// position is fine), the restarted consumer must report Recreated (every
// stored offset replaced, errors.ErrTopicIDChanged) before any record, and
// then read the new incarnation from its start, once, in order; a history
// stored from there restarts without a report.
func TestEpochHistoryRestartAfterRecreate(t *testing.T) {
	for _, n := range []int64{5, 30} {
		t.Run(fmt.Sprintf("new=%d", n), func(t *testing.T) {
			c := newCluster(t, 1)
			produceRange(t, c, 0, 0, 20)
			a := newConsumer(t, c)
			if err := a.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			if recs, evs, errs := pollUntil(t, a, 20, 10*time.Second); len(recs) != 20 || len(evs)+len(errs) > 0 {
				t.Fatalf("first 20: %d records, events %v, errors %v", len(recs), evs, errs)
			}
			stored := persist(t, a, 20)
			closeNow(t, a)
			if err := c.DeleteTopic(topic); err != nil {
				t.Fatal(err)
			}
			if err := c.CreateTopic(topic, 1, nil); err != nil {
				t.Fatal(err)
			}
			produceRange(t, c, 0, 100, 100+n) // values p0-100.. at offsets 0..n-1

			b := newConsumer(t, c)
			if err := b.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: stored.start(t)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, b, int(n), 10*time.Second)
			if len(evs) != 1 || len(errs) != 0 {
				t.Fatalf("restart: events %v, errors %v, %d records; want one Recreated report", evs, errs, len(recs))
			}
			if ev := evs[0]; ev.Kind != consumer.Recreated || ev.Consumed.Offset != 20 || ev.Replaced != (consumer.Range{From: 0, To: 20}) ||
				!stderrors.Is(ev.Err(), errors.ErrTopicIDChanged) {
				t.Fatalf("report %v (%+v)", ev, ev)
			}
			if len(recs) != int(n) {
				t.Fatalf("%d records of the new topic, want %d", len(recs), n)
			}
			for i, rec := range recs {
				if rec.Offset != int64(i) || string(rec.Value) != value(0, int64(100+i)) {
					t.Fatalf("record %d: %d@%d %q", i, rec.Offset, rec.LeaderEpoch, rec.Value)
				}
			}
			if h, _ := b.EpochHistory(topic, 0); h.TopicID() != seek.TopicID(c.TopicInfo(topic).TopicID) || h.Len() != 1 || h.End() != n {
				t.Fatalf("history %v of topic ID %x after the report, want the new topic's %x", h, h.TopicID(), c.TopicInfo(topic).TopicID)
			}
			again := persist(t, b, n)
			closeNow(t, b)
			produceRange(t, c, 0, 200, 203)
			d := newConsumer(t, c)
			if err := d.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: again.start(t)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs = pollUntil(t, d, 3, 10*time.Second)
			if len(evs)+len(errs) > 0 || len(recs) != 3 || recs[0].Offset != n || string(recs[0].Value) != value(0, 200) {
				t.Fatalf("restart in the new topic: %d records (first %v), events %v, errors %v", len(recs), first(recs), evs, errs)
			}
		})
	}
}

// holdValidations holds every OffsetForLeaderEpoch request until the
// returned channel is closed.
func holdValidations(c *kfake.Cluster) chan struct{} {
	written := make(chan struct{})
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-written })
		return nil, nil, false
	})
	return written
}

// rawEpochEnd asks partition 0's leader OffsetForLeaderEpoch(epoch) with a
// plain kgo client: the broker's own answer.
func rawEpochEnd(t *testing.T, c *kfake.Cluster, epoch int32) seek.EpochEnd {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.CurrentLeaderEpoch = 0, epoch, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(c.LeaderFor(topic, 0))))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetForLeaderEpoch answer %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	return seek.EpochEnd{Epoch: p.LeaderEpoch, EndOffset: p.EndOffset}
}

// closeNow closes a consumer (an application stopping).
func closeNow(t *testing.T, cons *consumer.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cons.Close(ctx); err != nil {
		t.Fatal(fmt.Errorf("close: %w", err))
	}
}
