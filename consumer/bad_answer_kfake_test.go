package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/batch"
)

// An error code this client does not know, in a Fetch answer's partition
// or for the whole answer, halts the partition and Poll reports it: a
// *errors.PartitionError at the position with an *errors.UnknownCodeError
// keeping the code. It was retried forever without a word (the whole
// answer's code as UNKNOWN_SERVER_ERROR). Nothing is skipped: a seek
// resumes where the application says, and the records are delivered once.
func TestFetchUnknownCodeHalts(t *testing.T) {
	for _, whole := range []bool{false, true} {
		name := "partition"
		if whole {
			name = "whole answer"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 1)
			produceRange(t, c, 0, 0, 10)
			cons := newConsumer(t, c, consumer.DisableFetchSessions())
			var bad atomic.Bool
			bad.Store(true)
			consumer.InterceptFetches(cons, func(ctx context.Context, _ int32, _ *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
				kr, err := send(ctx)
				if err != nil || !bad.Load() {
					return kr, err
				}
				resp := kr.(*kmsg.FetchResponse)
				if whole {
					resp.ErrorCode, resp.Topics = 9999, nil
					return resp, nil
				}
				for i := range resp.Topics {
					for j := range resp.Topics[i].Partitions {
						rp := &resp.Topics[i].Partitions[j]
						rp.ErrorCode, rp.RecordBatches = 9999, nil
					}
				}
				return resp, nil
			})
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs := pollUntil(t, cons, 0, 5*time.Second)
			if len(recs)+len(evs) > 0 || len(errs) != 1 {
				t.Fatalf("records %d, events %v, errors %v; want the one error", len(recs), evs, errs)
			}
			pe, ok := errors.AsType[*errors.PartitionError](errs[0])
			code, _ := errors.CodeOf(errs[0])
			_, unknown := errors.AsType[*errors.UnknownCodeError](errs[0])
			if !ok || pe.Topic != topic || pe.Partition != 0 || pe.Offset != 0 || code != 9999 || !unknown {
				t.Fatalf("error %v; want a *PartitionError of %s[0] at 0 with an *UnknownCodeError 9999", errs[0], topic)
			}
			if st, _ := cons.State(topic, 0); st.String() != "halted" {
				t.Fatalf("state %v; want halted", st)
			}
			bad.Store(false)
			if err := cons.Seek(topic, 0, 0); err != nil {
				t.Fatal(err)
			}
			recs, evs, errs = pollUntil(t, cons, 10, 10*time.Second)
			if len(evs)+len(errs) > 0 {
				t.Fatalf("after the seek: events %v errors %v", evs, errs)
			}
			checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 10})
		})
	}
}

// A Fetch answer that lists a partition twice is answered by its first
// entry, and only that entry's records are delivered with it: the second
// entry's records were decoded over the first's, and delivered with the
// first entry's error code and offsets (here a record "evil" at offset 0
// in place of the log's).
func TestFetchDuplicatePartitionFirstEntryAnswers(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	cons := newConsumer(t, c, consumer.DisableFetchSessions())
	now := time.Now().UnixMilli()
	h := batch.Header{BaseOffset: 0, BaseTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	evil, err := batch.AppendBatch(nil, &h, []batch.Record{{Offset: 0, Timestamp: now, Value: []byte("evil")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	consumer.InterceptFetches(cons, func(ctx context.Context, _ int32, _ *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error) {
		kr, err := send(ctx)
		if err != nil {
			return kr, err
		}
		resp := kr.(*kmsg.FetchResponse)
		for i := range resp.Topics {
			ps := resp.Topics[i].Partitions
			for _, rp := range ps {
				if len(rp.RecordBatches) > 0 {
					again := rp
					again.RecordBatches = evil
					resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, again)
				}
			}
		}
		return resp, nil
	})
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	recs, evs, errs := pollUntil(t, cons, 10, 10*time.Second)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("events %v errors %v", evs, errs)
	}
	checkInOrder(t, recs, map[int32]int64{0: 0}, map[int32]int64{0: 10})
}
