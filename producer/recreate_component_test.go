package producer_test

// A Produce answer is about the topic incarnation its request named: when
// the topic is deleted and created again while the request is on the wire,
// and the producer's metadata learns of it before the answer is handled,
// the answer is still judged against the old incarnation.

import (
	"context"
	stderrors "errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// recreateTopic deletes topic and creates it again with partitions
// partitions (a new topic ID), returning the new ID.
func recreateTopic(t *testing.T, c *kfake.Cluster, partitions int32) [16]byte {
	t.Helper()
	cl := oracle(t, c)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TopicNames = []string{topic}
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	if len(dresp.Topics) != 1 || dresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("DeleteTopics: %+v", dresp.Topics)
	}
	cr := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, partitions, 1
	cr.Topics = append(cr.Topics, ct)
	cresp, err := cr.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if len(cresp.Topics) != 1 || cresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: %+v", cresp.Topics)
	}
	return cresp.Topics[0].TopicID
}

// recreateAndAdopt recreates topic (one partition) and waits until p has
// adopted its new topic ID.
func recreateAndAdopt(t *testing.T, ctx context.Context, c *kfake.Cluster, p *producer.Producer) {
	t.Helper()
	newID := recreateTopic(t, c, 1)
	eventually(t, 5*time.Second, "producer adopts the new topic ID", func() bool {
		_ = producer.RefreshMetadata(ctx, p)
		return producer.PartitionTopicID(p, topic, 0) == newID
	})
}

// holdAcked holds the next Produce (seen is closed when it arrives) until
// release is closed, then answers it as the leader answers an append:
// acknowledged at offset base under the topic ID the request named, which
// named holds.
func holdAcked(c *kfake.Cluster, base int64) (seen, release chan struct{}, named *atomic.Value) {
	return holdAnswered(c, base, 0)
}

// holdAnswered is holdAcked answering with code (an acknowledgement:
// none, or DUPLICATE_SEQUENCE_NUMBER as brokers before 1.1 answer a batch
// they already hold).
func holdAnswered(c *kfake.Cluster, base int64, code int16) (seen, release chan struct{}, named *atomic.Value) {
	seen, release, named = make(chan struct{}), make(chan struct{}), new(atomic.Value)
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		named.Store(req.Topics[0].TopicID)
		close(seen)
		c.SleepControl(func() { <-release })
		resp := answerProduce(req, code, 0)
		resp.Topics[0].Partitions[0].BaseOffset = base
		return resp, nil, true
	})
	return seen, release, named
}

// An idempotent producer's batch appended to the old incarnation, whose
// answer is handled after the producer learned of the recreation: the batch
// is not sent again to the new incarnation (it was written once, to a log
// now deleted), and its report says so precisely: failed with
// ErrTopicIDChanged, not acknowledged with an offset of the deleted log, and
// not an unknown outcome (the old incarnation answered).
func TestAnswerOfRecreatedTopicJudgedByItsIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)

	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	oldID := producer.PartitionTopicID(p, topic, 0)
	if oldID == ([16]byte{}) {
		t.Fatal("no topic ID (Produce v13 expected)")
	}

	// The next Produce is held, then answered as the old incarnation's
	// leader answers an append: acknowledged at offset 1 under the topic
	// ID the request named.
	seen, release, named := holdAcked(c, 1)
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	if got := named.Load().([16]byte); got != oldID {
		t.Fatalf("request named topic ID %x, want the old %x", got, oldID)
	}

	recreateAndAdopt(t, ctx, c, p)
	close(release)

	res := pr.wait(5 * time.Second)[0]
	if res.Err == nil {
		t.Fatalf("record b of the deleted incarnation reported acknowledged at offset %d", res.Offset)
	}
	if !stderrors.Is(res.Err, errors.ErrTopicIDChanged) || stderrors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("record b: %v; want ErrTopicIDChanged and not an unknown outcome", res.Err)
	}
	var pe *errors.PartitionError
	if !stderrors.As(res.Err, &pe) || pe.Offset != 1 {
		t.Fatalf("record b: %v; want a PartitionError naming its offset 1 in the deleted log", res.Err)
	}
	if res.Recovery != nil {
		t.Fatalf("record b: recovery outcome %T", res.Recovery)
	}

	// The new incarnation holds only what was produced to it, sequenced
	// afresh there: no gap, no bump, no outcome.
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	wantLog(t, c, 0, []string{"c"})
	wantNoRecovery(t, p, rec)
	wantNoLost(t, rec)
}

// The same for a producer without idempotence: the batch appended to the
// old incarnation is not sent again to the new one.
func TestAnswerOfRecreatedTopicJudgedByItsIncarnationPlain(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.DisableIdempotence())
	ctx := testCtx(t, 20*time.Second)

	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	seen, release, _ := holdAcked(c, 1)
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	recreateAndAdopt(t, ctx, c, p)
	close(release)

	res := pr.wait(5 * time.Second)[0]
	if !stderrors.Is(res.Err, errors.ErrTopicIDChanged) || stderrors.Is(res.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("record b: offset %d, err %v; want ErrTopicIDChanged and not an unknown outcome", res.Offset, res.Err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "c")))
	wantLog(t, c, 0, []string{"c"})
	wantNoLost(t, rec)
}

// In a transaction, the record acknowledged by the deleted incarnation
// fails, and so the transaction cannot commit: whether the old leader
// acknowledged it as appended or as a duplicate of what it held.
func TestAnswerOfRecreatedTopicAbortsTransaction(t *testing.T) {
	for name, code := range map[string]int16{"appended": 0, "duplicate": kerr.DuplicateSequenceNumber.Code} {
		t.Run(name, func(t *testing.T) { testAnswerOfRecreatedTopicAbortsTransaction(t, code) })
	}
}

func testAnswerOfRecreatedTopicAbortsTransaction(t *testing.T, code int16) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-recreate")
	ctx := testCtx(t, 20*time.Second)
	commitTxn(t, ctx, p, prec(0, "a"))

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	seen, release, _ := holdAnswered(c, 2, code)
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	onWire(t, seen)
	recreateAndAdopt(t, ctx, c, p)
	close(release)

	if res := pr.wait(5 * time.Second)[0]; !stderrors.Is(res.Err, errors.ErrTopicIDChanged) {
		t.Fatalf("record b: offset %d, err %v; want ErrTopicIDChanged", res.Offset, res.Err)
	}
	if err := p.CommitTransaction(ctx); !stderrors.Is(err, producer.ErrAbortRequired) || !stderrors.Is(err, errors.ErrTopicIDChanged) {
		t.Fatalf("CommitTransaction: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
}

// After a topic is deleted and created again, the producer's sequences for
// its partition start afresh: the new partition holds no state for the
// producer ID and accepts sequence 0 under the current epoch, and refuses
// any other first sequence. The next batch is sent with sequence 0, with
// no gap reported and no epoch bump: nothing written to the new
// incarnation is lost (the old incarnation's writes went with the topic,
// which metadata reports as a recreation).
func TestRecreatedTopicRestartsSequences(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c)
	ctx := testCtx(t, 20*time.Second)

	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
	before := p.ProducerID()
	recreateAndAdopt(t, ctx, c, p)

	sent := watchProduce(c, 0)
	mustOK(t, sendAll(t, ctx, p, prec(0, "c"), prec(0, "d")))
	wantLog(t, c, 0, []string{"c", "d"})
	wantNoRecovery(t, p, rec)
	wantNoLost(t, rec)
	if got := p.ProducerID(); got != before {
		t.Fatalf("identity %v → %v", before, got)
	}
	bs := sent.batches()
	if len(bs) == 0 || bs[0].Seq != 0 || bs[0].Epoch != before.Epoch || bs[0].PID != before.ID {
		t.Fatalf("batches sent to the new incarnation %+v; want the first at sequence 0 under %v", bs, before)
	}
}

// A batch the old incarnation answered without a definite "not appended"
// (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) may be in the old
// log. Sent to the new incarnation, it is sequenced afresh there (never
// with a sequence of the old one), and its report says what is true: it
// is acknowledged, and it is a PossibleDuplicate caused by the recreation
// (a consumer that read the deleted log may have seen it there), not a
// plain success. Batches queued behind it follow it, in order, with no
// gap and no bump.
func TestRecreatedTopicMaybeWrittenBatchIsPossibleDuplicate(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c)
			ctx := testCtx(t, 20*time.Second)

			release := make(chan struct{})
			seen := make(chan struct{})
			c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				close(seen)
				c.SleepControl(func() { <-release })
				return answerProduce(kr.(*kmsg.ProduceRequest), code.Code, 0), nil, true
			})
			pb := sendAsync(t, ctx, p, prec(0, "b"))
			onWire(t, seen)
			before := p.ProducerID()
			pc := sendAsync(t, ctx, p, prec(0, "c"), prec(0, "d"))
			recreateAndAdopt(t, ctx, c, p)
			sent := watchProduce(c, 0)
			close(release)

			res := pb.wait(5 * time.Second)[0]
			if res.Err != nil {
				t.Fatalf("record b: %v", res.Err)
			}
			pd, ok := res.Recovery.(producer.PossibleDuplicate)
			if !ok || !stderrors.Is(pd.Cause.Err, errors.ErrTopicIDChanged) {
				t.Fatalf("record b: recovery %#v; want a PossibleDuplicate caused by ErrTopicIDChanged", res.Recovery)
			}
			if pd.To.BaseSequence != 0 {
				t.Fatalf("record b resent as %v; want sequence 0", pd.To)
			}
			mustOK(t, pc.wait(5*time.Second))
			wantLog(t, c, 0, []string{"b", "c", "d"})
			if got := kinds(rec.Outcomes()); got != "PossibleDuplicate" || p.Bumps() != 0 || p.ProducerID() != before {
				t.Fatalf("outcomes %s, %d bumps, identity %v → %v; want one PossibleDuplicate, no bump", got, p.Bumps(), before, p.ProducerID())
			}
			for i, b := range sent.batches() {
				if b.PID != before.ID || b.Epoch != before.Epoch || (i == 0 && b.Seq != 0) {
					t.Fatalf("batches sent to the new incarnation %+v; want sequences from 0 under %v", sent.batches(), before)
				}
			}
			wantNoLost(t, rec)
		})
	}
}

// In a transaction, a record the old incarnation acknowledged before the
// topic was deleted and created again went with the deleted log: the
// transaction cannot commit it, so it becomes abortable when the producer
// learns of the new incarnation, and the next transaction commits to the
// new one.
func TestRecreatedTopicAbortsTransactionWithAckedRecord(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newTxnProducer(t, c, "txn-recreate-acked")
	ctx := testCtx(t, 20*time.Second)

	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	recreateAndAdopt(t, ctx, c, p)
	if err := p.CommitTransaction(ctx); !stderrors.Is(err, producer.ErrAbortRequired) || !stderrors.Is(err, errors.ErrTopicIDChanged) {
		t.Fatalf("CommitTransaction: %v; want ErrAbortRequired wrapping ErrTopicIDChanged", err)
	}
	if err := p.AbortTransaction(ctx); err != nil {
		t.Fatalf("AbortTransaction: %v", err)
	}
	commitTxn(t, ctx, p, prec(0, "b"))
	if got := committedValues(t, c, 1); len(got) != 1 || got[0] != "b" {
		t.Fatalf("committed: %q; want [b]", got)
	}
}

// A Produce blocked on a full buffer while the topic is deleted and
// created again read the topic's ID before it blocked: when it proceeds,
// the partition keeps the new incarnation's ID (which metadata holds)
// instead of going back to the deleted one's, and its record is written to
// the new incarnation. (Taken back to the deleted ID, the partition sent
// its batches to a topic that no longer exists until their delivery
// timeout: the record failed though the topic was there.)
func TestBlockedProduceKeepsTheNewIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.MaxBufferedBytes(1024), producer.BatchMaxBytes(1024),
		producer.RequestTimeout(time.Second), producer.DeliveryTimeout(3*time.Second))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))

	// A record on the wire (held) fills most of the buffer; the next
	// Produce waits for space.
	release, held := holdProduceSeen(c, 0)
	defer release()
	first := sendAsync(t, ctx, p, prec(0, "b"+strings.Repeat("x", 800)))
	onWire(t, held)
	lateValue := "late" + strings.Repeat("y", 400)
	blocked := make(chan error, 1)
	late := make(chan producer.Result, 1)
	go func() {
		blocked <- p.Produce(ctx, prec(0, lateValue), func(r producer.Result) { late <- r })
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-blocked:
		t.Fatalf("Produce did not wait for buffer space: %v", err)
	default:
	}

	recreateAndAdopt(t, ctx, c, p)
	newID := producer.PartitionTopicID(p, topic, 0)
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("blocked Produce: %v", err)
	}
	if got := producer.PartitionTopicID(p, topic, 0); got != newID {
		t.Fatalf("after the blocked Produce the partition names topic ID %x, not the new incarnation's %x", got, newID)
	}
	first.wait(10 * time.Second)
	select {
	case r := <-late:
		if r.Err != nil {
			t.Fatalf("record produced after waiting for space: %v; want acknowledged by the new incarnation", r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report for the record produced after waiting for space")
	}
	if log := values(partitionLog(t, c, 0)); slices.Index(log, lateValue) != len(log)-1 {
		t.Fatalf("the late record at %d of the new incarnation's %d records; want it once, last", slices.Index(log, lateValue), len(log))
	}
}

// The ack ledger is about one topic incarnation. When a partition adopts a
// new topic ID before the metadata loop handles the recreation's event
// (Produce's lookup reads metadata as it is now; the events wait in a
// queue), the deleted incarnation's ranges are forgotten then, so that no
// check judges them against the new log; and the event, handled later,
// keeps what the new incarnation acknowledged meanwhile (forgetting it made
// its loss undetectable).
func TestLedgerFollowsAdoptedIncarnation(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.MetadataMaxAge(time.Hour))
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	mustOK(t, sendAll(t, ctx, p, prec(0, "b")))
	id := p.ProducerID()
	newID := recreateTopic(t, c, 1)
	producer.HoldLock(p, func() {
		// The metadata loop waits for the lock: the recreation's event
		// stays queued while the refresher adopts the new ID.
		for producer.MetadataTopicID(p, topic) != newID {
			if err := producer.RefreshMetadata(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if got := producer.LedgerRangesLocked(p, topic, 0); len(got) == 0 {
			t.Fatal("no acknowledged ranges before the recreation")
		}
		producer.AdoptTopicIDLocked(p, topic, 0, newID)
		if got := producer.LedgerRangesLocked(p, topic, 0); len(got) != 0 {
			t.Fatalf("ranges of the deleted incarnation kept after the partition adopted the new one: %+v", got)
		}
		// An acknowledgement from the new incarnation.
		if err := producer.RecordAckLocked(p, topic, 0, producer.AckedRange{From: 0, To: 1, LeaderEpoch: 0, Producer: id, FirstSequence: 0}); err != nil {
			t.Fatal(err)
		}
	})
	// The queued event is handled: the ledger sees the new incarnation's
	// leader epoch.
	eventually(t, 5*time.Second, "the recreation's event never handled", func() bool {
		return producer.LedgerLeaderEpoch(p, topic, 0) == 0
	})
	producer.HoldLock(p, func() {
		if got := producer.LedgerRangesLocked(p, topic, 0); len(got) != 1 || got[0].From != 0 || got[0].To != 1 {
			t.Fatalf("ranges %+v after the recreation's event; want the new incarnation's [0, 1)", got)
		}
	})
}
