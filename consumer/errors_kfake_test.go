package consumer_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/seek"
)

var tp0 = consumer.TopicPartition{Topic: topic, Partition: 0}

// startAt0 makes a consumer of partition 0 from offset 0 (no ListOffsets),
// reads the n records already there, and returns it.
func startAt0(t *testing.T, c *kfake.Cluster, n int, opts ...consumer.Opt) (*consumer.Consumer, []consumer.Record) {
	t.Helper()
	cons := newConsumer(t, c, opts...)
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, n, 10*time.Second)
	if len(recs) != n || len(evs)+len(errs) > 0 {
		t.Fatalf("first %d records: got %d, events %v, errors %v", n, len(recs), evs, errs)
	}
	return cons, recs
}

// pauseIdle pauses partition 0 and waits for the fetch in flight, if any,
// to end (kfake holds an empty fetch for FetchMaxWait).
func pauseIdle(cons *consumer.Consumer) {
	cons.Pause(tp0)
	time.Sleep(150 * time.Millisecond)
}

func checkEpochs(t *testing.T, recs []consumer.Record, from int64, epoch int32) {
	t.Helper()
	for _, r := range recs {
		if r.Offset >= from && r.LeaderEpoch != epoch {
			t.Fatalf("record %d has leader epoch %d, want %d", r.Offset, r.LeaderEpoch, epoch)
		}
	}
}

// UNKNOWN_LEADER_EPOCH: the broker is behind; the same fetch is retried
// later, without a reset, a validation, or a report.
func TestFetchUnknownLeaderEpochRetried(t *testing.T) {
	c := newCluster(t, 1)
	lists := countRequests(c, kmsg.ListOffsets)
	validations := countRequests(c, kmsg.OffsetForLeaderEpoch)
	produceRange(t, c, 0, 0, 30)
	cons, recs := startAt0(t, c, 30)

	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Partitions: []int32{0}, Err: kerr.UnknownLeaderEpoch, Count: 3})
	produceRange(t, c, 0, 30, 60)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Wait(ctx, 3); err != nil {
		t.Fatalf("fault hit %d times: %v", h.Hits(), err)
	}
	more, evs, errs := pollUntil(t, cons, 30, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("UNKNOWN_LEADER_EPOCH surfaced: events %v errors %v", evs, errs)
	}
	checkInOrder(t, append(recs, more...), map[int32]int64{0: 0}, map[int32]int64{0: 60})
	if n := lists(); n != 0 {
		t.Errorf("%d ListOffsets requests: the position was reset", n)
	}
	if n := validations(); n != 0 {
		t.Errorf("%d OffsetForLeaderEpoch requests: UNKNOWN_LEADER_EPOCH is not a reason to validate", n)
	}
	if pos, ok := cons.Position(topic, 0); !ok || pos.Offset != 60 || pos.Epoch != 0 {
		t.Errorf("position %v", pos)
	}
}

// FENCED_LEADER_EPOCH: the consumer is behind; it refreshes metadata,
// validates its position against the new epoch and, as nothing diverged,
// continues without a report.
func TestFetchFencedLeaderEpochRevalidates(t *testing.T) {
	t.Run("epoch bumped under the consumer", func(t *testing.T) {
		c := newCluster(t, 1)
		log := observeFetches(c)
		validations := countRequests(c, kmsg.OffsetForLeaderEpoch)
		produceRange(t, c, 0, 0, 30)
		cons, recs := startAt0(t, c, 30)

		// While the consumer does not fetch, the leader gets a new
		// epoch (same broker) and records in it: the consumer's next
		// fetch carries CurrentLeaderEpoch 0 and is fenced.
		pauseIdle(cons)
		if err := c.MoveTopicPartition(topic, 0, c.LeaderFor(topic, 0)); err != nil {
			t.Fatal(err)
		}
		produceRange(t, c, 0, 30, 50)
		mark := log.len()
		cons.Resume(tp0)
		more, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
		if len(evs)+len(errs) > 0 {
			t.Fatalf("a clean epoch change was reported: events %v errors %v", evs, errs)
		}
		all := append(recs, more...)
		checkInOrder(t, all, map[int32]int64{0: 0}, map[int32]int64{0: 50})
		checkEpochs(t, all, 30, 1)
		// The first fetch after the resume may leave partition 0 out:
		// its session at the broker still holds it at epoch 0.
		fenced := false
		for _, r := range log.fetchedSince(mark) {
			if rp, ok := r.named[0]; ok && rp.CurrentLeaderEpoch == 0 {
				fenced = true
			}
		}
		if !fenced {
			t.Fatal("no fetch with the old epoch after the bump; the test did not exercise fencing")
		}
		if validations() == 0 {
			t.Error("the position was not validated after the epoch change")
		}
		if pos, ok := cons.Position(topic, 0); !ok || pos.Offset != 50 || pos.Epoch != 1 {
			t.Errorf("position %v", pos)
		}
	})
	t.Run("injected", func(t *testing.T) {
		c := newCluster(t, 1)
		metas := countRequests(c, kmsg.Metadata)
		produceRange(t, c, 0, 0, 30)
		cons, recs := startAt0(t, c, 30)
		before := metas()
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Partitions: []int32{0}, Err: kerr.FencedLeaderEpoch, Count: 2})
		produceRange(t, c, 0, 30, 40)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.Wait(ctx, 2); err != nil {
			t.Fatalf("fault hit %d times: %v", h.Hits(), err)
		}
		more, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
		if len(evs)+len(errs) > 0 {
			t.Fatalf("FENCED_LEADER_EPOCH surfaced: events %v errors %v", evs, errs)
		}
		checkInOrder(t, append(recs, more...), map[int32]int64{0: 0}, map[int32]int64{0: 40})
		if metas() == before {
			t.Error("FENCED_LEADER_EPOCH did not refresh metadata")
		}
	})
}

// NOT_LEADER_OR_FOLLOWER: the consumer finds the moved leader (through the
// KIP-951 hint, or through a metadata refresh when the answer has none) and
// goes on there, validating its position, without a report.
func TestFetchNotLeaderFollowsMovedLeader(t *testing.T) {
	for _, hint := range []bool{true, false} {
		name := "KIP-951 hint"
		if !hint {
			name = "metadata refresh"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			log := observeFetches(c)
			metas := countRequests(c, kmsg.Metadata)
			produceRange(t, c, 0, 0, 30)
			cons, recs := startAt0(t, c, 30)
			pauseIdle(cons)
			old := c.LeaderFor(topic, 0)
			to := (old + 1) % 3
			var h *kfake.FaultHandle
			if !hint {
				// The old broker answers NOT_LEADER_OR_FOLLOWER
				// without naming the new leader.
				h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Nodes: []int32{old}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
			}
			if err := c.MoveTopicPartition(topic, 0, to); err != nil {
				t.Fatal(err)
			}
			produceRange(t, c, 0, 30, 50)
			mark, before := log.len(), metas()
			cons.Resume(tp0)
			more, evs, errs := pollUntil(t, cons, 20, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("a clean leader move was reported: events %v errors %v", evs, errs)
			}
			all := append(recs, more...)
			checkInOrder(t, all, map[int32]int64{0: 0}, map[int32]int64{0: 50})
			checkEpochs(t, all, 30, 1)
			var toOld, toNew bool
			for _, r := range log.fetchedSince(mark) {
				if _, ok := r.named[0]; ok {
					toOld = toOld || r.node == old
					toNew = toNew || r.node == to
				}
			}
			if !toOld || !toNew {
				t.Fatalf("fetches to the old leader %v, to the new one %v; want both", toOld, toNew)
			}
			if !hint {
				if h.Hits() == 0 {
					t.Fatal("the fault never answered")
				}
				if metas() == before {
					t.Error("no metadata refresh after NOT_LEADER_OR_FOLLOWER without a hint")
				}
			}
		})
	}
}

// OFFSET_OUT_OF_RANGE below the log start: records the consumer never read
// were deleted; it reports BelowLogStart with the skipped range and resets
// by policy.
func TestFetchBelowLogStart(t *testing.T) {
	for _, policy := range []consumer.Policy{consumer.PolicyEarliest, consumer.PolicyLatest, consumer.PolicyNone} {
		t.Run(policy.String(), func(t *testing.T) {
			c := newCluster(t, 1)
			produceRange(t, c, 0, 0, 20)
			cons, _ := startAt0(t, c, 20, consumer.TruncationPolicy(policy))
			pauseIdle(cons)
			produceRange(t, c, 0, 20, 50)
			if err := c.DeleteRecords(topic, 0, 40); err != nil {
				t.Fatal(err)
			}
			cons.Resume(tp0)
			recs, evs, errs := pollUntil(t, cons, 0, 10*time.Second)
			if len(evs) != 1 {
				t.Fatalf("events %v (errors %v); want one", evs, errs)
			}
			ev := evs[0]
			if ev.Kind != consumer.BelowLogStart || ev.Consumed.Offset != 20 || ev.Consumed.Epoch != 0 ||
				ev.Skipped != (consumer.Range{From: 20, To: 40}) || !ev.Replaced.Empty() || ev.Halted != (policy == consumer.PolicyNone) {
				t.Fatalf("event %v (%+v)", ev, ev)
			}
			if !errors.Is(ev.Err(), errors.ErrOffsetBelowLogStart) {
				t.Errorf("event error %v", ev.Err())
			}
			switch policy {
			case consumer.PolicyEarliest:
				more, _, _ := pollUntil(t, cons, 10, 5*time.Second)
				checkInOrder(t, append(recs, more...), map[int32]int64{0: 40}, map[int32]int64{0: 50})
			case consumer.PolicyLatest:
				if len(recs) != 0 {
					t.Fatalf("PolicyLatest delivered %d old records", len(recs))
				}
				waitFor(t, 5*time.Second, "the reset to the log end", func() bool {
					pos, ok := cons.Position(topic, 0)
					return ok && pos.Offset == 50
				})
				produceRange(t, c, 0, 50, 55)
				more, _, _ := pollUntil(t, cons, 5, 5*time.Second)
				checkInOrder(t, more, map[int32]int64{0: 50}, map[int32]int64{0: 55})
			case consumer.PolicyNone:
				if len(errs) != 1 || !errors.Is(errs[0], errors.ErrOffsetBelowLogStart) {
					t.Fatalf("errors %v; want one ErrOffsetBelowLogStart", errs)
				}
				if st, _ := cons.State(topic, 0); st != seek.StateHalted {
					t.Fatalf("state %v; want halted", st)
				}
				expectQuiet(t, cons, 300*time.Millisecond)
				if err := cons.Seek(topic, 0, 40); err != nil {
					t.Fatal(err)
				}
				more, _, _ := pollUntil(t, cons, 10, 5*time.Second)
				checkInOrder(t, more, map[int32]int64{0: 40}, map[int32]int64{0: 50})
			}
		})
	}
}

// A topic deleted and created again under the same name is a new log: the
// consumer reports Recreated (every delivered offset replaced) and starts
// over at the new topic's beginning.
func TestTopicRecreatedReported(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 20)
	cons, _ := startAt0(t, c, 20)
	oldID := c.TopicInfo(topic).TopicID
	if err := c.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	if c.TopicInfo(topic).TopicID == oldID {
		t.Fatal("kfake kept the topic id")
	}
	produce(t, c, 0, "new", 5)
	var recs []consumer.Record
	var evs []consumer.TruncationEvent
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(recs) < 5 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d, events %v, errors %v)", err, len(recs), evs, errs)
		}
		if len(f.Records) > 0 && len(evs) == 0 && len(f.Truncations) == 0 {
			t.Fatalf("records of the new topic before the report: %+v", f.Records[0])
		}
		recs, evs, errs = append(recs, f.Records...), append(evs, f.Truncations...), append(errs, f.Errors...)
	}
	if len(evs) != 1 || len(errs) != 0 {
		t.Fatalf("events %v errors %v; want one Recreated", evs, errs)
	}
	if ev := evs[0]; ev.Kind != consumer.Recreated || ev.Consumed.Offset != 20 || ev.Replaced != (consumer.Range{From: 0, To: 20}) ||
		!errors.Is(ev.Err(), errors.ErrTopicIDChanged) {
		t.Fatalf("event %v (%+v)", ev, ev)
	}
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != "new"+string(rune('0'+i)) {
			t.Fatalf("record %d of the new topic: %+v", i, r)
		}
	}
}

// fetchAnswer builds a Fetch response for partition 0 of the request's
// first topic, carrying batches.
func fetchAnswer(req *kmsg.FetchRequest, hwm int64, batches []byte) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	rt := kmsg.NewFetchResponseTopic()
	rt.Topic, rt.TopicID = req.Topics[0].Topic, req.Topics[0].TopicID
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition = 0
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hwm, hwm, 0
	rp.RecordBatches = batches
	rt.Partitions = append(rt.Partitions, rp)
	resp.Topics = append(resp.Topics, rt)
	return resp
}

// oneRecordBatch is a valid batch holding one record at offset with
// produceRange's value.
func oneRecordBatch(t *testing.T, dst []byte, offset int64, epoch int32) []byte {
	t.Helper()
	now := time.Now().UnixMilli()
	h := batch.Header{BaseOffset: offset, PartitionLeaderEpoch: epoch, BaseTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	out, err := batch.AppendBatch(dst, &h, []batch.Record{{Offset: offset, Timestamp: now, Value: []byte(value(0, offset))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A batch whose CRC does not match is an error naming the partition and the
// offset; nothing past it is delivered, the partition halts, and a seek past
// it resumes.
func TestCorruptBatchHaltsPartition(t *testing.T) {
	testCorruptBatchHalts(t, func(t *testing.T) []byte {
		b := oneRecordBatch(t, nil, 10, 0)
		b = oneRecordBatch(t, b, 11, 0)
		b[len(b)-1] ^= 0xff // the last value byte: the CRC no longer matches
		return oneRecordBatch(t, b, 12, 0)
	})
}

// A batch with a valid CRC whose last record is malformed fails after its
// first records were parsed: none of them is delivered either.
func TestMalformedRecordHaltsPartition(t *testing.T) {
	testCorruptBatchHalts(t, func(t *testing.T) []byte {
		b := oneRecordBatch(t, nil, 10, 0)
		now := time.Now().UnixMilli()
		h := batch.Header{BaseOffset: 11, BaseTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
		var recs []batch.Record
		for o := int64(11); o < 14; o++ {
			recs = append(recs, batch.Record{Offset: o, Timestamp: now, Value: []byte(value(0, o))})
		}
		bad, err := batch.AppendBatch(nil, &h, recs, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The last record's header count, 0, becomes 1 with no header
		// after it; the CRC is recomputed over the change.
		bad[len(bad)-1] = 0x02
		binary.BigEndian.PutUint32(bad[17:], crc32.Checksum(bad[21:], crc32.MakeTable(crc32.Castagnoli)))
		b = append(b, bad...)
		return oneRecordBatch(t, b, 14, 0)
	})
}

// testCorruptBatchHalts answers the fetch from offset 10 with answer: record
// 10, then a batch at 11 that does not decode.
func testCorruptBatchHalts(t *testing.T, answer func(t *testing.T) []byte) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons, recs := startAt0(t, c, 10, consumer.DisableFetchSessions())

	answered := make(chan struct{})
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) == 0 || len(req.Topics[0].Partitions) == 0 || req.Topics[0].Partitions[0].FetchOffset != 10 {
			c.KeepControl()
			return nil, nil, false
		}
		b := answer(t)
		close(answered)
		return fetchAnswer(req, 15, b), nil, true
	})
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(errs) == 0 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d)", err, len(recs))
		}
		recs = append(recs, f.Records...)
		errs = append(errs, f.Errors...)
		if len(f.Truncations) > 0 {
			t.Fatalf("truncation reported for a corrupt batch: %v", f.Truncations)
		}
	}
	<-answered
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 11})
	if len(errs) != 1 {
		t.Fatalf("%d errors for one corrupt batch: %v", len(errs), errs)
	}
	var pe *errors.PartitionError
	if !errors.As(errs[0], &pe) || !errors.Is(errs[0], errors.ErrCorruptBatch) {
		t.Fatalf("error %v (%T) is not a PartitionError wrapping ErrCorruptBatch", errs[0], errs[0])
	}
	if pe.Topic != topic || pe.Partition != 0 || pe.Offset != 11 {
		t.Fatalf("error names %s[%d] offset %d; want %s[0] offset 11", pe.Topic, pe.Partition, pe.Offset, topic)
	}
	if st, _ := cons.State(topic, 0); st != seek.StateHalted {
		t.Fatalf("state %v; want halted", st)
	}
	// The real log has records 10..19; a halted partition fetches none.
	produceRange(t, c, 0, 10, 20)
	expectQuiet(t, cons, 300*time.Millisecond)
	if err := cons.Seek(topic, 0, 12); err != nil {
		t.Fatal(err)
	}
	more, evs, errs := pollUntil(t, cons, 8, 5*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("after the seek: events %v errors %v", evs, errs)
	}
	checkInOrder(t, more, map[int32]int64{0: 12}, map[int32]int64{0: 20})
}

// An answer holding part of one batch and no whole one (a broker below
// Fetch v3 cutting a batch larger than FetchMaxPartitionBytes; Kafka from v3
// returns a partition's first batch whole, or nothing) lets the consumer
// make no progress: it is an error naming the partition and the offset, the
// partition halts, and nothing is fetched again and again in silence.
func TestPartialOnlyAnswerHaltsPartition(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons, recs := startAt0(t, c, 10, consumer.DisableFetchSessions())

	var cut int
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) == 0 || len(req.Topics[0].Partitions) == 0 || req.Topics[0].Partitions[0].FetchOffset != 10 {
			return nil, nil, false
		}
		cut++
		b := oneRecordBatch(t, nil, 10, 0)
		return fetchAnswer(req, 15, b[:len(b)/2]), nil, true
	})
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(errs) == 0 {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v (records %d, %d cut answers): the consumer went on fetching the same offset without a report", err, len(recs), cut)
		}
		recs = append(recs, f.Records...)
		errs = append(errs, f.Errors...)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 10})
	var pe *errors.PartitionError
	if len(errs) != 1 || !errors.As(errs[0], &pe) || pe.Topic != topic || pe.Partition != 0 || pe.Offset != 10 ||
		!errors.Is(errs[0], errors.ErrMessageTooLarge) {
		t.Fatalf("errors %v; want one for partition 0 at offset 10 matching ErrMessageTooLarge", errs)
	}
}
