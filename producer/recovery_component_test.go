package producer_test

// Component tests of the idempotent producer's KIP-360 recovery on kfake:
// each row of Sequencer.Complete's decision table, driven through the real
// I/O layer, with what the application sees (reports, outcomes, lost-write
// reports, identity, bumps) and the log read back by kgo's consumer.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// OUT_OF_ORDER_SEQUENCE_NUMBER on the partition's first unacknowledged
// batch, after acknowledgements under the same identity: the leader lost
// what it acknowledged. ProvenGap, one epoch bump, the batch resent under
// the new epoch from sequence 0 (ResequencedNoLoss: the refusal was
// definite), the ack ledger checked (nothing lost here).
func TestOutOfOrderOnHeadBatchBumpsOnce(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 2)...))
	before := p.ProducerID()
	checks := observe(c, kmsg.OffsetForLeaderEpoch)

	c.Fault(kfakeOOOSN(0))
	res := sendAll(t, ctx, p, prec(0, "v2"))
	mustOK(t, res)
	after := wantOneEpochBump(t, p, before)
	rs, ok := res[0].Recovery.(producer.ResequencedNoLoss)
	if !ok || rs.From != (producer.BatchIdentity{Producer: before, BaseSequence: 2}) || rs.To != (producer.BatchIdentity{Producer: after, BaseSequence: 0}) {
		t.Fatalf("recovery %#v; want ResequencedNoLoss %v#2 → %v#0", res[0].Recovery, before, after)
	}
	if err := checks.Wait(ctx, 1); err != nil {
		t.Fatalf("no acked-write check after a proven gap: %v", err)
	}
	os := rec.Outcomes()
	if kinds(os) != "ProvenGap,ResequencedNoLoss" {
		t.Fatalf("outcomes %s; want ProvenGap,ResequencedNoLoss", kinds(os))
	}
	g := os[0].(producer.ProvenGap)
	if g.Producer != before || g.LastAckedSequence != 1 || g.LastAckedOffset != 1 || g.RejectedSequence != 2 || !errors.Is(g.Cause.Err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("gap %+v", g)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "v3")))
	wantNoLost(t, rec)
	log := wantLog(t, c, 0, vals("v", 0, 4))
	for i, r := range log {
		want := before
		if i >= 2 {
			want = after
		}
		if r.ProducerID != want.ID || r.ProducerEpoch != want.Epoch {
			t.Fatalf("record %d written by %d/%d, want %v", i, r.ProducerID, r.ProducerEpoch, want)
		}
	}
	if p.Bumps() != 1 {
		t.Fatalf("%d bumps", p.Bumps())
	}
}

// OUT_OF_ORDER_SEQUENCE_NUMBER on the first batch under a fresh identity
// (nothing acknowledged): PossibleGap rather than ProvenGap, no ledger
// check (nothing acknowledged to check), one bump.
func TestOutOfOrderWithNothingAckedIsPossibleGap(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	c.Fault(kfakeOOOSN(0))
	res := sendAll(t, ctx, p, prec(0, "v0"))
	mustOK(t, res)
	if p.Bumps() != 1 || p.ProducerID().Epoch != 1 {
		t.Fatalf("identity %v, %d bumps", p.ProducerID(), p.Bumps())
	}
	if k := kinds(rec.Outcomes()); k != "PossibleGap,ResequencedNoLoss" {
		t.Fatalf("outcomes %s", k)
	}
	wantLog(t, c, 0, []string{"v0"})
}

// OUT_OF_ORDER_SEQUENCE_NUMBER on batches behind a head batch that failed
// retriably, with several requests in flight: the head batch is resent
// unchanged, then each later batch in order, unchanged: no bump, no
// outcome, the log in order without duplicates.
func TestOutOfOrderBehindFailedHeadResendsWithoutBump(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.BatchMaxBytes(1024))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "first"))) // leaves solo mode: pipelining allowed

	// Hold the next request long enough for the producer to pipeline more
	// behind it, then refuse it (not appended). The requests behind it
	// reach kfake with a sequence gap: OUT_OF_ORDER_SEQUENCE_NUMBER.
	seen := watchProduce(c, 0)
	var armed atomic.Bool
	armed.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		time.Sleep(150 * time.Millisecond)
		return answerProduce(kr.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code, -1), nil, true
	})
	value := string(make([]byte, 300))
	var rs []*producer.Record
	for i := range 40 {
		rs = append(rs, prec(0, fmt.Sprintf("v%02d%s", i, value)))
	}
	res := sendAll(t, ctx, p, rs...)
	mustOK(t, res)
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	if os := rec.Outcomes(); len(os) != 0 {
		t.Fatalf("outcomes %s", kinds(os))
	}
	for _, r := range res {
		if r.Recovery != nil {
			t.Fatalf("record %q: recovery %v", r.Record.Value[:3], r.Recovery)
		}
	}
	// Every batch was sent under the first identity; some were sent twice
	// with the same sequence (resends unchanged) and the sequences of the
	// first sends of the pipelined batches were ahead of the refused one.
	bs := seen.batches()
	counts := map[int32]int{}
	resent := 0
	for _, b := range bs {
		if b.PID != p.ProducerID().ID || b.Epoch != 0 {
			t.Fatalf("batch %+v sent under another identity than %v", b, p.ProducerID())
		}
		counts[b.Seq]++
	}
	for _, n := range counts {
		if n > 1 {
			resent++
		}
	}
	if resent < 2 {
		t.Fatalf("batches %+v: want the refused batch and at least one pipelined batch behind it resent", bs)
	}
	want := []string{"first"}
	for _, r := range rs {
		want = append(want, string(r.Value))
	}
	wantLog(t, c, 0, want)
}

// UNKNOWN_PRODUCER_ID with a log start offset above everything the
// partition acknowledged: retention removed the records and the producer
// state with them. Nothing is lost: one bump, ResequencedNoLoss, no gap
// outcome, no acked-write check.
func TestUnknownProducerIDAfterRetentionNoLoss(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 2)...))
	before := p.ProducerID()
	checks := observe(c, kmsg.OffsetForLeaderEpoch)
	answerProduceOnce(c, kerr.UnknownProducerID.Code, 5, 0)
	res := sendAll(t, ctx, p, prec(0, "v2"))
	mustOK(t, res)
	if _, ok := res[0].Recovery.(producer.ResequencedNoLoss); !ok {
		t.Fatalf("recovery %#v", res[0].Recovery)
	}
	wantOneEpochBump(t, p, before)
	time.Sleep(100 * time.Millisecond)
	if k := kinds(rec.Outcomes()); k != "ResequencedNoLoss" {
		t.Fatalf("outcomes %s; want ResequencedNoLoss only", k)
	}
	if checks.Hits() != 0 {
		t.Fatalf("%d OffsetForLeaderEpoch checks for a loss-free UNKNOWN_PRODUCER_ID", checks.Hits())
	}
	wantLog(t, c, 0, vals("v", 0, 3))
}

// UNKNOWN_PRODUCER_ID without a log start offset (-1): the producer cannot
// rule out a loss. PossibleGap (with the last acknowledged offset), the
// ledger check asks the leader and finds nothing lost, one bump.
func TestUnknownProducerIDUnknownLogStartChecksLedger(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 3)...))
	checks := observe(c, kmsg.OffsetForLeaderEpoch)
	answerProduceOnce(c, kerr.UnknownProducerID.Code, -1, 0)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v3")))
	if err := checks.Wait(ctx, 1); err != nil {
		t.Fatal("no acked-write check")
	}
	os := rec.Outcomes()
	if kinds(os) != "PossibleGap,ResequencedNoLoss" {
		t.Fatalf("outcomes %s", kinds(os))
	}
	if g := os[0].(producer.PossibleGap); g.LastAckedOffset != 2 || g.LastAckedSequence != 2 || g.LogStartOffset != -1 {
		t.Fatalf("gap %+v", g)
	}
	wantNoLost(t, rec)
	if p.Bumps() != 1 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	wantLog(t, c, 0, vals("v", 0, 4))
}

// A proven gap whose leader really lost acknowledged records: the ack
// ledger's check (OffsetForLeaderEpoch, then a probe fetch) finds the lost
// range and OnAckedWritesLost reports exactly it.
func TestProvenGapReportsLostRange(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 1)...))
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 1, 3)...))
	id := p.ProducerID()

	// From now on the leader's log ends at offset 1: OffsetForLeaderEpoch
	// answers (0, 1), and fetches from 1 find nothing.
	var truncated atomic.Bool
	truncated.Store(true)
	truncateLeader(t, c, &truncated, nil, 1, func(int32) int32 { return 0 })
	c.Fault(kfakeOOOSN(0))
	mustOK(t, sendAll(t, ctx, p, prec(0, "v3")))
	eventually(t, 3*time.Second, "no lost-write report", func() bool { return len(rec.Lost()) > 0 })
	time.Sleep(50 * time.Millisecond)
	truncated.Store(false)
	lost := rec.Lost()
	if len(lost) != 1 || lost[0].From != 1 || lost[0].To != 3 || lost[0].Producer != id || lost[0].FirstSequence != 1 {
		t.Fatalf("lost %+v; want offsets [1, 3) of %v from sequence 1", lost, id)
	}
	if k := kinds(rec.Outcomes()); k != "ProvenGap,ResequencedNoLoss" {
		t.Fatalf("outcomes %s", k)
	}
}

// INVALID_PRODUCER_EPOCH and INVALID_PRODUCER_ID_MAPPING on an idempotent
// producer: a new producer ID (not epoch+1), the batch resent under it
// from sequence 0, ResequencedNoLoss.
func TestInvalidEpochTakesNewProducerID(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.InvalidProducerEpoch, kerr.InvalidProducerIDMapping} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c)
			ctx := testCtx(t, 10*time.Second)
			mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 2)...))
			before := p.ProducerID()
			c.Fault(produceFault(0, code))
			res := sendAll(t, ctx, p, precs(0, "v", 2, 4)...)
			mustOK(t, res)
			after := p.ProducerID()
			if after.ID == before.ID || after.Epoch != 0 || p.Bumps() != 1 {
				t.Fatalf("identity %v → %v, %d bumps; want a new producer ID", before, after, p.Bumps())
			}
			if _, ok := res[0].Recovery.(producer.ResequencedNoLoss); !ok {
				t.Fatalf("recovery %#v", res[0].Recovery)
			}
			if k := kinds(rec.Outcomes()); k != "ResequencedNoLoss" && k != "ResequencedNoLoss,ResequencedNoLoss" {
				t.Fatalf("outcomes %s", k)
			}
			log := wantLog(t, c, 0, vals("v", 0, 4))
			if log[3].ProducerID != after.ID {
				t.Fatalf("last record written by %d, want %v", log[3].ProducerID, after)
			}
		})
	}
}

// Errors a broker may answer after appending (REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND; kfake appends, then answers them): the
// batch is resent unchanged and the broker deduplicates it. The record is in
// the log once, at the offset its report gives; no bump, no outcome.
func TestAppendedThenErrorIsDeduplicated(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c)
			ctx := testCtx(t, 10*time.Second)
			mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))
			f := c.Fault(produceFault(0, code))
			// Hold every request after the faulted one, to see that the
			// faulted one was appended although answered with an error.
			release := holdProduce(c, 1)
			pr := sendAsync(t, ctx, p, precs(0, "v", 1, 3)...)
			if err := f.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "the faulted batch was not appended", func() bool { return endOffset(t, c, 0, false) >= 2 })
			release()
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			res := pr.wait(5 * time.Second)
			mustOK(t, res)
			if f.Hits() != 1 {
				t.Fatalf("fault hit %d times", f.Hits())
			}
			if res[0].Offset != 1 || res[1].Offset != 2 || res[0].Recovery != nil {
				t.Fatalf("reports %+v", res)
			}
			wantNoRecovery(t, p, rec)
			wantLog(t, c, 0, vals("v", 0, 3))
		})
	}
}

// DUPLICATE_SEQUENCE_NUMBER (brokers before 1.1): the batch is in the log;
// it is acknowledged without an offset.
func TestDuplicateSequenceAcksWithoutOffset(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))
	// The first attempt is appended but answered REQUEST_TIMED_OUT; the
	// resend is answered DUPLICATE_SEQUENCE_NUMBER.
	c.Fault(produceFault(0, kerr.RequestTimedOut))
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(1) != 2 {
			return nil, nil, false
		}
		return answerProduce(kr.(*kmsg.ProduceRequest), kerr.DuplicateSequenceNumber.Code, -1, 0), nil, true
	})
	res := sendAll(t, ctx, p, prec(0, "v1"))
	if res[0].Err != nil || res[0].Offset != -1 {
		t.Fatalf("report %+v; want acknowledged, offset -1", res[0])
	}
	wantNoRecovery(t, p, rec)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v2")))
	wantLog(t, c, 0, vals("v", 0, 3))
}

// A batch whose request got no answer (the leader held it past the request
// timeout) is resent unchanged: when the held request is processed after
// the resend, the broker deduplicates it. Once in the log, no bump.
func TestNoResponseResendIsDeduplicated(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.RequestTimeout(300*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if first.CompareAndSwap(true, false) {
			c.KeepControl()
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	produced := observe(c, kmsg.Produce)
	res := sendAll(t, ctx, p, precs(0, "v", 1, 3)...)
	mustOK(t, res)
	if produced.Hits() != 1 {
		t.Fatalf("%d produce requests processed before the held one; want the resend only", produced.Hits())
	}
	close(release)
	if err := produced.Wait(ctx, 2); err != nil {
		t.Fatal("held request never processed")
	}
	if res[0].Offset != 1 || res[0].Recovery != nil {
		t.Fatalf("report %+v", res[0])
	}
	wantNoRecovery(t, p, rec)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v3")))
	wantLog(t, c, 0, vals("v", 0, 4))
}

// Errors that refuse a batch before appending it and can clear (leadership,
// replicas, storage, unknown codes…): resent unchanged until acknowledged,
// order kept, no bump, no outcome.
func TestRetriableErrorsResendUnchanged(t *testing.T) {
	codes := []*kerr.Error{
		kerr.UnknownTopicOrPartition, kerr.LeaderNotAvailable, kerr.NotEnoughReplicas,
		kerr.NotLeaderForPartition, kerr.NetworkException, kerr.KafkaStorageError,
		kerr.UnknownServerError, kerr.FencedLeaderEpoch,
		{Message: "UNKNOWN_CODE_9999", Code: 9999},
	}
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)
	var want []string
	for i, code := range codes {
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: code, Count: 2})
		rs := precs(0, fmt.Sprintf("%d-", i), 0, 3)
		res := sendAll(t, ctx, p, rs...)
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("%s: %v", code.Message, r.Err)
			}
		}
		if f.Hits() != 2 {
			t.Fatalf("%s: fault hit %d times", code.Message, f.Hits())
		}
		for _, r := range rs {
			want = append(want, string(r.Value))
		}
	}
	wantNoRecovery(t, p, rec)
	wantLog(t, c, 0, want)
}

// Errors that refuse a batch for good (an idempotent producer does not
// resend them): the batch's records fail with the code; the partition's
// sequences are given back (the refused batch was the tail), so the next
// batch needs no bump.
func TestRefusedBatchFailsWithoutBump(t *testing.T) {
	codes := []*kerr.Error{
		kerr.TopicAuthorizationFailed, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp,
		kerr.InvalidTxnState, kerr.TransactionAbortable, kerr.UnsupportedCompressionType,
	}
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "ok")))
	want := []string{"ok"}
	for i, code := range codes {
		c.Fault(produceFault(0, code))
		res := sendAll(t, ctx, p, prec(0, fmt.Sprintf("bad%d", i)))
		var pe *errors.PartitionError
		if !errors.Is(res[0].Err, code) || !errors.As(res[0].Err, &pe) || pe.Partition != 0 || errors.Is(res[0].Err, errors.ErrUnknownOutcome) {
			t.Fatalf("%s: report error %v", code.Message, res[0].Err)
		}
		good := fmt.Sprintf("good%d", i)
		mustOK(t, sendAll(t, ctx, p, prec(0, good)))
		want = append(want, good)
	}
	if p.Bumps() != 0 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	// Each refused batch is also reported to OnOutcome, with its cause.
	os := rec.Outcomes()
	if len(os) != len(codes) {
		t.Fatalf("outcomes %s; want one Failed per refused batch", kinds(os))
	}
	for i, o := range os {
		f, ok := o.(producer.Failed)
		if !ok || !errors.Is(f.Err, codes[i]) || f.MaybeWritten || f.Records != 1 {
			t.Fatalf("outcome %d: %#v", i, o)
		}
	}
	wantLog(t, c, 0, want)
}

// MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE on multi-record batches: split
// (recursively) until accepted, every record delivered once, in order; a
// single record too large fails alone.
func TestTooLargeSplits(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.MessageTooLarge, kerr.RecordListTooLarge} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c, producer.Linger(time.Second))
			ctx := testCtx(t, 10*time.Second)
			// The leader takes at most 3 records per batch, and none
			// with the value "huge".
			var refused atomic.Int32
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: code, Count: -1,
				When: func(kr kmsg.Request) bool {
					b, ok := batchOf(kr.(*kmsg.ProduceRequest), 0)
					if ok && (b.NumRecords > 3 || len(b.Records) > 1000) {
						refused.Add(1)
						return true
					}
					return false
				}})
			res := sendAll(t, ctx, p, precs(0, "v", 0, 10)...)
			mustOK(t, res)
			for i, r := range res {
				if r.Offset != int64(i) {
					t.Fatalf("record %d at offset %d", i, r.Offset)
				}
			}
			if refused.Load() < 3 {
				t.Fatalf("only %d refusals: the batch was not split recursively", refused.Load())
			}
			huge := prec(0, string(make([]byte, 2000)))
			res = sendAll(t, ctx, p, huge)
			if !errors.Is(res[0].Err, code) || errors.Is(res[0].Err, errors.ErrUnknownOutcome) {
				t.Fatalf("single huge record: %v", res[0].Err)
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "after")))
			if p.Bumps() != 0 || kinds(rec.Outcomes()) != "Failed" {
				t.Fatalf("%d bumps, outcomes %s", p.Bumps(), kinds(rec.Outcomes()))
			}
			wantLog(t, c, 0, append(vals("v", 0, 10), "after"))
		})
	}
}

// Two partitions on one leader answered OUT_OF_ORDER_SEQUENCE_NUMBER in
// the same response: one bump for the incident, both partitions rewritten
// under it.
func TestOneBumpPerIncident(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, rec := newRecorded(t, c, producer.Linger(time.Minute))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a0"), prec(1, "b0")))
	before := p.ProducerID()
	// Both batches go in one request (lingering until the flush): answer
	// it OUT_OF_ORDER_SEQUENCE_NUMBER for both partitions.
	var answered atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		_, ok0 := batchOf(req, 0)
		_, ok1 := batchOf(req, 1)
		if ok0 && ok1 && answered.CompareAndSwap(false, true) {
			return answerProduce(req, kerr.OutOfOrderSequenceNumber.Code, -1), nil, true
		}
		return nil, nil, false
	})
	mustOK(t, sendAll(t, ctx, p, prec(0, "a1"), prec(1, "b1")))
	if !answered.Load() {
		t.Fatal("the two batches did not share a request")
	}
	after := p.ProducerID()
	if p.Bumps() != 1 || after.Epoch != before.Epoch+1 {
		t.Fatalf("identity %v → %v, %d bumps; want one", before, after, p.Bumps())
	}
	if k := kinds(rec.Outcomes()); k != "ProvenGap,ResequencedNoLoss,ProvenGap,ResequencedNoLoss" {
		t.Fatalf("outcomes %s", k)
	}
	wantLog(t, c, 0, []string{"a0", "a1"})
	wantLog(t, c, 1, []string{"b0", "b1"})
}

// Random retriable faults (refused before or answered after appending) on
// a pipelined stream to one partition never reorder or duplicate it.
func TestRandomFaultsKeepOrder(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.BatchMaxBytes(1024))
	ctx := testCtx(t, 20*time.Second)
	pick := func(kmsg.Request) bool { return rand.IntN(10) == 0 }
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.NotEnoughReplicas} {
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: code, Count: -1, When: pick})
	}
	rs := precs(0, "v", 0, 2000)
	res := sendAll(t, ctx, p, rs...)
	mustOK(t, res)
	wantNoRecovery(t, p, rec)
	log := wantLog(t, c, 0, vals("v", 0, 2000))
	for i, r := range res {
		if r.Offset != log[i].Offset {
			t.Fatalf("record %d reported at %d, in the log at %d", i, r.Offset, log[i].Offset)
		}
	}
}

// A batch that may have been appended (REQUEST_TIMED_OUT after the append)
// and whose resend then proves the leader lost state (OUT_OF_ORDER on the
// next sequence) must be rewritten under a new epoch: the broker cannot
// deduplicate it any more. The application is told: the report carries
// PossibleDuplicate (From the old identity, To the new), OnOutcome gets
// ProvenGap then PossibleDuplicate, and the log indeed holds the records
// twice.
func TestMaybeWrittenRewriteIsPossibleDuplicate(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "v0")))
	before := p.ProducerID()
	c.Fault(produceFault(0, kerr.RequestTimedOut))
	c.Fault(kfakeOOOSN(0))
	res := sendAll(t, ctx, p, prec(0, "v1"))
	mustOK(t, res)
	after := wantOneEpochBump(t, p, before)
	pd, ok := res[0].Recovery.(producer.PossibleDuplicate)
	if !ok || pd.From != (producer.BatchIdentity{Producer: before, BaseSequence: 1}) || pd.To != (producer.BatchIdentity{Producer: after, BaseSequence: 0}) || pd.Records != 1 {
		t.Fatalf("recovery %#v; want PossibleDuplicate %v#1 → %v#0", res[0].Recovery, before, after)
	}
	if k := kinds(rec.Outcomes()); k != "ProvenGap,PossibleDuplicate" {
		t.Fatalf("outcomes %s", k)
	}
	if res[0].Offset != 2 {
		t.Fatalf("reported at %d; want the rewritten copy's offset 2", res[0].Offset)
	}
	log := wantLog(t, c, 0, []string{"v0", "v1", "v1"})
	if log[1].ProducerEpoch != before.Epoch || log[2].ProducerEpoch != after.Epoch {
		t.Fatalf("copies written under epochs %d and %d", log[1].ProducerEpoch, log[2].ProducerEpoch)
	}
}

// A leader change after which the new leader lacks acknowledged records
// (an unclean election): the producer notices the new leader epoch in
// metadata, asks the ack ledger's question (OffsetForLeaderEpoch), confirms
// with a probe, and reports the exact lost range. Without a loss, nothing
// is reported.
func TestLeaderChangeChecksAckedWrites(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lose), func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond))
			ctx := testCtx(t, 10*time.Second)
			for i := range 5 {
				mustOK(t, sendAll(t, ctx, p, prec(0, fmt.Sprintf("v%d", i))))
			}
			id := p.ProducerID()
			var truncated atomic.Bool
			truncated.Store(lose)
			// The new leader's log ends at 2: epoch 0 ended there and
			// epoch 1 (current) has nothing yet; fetches find nothing.
			var asked atomic.Int32
			truncateLeader(t, c, &truncated, &asked, 2, func(e int32) int32 { return min(e, 1) })
			if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
				t.Fatal(err)
			}
			eventually(t, 3*time.Second, "no acked-write check after the leader change", func() bool { return asked.Load() > 0 })
			if lose {
				eventually(t, 3*time.Second, "no lost-write report", func() bool { return len(rec.Lost()) > 0 })
				time.Sleep(50 * time.Millisecond)
				l := rec.Lost()
				if len(l) != 1 || l[0].From != 2 || l[0].To != 5 || l[0].Producer != id || l[0].LeaderEpoch != 0 || l[0].CurrentLeaderEpoch != 1 {
					t.Fatalf("lost %+v; want offsets [2, 5) of epoch 0, current epoch 1", l)
				}
				truncated.Store(false)
				return
			}
			mustOK(t, sendAll(t, ctx, p, prec(0, "v5")))
			wantNoLost(t, rec)
			if p.Bumps() != 0 || len(rec.Outcomes()) != 0 {
				t.Fatalf("%d bumps, outcomes %s after a clean leader change", p.Bumps(), kinds(rec.Outcomes()))
			}
			wantLog(t, c, 0, vals("v", 0, 6))
		})
	}
}

// Epoch exhaustion: a bump from epoch 32767 (math.MaxInt16) cannot go to the
// next epoch, so the producer asks InitProducerId for a new producer ID and
// continues under it at epoch 0 and sequence 0, without a loss or a
// duplicate. The first InitProducerId is answered at epoch 32766 so that
// two bumps reach it.
func TestEpochExhaustionTakesNewProducerID(t *testing.T) {
	c := newCluster(t, 1)
	const oldID = 4242
	var inits atomic.Int32
	c.ControlKey(int16(kmsg.InitProducerID), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if inits.Add(1) > 1 {
			return nil, nil, false // kfake answers: a new producer ID at epoch 0
		}
		resp := kr.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = oldID, math.MaxInt16-1
		return resp, nil, true
	})
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 0, 2)...))
	if id := p.ProducerID(); id.ID != oldID || id.Epoch != math.MaxInt16-1 {
		t.Fatalf("producer %v; want %d/%d", id, oldID, math.MaxInt16-1)
	}
	// UNKNOWN_PRODUCER_ID with the log start past everything acknowledged
	// (no loss), twice: the first bump reaches 32767, the second needs a
	// new producer ID.
	for i, want := range []int16{math.MaxInt16, 0} {
		answerProduceOnce(c, kerr.UnknownProducerID.Code, 100, 0)
		res := sendAll(t, ctx, p, prec(0, fmt.Sprintf("v%d", 2+i)))
		mustOK(t, res)
		id := p.ProducerID()
		if id.Epoch != want || (want == 0) != (id.ID != oldID) {
			t.Fatalf("after bump %d: producer %v; want epoch %d (a new ID: %v)", i+1, id, want, want == 0)
		}
		if _, ok := res[0].Recovery.(producer.ResequencedNoLoss); !ok {
			t.Fatalf("bump %d: recovery %#v", i+1, res[0].Recovery)
		}
	}
	if n := inits.Load(); n != 2 {
		t.Fatalf("%d InitProducerId requests; want 2 (the start and the exhaustion)", n)
	}
	if p.Bumps() != 2 {
		t.Fatalf("%d bumps", p.Bumps())
	}
	// Under the new ID the sequence starts again at 0, and the log holds
	// every record once, in order.
	mustOK(t, sendAll(t, ctx, p, precs(0, "v", 4, 6)...))
	log := wantLog(t, c, 0, vals("v", 0, 6))
	if last := log[len(log)-1]; last.ProducerID == oldID || last.ProducerEpoch != 0 {
		t.Fatalf("last record written by %d/%d", last.ProducerID, last.ProducerEpoch)
	}
	if k := kinds(rec.Outcomes()); k != "ResequencedNoLoss,ResequencedNoLoss" {
		t.Fatalf("outcomes %s", k)
	}
}

// truncateLeader makes the partition leader answer, while truncated is set,
// as one whose log ends at end: OffsetForLeaderEpoch(e) answers (epochOf(e),
// end) and a fetch finds the record batches of partition 0 that lie below
// end (as they are when it is called) and nothing past them, with the high
// watermark at end. asked, when set, counts the OffsetForLeaderEpoch
// requests.
func truncateLeader(t *testing.T, c *kfake.Cluster, truncated *atomic.Bool, asked *atomic.Int32, end int64, epochOf func(int32) int32) {
	t.Helper()
	kept := batchesBelow(t, c, end)
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if asked != nil {
			asked.Add(1)
		}
		if !truncated.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, epochOf(rp.LeaderEpoch), end
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !truncated.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = rp.Partition, end, end, 0
				for _, b := range kept {
					if b.last >= rp.FetchOffset {
						sp.RecordBatches = append(sp.RecordBatches, b.raw...)
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// rawBatch is one record batch as a fetch returns it, and its last offset.
type rawBatch struct {
	raw  []byte
	last int64
}

// batchesBelow reads partition 0's record batches whose records all lie
// below end.
func batchesBelow(t *testing.T, c *kfake.Cluster, end int64) []rawBatch {
	t.Helper()
	if end <= 0 {
		return nil
	}
	cl := oracle(t, c)
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, c.TopicInfo(topic).TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.PartitionMaxBytes = 0, -1, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx := testCtx(t, 5*time.Second)
	kr, err := cl.Broker(int(c.LeaderFor(topic, 0))).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := kr.(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("fetch answer %+v", resp)
	}
	var out []rawBatch
	for raw := resp.Topics[0].Partitions[0].RecordBatches; len(raw) >= 12; {
		var b kmsg.RecordBatch
		n := 12 + int(int32(binary.BigEndian.Uint32(raw[8:12])))
		if n > len(raw) || b.ReadFrom(raw[:n]) != nil {
			t.Fatalf("fetched record batches unreadable at %d bytes", n)
		}
		last := b.FirstOffset + int64(b.LastOffsetDelta)
		if last < end {
			out = append(out, rawBatch{raw: raw[:n:n], last: last})
		}
		raw = raw[n:]
	}
	if len(out) == 0 || out[len(out)-1].last != end-1 {
		t.Fatalf("batches below %d: %d, ending at the wrong offset", end, len(out))
	}
	return out
}
