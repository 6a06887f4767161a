package producer

import (
	"context"
	"maps"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	recbatch "github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/internal/wire"
	"github.com/kepoch/kepoch/metadata"
)

// sink is the send loop of one broker. It keeps up to maxRequests Produce
// requests in flight (pipelined on one connection, answered in order), with
// at most one batch per partition per request (the broker requires it of an
// idempotent producer), retries first. A request is issued only after the
// previous one was written, so none can overtake another on the connection.
// Started on demand, owned by the Producer, stopped by Close.
type sink struct {
	p    *Producer
	id   int32
	wake chan struct{}

	wmu   sync.Mutex
	wrote chan struct{} // closed when the request being issued is written

	builder *recbatch.Builder // the sink's own: batches are encoded outside the producer's lock

	// busy: a request is on the wire (set by step before each build, read
	// by Produce to skip waking the sink for records that must wait).
	busy atomic.Bool

	run      sync.Mutex  // held while stepping
	kicked   atomic.Bool // a step is wanted
	inflight []*request  // requests on the wire, oldest first (guarded by run)
	timer    *time.Timer // linger and retry times (reset under run)
}

func (p *Producer) sinkLocked(id int32) *sink {
	if id < 0 {
		return nil
	}
	s := p.sinks[id]
	if s == nil {
		s = &sink{p: p, id: id, wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
		p.sinks[id] = s
		byID := maps.Clone(p.sinks)
		p.sinkByID.Store(&byID)
		if !p.closed {
			p.goFn(s.loop)
		}
	}
	return s
}

func (s *sink) wakeUp() {
	if s == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// written marks the request being issued as written: from the transport's
// write hook (only Produce requests of this sink are written to its
// broker, one at a time), or when the request returns without the hook
// having fired (then only if it is still the one being issued: an earlier
// request returning must not release the next one before it is written, or
// the two could reach the broker in the wrong order).
func (s *sink) written(which chan struct{}) {
	s.wmu.Lock()
	if s.wrote != nil && (which == nil || which == s.wrote) {
		close(s.wrote)
		s.wrote = nil
	}
	s.wmu.Unlock()
}

// writeHook tells each broker's sink that its Produce request was written.
type writeHook struct{ p *Producer }

func (h writeHook) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != 0 || err != nil {
		// A failed write is not "written": kgo may retry it on a new
		// connection (when nothing was written), and the next request
		// must not overtake it. The sink learns of it when the request
		// returns.
		return
	}
	m := h.p.sinkByID.Load()
	if m == nil {
		return
	}
	if s := (*m)[meta.NodeID]; s != nil {
		s.written(nil)
	}
}

// OnBrokerE2E counts EndTxn, AddPartitionsToTxn, AddOffsetsToTxn and
// TxnOffsetCommit requests written but not answered (a connection lost
// after the write), and those answered: kgo resends them itself after
// either, so their senders would not otherwise know that an earlier
// attempt may have been applied.
func (h writeHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.WriteErr != nil {
		return
	}
	lost := e2e.ReadErr != nil
	switch kmsg.Key(key) {
	case kmsg.EndTxn:
		h.p.endTxnAttempts.note(lost)
	case kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit:
		h.p.offsetsAttempts.note(lost)
	case kmsg.AddPartitionsToTxn:
		h.p.addAttempts.note(lost)
	}
}

// sent is one batch in a Produce request.
type sent struct {
	b   *pbatch
	ps  *pstate
	ref BatchRef
	id  BatchIdentity // identity to stamp (idempotent)
	// topicID is ps.topicID when the request was built (ps's mutable
	// fields are read only under the producer's lock).
	topicID [16]byte
}

// request is one Produce request on the wire; its answer (or failure) is
// delivered on done.
type request struct {
	batches []sent
	done    chan reply
}

type reply struct {
	resp     *kmsg.ProduceResponse
	err      error
	returned bool
}

// loop turns wake-ups (records ready, a linger or retry timer) into steps.
// Answers are stepped by the goroutine that received them (kick), which
// saves a goroutine hand-off per request on the path from an answer to the
// next request.
func (s *sink) loop() {
	p := s.p
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-s.wake:
		case <-s.timer.C:
		}
		s.kick()
	}
}

// kick runs step, or, if another goroutine is running it, makes that
// goroutine run it again: one step at a time, none lost.
func (s *sink) kick() {
	s.kicked.Store(true)
	for s.kicked.Load() && s.run.TryLock() {
		s.kicked.Store(false)
		s.step()
		s.run.Unlock()
	}
}

// step handles the answers that arrived, oldest request first, then sends
// what can be sent. Requests on the wire are answered in the order the
// broker processed them (one connection, answered in order), and handled in
// that order: the Sequencer's decisions rely on it (an
// OUT_OF_ORDER_SEQUENCE_NUMBER answer must not be judged after the
// acknowledgement of a retry sent later). Guarded by s.run.
func (s *sink) step() {
	p := s.p
	if p.ctx.Err() != nil {
		return // closing: Close settles what is left
	}
	for len(s.inflight) > 0 {
		var rep reply
		select {
		case rep = <-s.inflight[0].done:
		default:
		}
		if !rep.returned {
			break
		}
		batches := s.inflight[0].batches
		s.inflight[0] = nil
		s.inflight = s.inflight[1:]
		s.handle(batches, rep.resp, rep.err)
	}
	maxRequests := p.cfg.maxInFlight
	if p.seq == nil {
		maxRequests = 1 // without sequences, a retry could overtake a later batch
	}
	for len(s.inflight) < maxRequests {
		s.busy.Store(len(s.inflight) > 0)
		batches, next := s.build(time.Now(), len(s.inflight) == 0)
		batches, req := s.prepare(batches)
		if req == nil {
			if !next.IsZero() {
				s.timer.Reset(time.Until(next))
			}
			break
		}
		r := &request{batches: batches, done: make(chan reply, 1)}
		s.inflight = append(s.inflight, r)
		wrote := make(chan struct{})
		s.wmu.Lock()
		s.wrote = wrote
		s.wmu.Unlock()
		p.goFn(func() {
			ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
			resp, err := req.RequestWith(ctx, p.cl.Broker(int(s.id)))
			cancel()
			s.written(wrote)
			r.done <- reply{resp: resp, err: err, returned: true}
			s.kick()
		})
		// The next request is issued only once this one is written, so
		// that none overtakes another on the way to the broker.
		select {
		case <-wrote:
		case <-p.ctx.Done():
			return
		}
	}
	s.busy.Store(len(s.inflight) > 0)
}

// build picks the batches of the next Produce request for this broker (at
// most one per partition: retries first, else the oldest queued batch,
// given its sequence now), or returns the time at which something will be
// ready (zero: nothing pending).
//
// A partition's batch that is still filling is closed and sent after its
// linger (at once while a Flush waits), or, with no linger, when no
// request to the broker is on the wire (idle) or it stopped growing: the
// broker processes one request per connection at a time, so while one is
// in flight the records are better sent together in the next request than
// split into more, smaller ones. Full batches are pipelined, up to
// MaxInFlight requests.
func (s *sink) build(now time.Time, idle bool) ([]sent, time.Time) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.fatal != nil || (p.seq != nil && !p.seq.Producer().Valid()) {
		return nil, time.Time{}
	}
	var out []sent
	var next time.Time
	size := 0 // the uncompressed size of the batches in out
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, ps := range p.parts {
		if ps.leader != s.id {
			continue
		}
		if ps.open != nil {
			lingered := p.cfg.linger > 0 && now.Sub(ps.open.created) >= p.cfg.linger
			// Without a linger, a batch waiting behind a request on the
			// wire goes as soon as it stops growing: the records have
			// stopped coming, so nothing is gained by waiting, and
			// sending it now lets the broker take it right after the
			// request before it.
			quiet := false
			if !idle && p.cfg.linger == 0 {
				if ps.open.size != ps.quietSize {
					ps.quietSize, ps.quietAt = ps.open.size, now
				} else if now.Sub(ps.quietAt) >= quietPeriod {
					quiet = true
				}
			}
			switch {
			case idle && (p.cfg.linger == 0 || p.flushing > 0 || lingered), !idle && (lingered || quiet):
				ps.closeOpen(p)
			case p.cfg.linger > 0:
				later(ps.open.created.Add(p.cfg.linger))
			case !idle:
				later(ps.quietAt.Add(quietPeriod))
			}
		}
		if len(out) > 0 && size+max(p.cfg.batchBytes, s.nextSize(ps)) > p.cfg.requestBytes {
			// Full (MaxRequestBytes): the next request takes it, which
			// the sink builds as soon as this one is written, or, at
			// MaxInFlight, when an answer comes. A batch counts as
			// BatchMaxBytes, or its size when larger (a record above
			// BatchMaxBytes goes alone, up to MaxRequestBytes).
			continue
		}
		if x, ok := s.nextBatch(ps, now, later); ok {
			x.b.epoch, x.b.topicID = ps.epoch, ps.topicID
			x.topicID = ps.topicID
			out = append(out, x)
			size += x.b.size
		}
	}
	return out, next
}

// quietPeriod is how long a batch waiting behind a request on the wire must
// not grow before it is sent anyway (see build).
const quietPeriod = time.Millisecond

// prepare encodes the picked batches (a batch is encoded once, outside the
// producer's lock, with the identity it is first sent under; a resend
// under another identity is restamped) and returns their Produce request.
// A batch that cannot be encoded fails alone (it was never sent) and is left
// out of the batches returned, which are the request's.
func (s *sink) prepare(batches []sent) ([]sent, *kmsg.ProduceRequest) {
	p := s.p
	if len(batches) == 0 {
		return nil, nil
	}
	kept := batches[:0]
	for _, x := range batches {
		if err := s.encode(&x); err != nil {
			s.failUnsent(x, err)
			continue
		}
		kept = append(kept, x)
	}
	batches = kept
	if len(batches) == 0 {
		return nil, nil
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = int16(p.cfg.acks)
	req.TimeoutMillis = int32(p.cfg.requestTO / time.Millisecond)
	if p.txn != nil {
		// The broker authorizes transactional batches against the
		// request's transactional ID.
		req.TransactionID = kmsg.StringPtr(p.cfg.transactionalID)
	}
	for _, x := range batches {
		i := slices.IndexFunc(req.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == x.ps.tp.Topic })
		if i < 0 {
			t := kmsg.NewProduceRequestTopic()
			t.Topic, t.TopicID = x.ps.tp.Topic, x.topicID
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = x.ps.tp.Partition
		rp.Records = x.b.encoded
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return batches, req
}

// failUnsent fails a picked batch that could not be encoded: it was never
// written, so its sequences are given back first.
func (s *sink) failUnsent(x sent, err error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seq == nil {
		x.ps.inflight = nil
		p.finishLocked(x.b, err, -1, nil)
	} else {
		p.applyLocked(p.seq.Complete(x.ref, ProduceResult{Delivery: NotSent}))
		d := p.seq.Abandon(x.ref, err)
		p.applyLocked(d)
		if p.txn != nil {
			p.txnStepLocked(p.txn.HandleProduce(d))
		}
	}
	p.wakeSinksLocked()
}

// encode writes x's batch with x's identity: once, then restamped only if
// a resend carries another identity. Only the sink sending a batch touches
// its bytes.
func (s *sink) encode(x *sent) error {
	p, b := s.p, x.b
	if b.encoded != nil {
		if p.seq == nil || b.stamped == x.id {
			return nil
		}
		if err := recbatch.SetProducer(b.encoded, x.id.Producer.ID, x.id.Producer.Epoch, x.id.BaseSequence); err != nil {
			return err
		}
		b.stamped = x.id
		return nil
	}
	spec := recbatch.DefaultSpec()
	spec.Codec = p.cfg.codec
	if p.seq != nil {
		spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = x.id.Producer.ID, x.id.Producer.Epoch, x.id.BaseSequence
		spec.Transactional = p.txn != nil
	}
	if s.builder == nil {
		s.builder = recbatch.NewBuilder(p.comp)
	}
	// b.size bounds the uncompressed batch (the header, and RecordSize per
	// record): uncompressed records are written straight into the buffer.
	// A compressed batch is written into a scratch buffer with room for
	// the worst case (snappy's, n + n/6 + 32, is the largest of the
	// codecs'), which compression almost never needs, and copied into one
	// of its own size: a batch keeps its bytes until it is acknowledged.
	compressed := spec.Codec != compress.None
	if compressed {
		s.builder.ResetInto(spec, getBuf(b.size+b.size/6+64))
	} else {
		s.builder.ResetInto(spec, getBuf(b.size))
	}
	fail := func(err error) error {
		return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: -1, Err: err}
	}
	for i := range b.recs {
		pr := &b.recs[i]
		var hs []recbatch.RecordHeader
		if pr.headers {
			hs = toBatchHeaders(pr.rec.Headers)
		}
		if err := s.builder.Append(pr.ts, pr.rec.Key, pr.rec.Value, hs); err != nil {
			return fail(err)
		}
	}
	enc, err := s.builder.Finish()
	if err != nil {
		return fail(err)
	}
	if compressed {
		scratch := enc
		enc = append(getBuf(len(enc)), enc...)
		putBuf(scratch)
	}
	b.encoded, b.stamped = enc, x.id
	return nil
}

// nextSize is the size of the batch nextBatch would pick for ps if it is
// ready (0: none), without picking it.
func (s *sink) nextSize(ps *pstate) int {
	p := s.p
	if p.seq == nil {
		if b := ps.inflight; b != nil {
			return b.size
		}
	} else if ref, _, ok := p.seq.NextResend(ps.tp); ok {
		if b := p.batches[ref]; b != nil {
			return b.size
		}
		return 0
	}
	if len(ps.queue) > 0 {
		return ps.queue[0].size
	}
	return 0
}

// nextBatch picks the partition's batch for this request: the retry the
// Sequencer wants first, else the oldest queued batch (given its sequence
// now).
func (s *sink) nextBatch(ps *pstate, now time.Time, later func(time.Time)) (sent, bool) {
	p := s.p
	if p.seq == nil {
		if b := ps.inflight; b != nil {
			if b.retryAt.IsZero() {
				return sent{}, false // on the wire
			}
			if now.Before(b.retryAt) {
				later(b.retryAt)
				return sent{}, false
			}
			b.retryAt = time.Time{}
			return sent{b: b, ps: ps}, true
		}
		if len(ps.queue) == 0 {
			return sent{}, false
		}
		b := ps.popQueue()
		ps.inflight = b
		return sent{b: b, ps: ps}, true
	}
	if ref, id, ok := p.seq.NextResend(ps.tp); ok {
		b := p.batches[ref]
		if b == nil {
			return sent{}, false
		}
		if now.Before(b.retryAt) {
			later(b.retryAt)
			return sent{}, false
		}
		if p.seq.Sent(ref) != nil {
			return sent{}, false
		}
		return sent{b: b, ps: ps, ref: ref, id: id}, true
	}
	if len(ps.queue) == 0 {
		return sent{}, false
	}
	if p.txn != nil && p.txn.CanProduce(ps.tp) != nil {
		return sent{}, false // not yet added to the transaction
	}
	b := ps.queue[0]
	ref, id, err := p.seq.AssignAt(ps.tp, int32(len(b.recs)), now, b.deadline)
	if err != nil {
		return sent{}, false // not now: in-flight limit, recovery, or no producer ID
	}
	ps.popQueue()
	b.ref, b.assigned = ref, true
	p.batches[ref] = b
	return sent{b: b, ps: ps, ref: ref, id: id}, true
}

// handle applies a Produce answer (or its failure) to every batch sent.
func (s *sink) handle(batches []sent, resp *kmsg.ProduceResponse, err error) {
	p := s.p
	p.mu.Lock()
	// Other sinks need a wake-up only when this answer may let them send:
	// a partition that moved to them, a new identity, a recovery, a
	// transaction step. This sink steps on by itself.
	others := p.txn != nil
	for _, x := range batches {
		if x.ps.leader != s.id {
			others = true
		}
		res := ProduceResult{Delivery: Answered, BaseOffset: -1, LogStartOffset: -1}
		err := err
		switch {
		case err != nil:
			res.Delivery = NoResponse
			if errors.ProduceNotApplied(err) {
				res.Delivery = NotSent
			}
		case p.cfg.acks == AcksNone:
			// No answer by design; count it as written, offset unknown.
		default:
			t, rp := produceAnswer(resp, x)
			if rp != nil {
				res.Code, res.BaseOffset, res.LogStartOffset = rp.ErrorCode, rp.BaseOffset, rp.LogStartOffset
				res.ByTopicID = t.TopicID != ([16]byte{})
				if rp.ErrorCode != 0 && rp.CurrentLeader.LeaderID >= 0 && rp.CurrentLeader.LeaderEpoch >= 0 {
					// The hint is about the incarnation the request
					// named: ignored if the cache moved on.
					p.meta.ApplyHint(x.ps.tp.Topic, x.topicID, x.ps.tp.Partition, rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch)
				}
			} else {
				// The broker answered the request without this partition:
				// nothing says whether it was appended.
				res.Delivery = NoResponse
				err = errMissingAnswer
			}
		}
		if res.Code != 0 || res.Delivery != Answered {
			var cause error = errors.FromCode(res.Code)
			if res.Delivery != Answered {
				cause = err
			}
			if reason, ok := metadata.ReasonFor(cause); ok {
				p.meta.Trigger(reason)
			} else if res.Delivery != Answered {
				p.meta.Trigger(metadata.ReasonNotLeader)
			}
			x.b.retryAt = time.Now().Add(p.cfg.retryBackoff)
			others = true
		}
		if p.seq != nil {
			d := p.seq.Complete(x.ref, res)
			if d.Bump != nil || d.NeedProducerID || d.Fatal != nil || d.Abortable != nil || len(d.Outcomes) > 0 || len(d.Split) > 0 {
				others = true
			}
			if p.txn != nil && d.Abortable == nil && acknowledged(res) && p.replacedLocked(x.b) {
				// Acknowledged by a deleted incarnation (appended, or
				// held already): the record is reported failed, so the
				// transaction cannot commit.
				d.Abortable = &AbortableError{Err: errors.ErrTopicIDChanged}
				others = true
			}
			p.applyLocked(d)
			if p.txn != nil {
				p.txnStepLocked(p.txn.HandleProduce(d))
			}
			continue
		}
		s.completePlain(x, res, err)
	}
	// The request is off the wire: the bytes of batches that are now
	// finished can be reused (nobody sends them again).
	for _, x := range batches {
		if x.b.done && x.b.encoded != nil {
			putBuf(x.b.encoded)
			x.b.encoded = nil
		}
	}
	if others {
		for _, o := range p.sinks {
			if o != s {
				o.wakeUp()
			}
		}
	}
	p.mu.Unlock()
}

// answersTopic reports whether t, a topic of a Produce answer, is the
// answer for x's topic: by the topic ID x's request named (Produce v13+
// answers name topics by ID only), else by name. An answer is always about
// the incarnation its request named, whatever metadata learned since.
// produceAnswer returns the entry of resp that answers x's partition, nil
// if none does: the first (as the consumer reads a Fetch); a later one, a
// broker's mistake, is ignored, and so is an entry for a partition the
// request did not name (only the batches sent are looked up).
func produceAnswer(resp *kmsg.ProduceResponse, x sent) (*kmsg.ProduceResponseTopic, *kmsg.ProduceResponseTopicPartition) {
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if !answersTopic(*t, x) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == x.ps.tp.Partition {
				return t, &t.Partitions[j]
			}
		}
	}
	return nil, nil
}

func answersTopic(t kmsg.ProduceResponseTopic, x sent) bool {
	return wire.SameTopic(t.Topic, t.TopicID, x.ps.tp.Topic, x.topicID)
}

// errMissingAnswer: a Produce answer that leaves out a partition its
// request named.
var errMissingAnswer = errors.New("kepoch: produce answer without the partition")

// replacedLocked reports whether b was last sent to a topic incarnation
// that metadata has since seen replaced (the topic was deleted and
// created again): an answer to that send is about the deleted log.
func (p *Producer) replacedLocked(b *pbatch) bool {
	if b.topicID == ([16]byte{}) {
		return false
	}
	ps := p.parts[b.tp]
	return ps != nil && ps.topicID != ([16]byte{}) && ps.topicID != b.topicID
}

// replacedErr is the report of a batch acknowledged (at base) by a topic
// incarnation that was deleted since: it was written once, to a log that
// no longer exists, and is not in the topic the producer now writes to. It
// is not sent again: the application decides whether to produce it anew.
func replacedErr(b *pbatch, base int64) error {
	return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: base, LeaderEpoch: b.epoch, Err: errors.ErrTopicIDChanged}
}

// acknowledged reports whether res says the leader holds the batch:
// appended now, or (DUPLICATE_SEQUENCE_NUMBER) appended before.
func acknowledged(res ProduceResult) bool {
	if res.Delivery != Answered {
		return false
	}
	c := classify(res.Code)
	return c == classOK || c == classDuplicate
}

// completePlain finishes a batch of a non-idempotent producer: retried on a
// retriable error while its delivery deadline allows (a retry may duplicate
// it if the failed attempt was written), else failed.
func (s *sink) completePlain(x sent, res ProduceResult, err error) {
	p := s.p
	b := x.b
	if res.Delivery == Answered && res.Code == 0 {
		x.ps.inflight = nil
		if p.replacedLocked(b) {
			p.finishLocked(b, replacedErr(b, res.BaseOffset), -1, nil)
			return
		}
		if p.cfg.acks != AcksNone && res.BaseOffset >= 0 {
			// Without a producer identity, the batch's CRC is what a
			// probe can find it by.
			crc, ok := recbatch.StoredCRC(b.encoded)
			_ = p.recordAckLocked(b.tp, AckedRange{From: res.BaseOffset, To: res.BaseOffset + int64(len(b.recs)), LeaderEpoch: b.epoch,
				Producer: NoProducerID, FirstSequence: -1, TailFrom: res.BaseOffset, TailCRC: crc, HasTailCRC: ok})
		}
		var dup Outcome
		if b.maybe {
			// An earlier attempt may have been appended too: without
			// sequences the broker cannot tell the retry from it. The
			// application is told, as after an idempotent rewrite.
			none := BatchIdentity{Producer: NoProducerID, BaseSequence: -1}
			o := PossibleDuplicate{Batch: b.ref, TP: b.tp, Records: int32(len(b.recs)), From: none, To: none, Cause: Cause{TP: b.tp, Err: b.maybeErr}}
			dup = o
			if fn := p.cfg.onOutcome; fn != nil {
				p.queueFnLocked(func() { fn(o) })
			}
		}
		p.finishLocked(b, nil, res.BaseOffset, dup)
		return
	}
	if res.Delivery == Answered && (res.Code == kerr.MessageTooLarge.Code || res.Code == kerr.RecordListTooLarge.Code) &&
		len(b.recs) > 1 && !b.maybe && time.Now().Before(b.deadline) {
		// Refused before the append: its halves go first, in order.
		p.splitPlainLocked(x.ps, b)
		return
	}
	cause := err
	if res.Delivery == Answered {
		cause = errors.FromCode(res.Code)
	}
	if res.Delivery == NoResponse || (res.Delivery == Answered && !errors.ProduceNotApplied(cause)) {
		if !b.maybe {
			b.maybe, b.maybeErr = true, cause
		}
	}
	// The request's own timeout (RequestTimeout, the context the sink
	// gave it) ends an attempt, not the record: it is retried like an
	// attempt whose connection broke (errors.IsRetriable leaves deadlines
	// out, which are the caller's own elsewhere).
	timedOut := res.Delivery == NoResponse && errors.Is(cause, context.DeadlineExceeded) && p.ctx.Err() == nil
	if (errors.IsRetriable(cause) || timedOut) && time.Now().Before(b.deadline) {
		return // stays inflight with retryAt set
	}
	x.ps.inflight = nil
	ferr := &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: b.epoch, Err: cause}
	var e error = ferr
	if b.maybe {
		e = errors.Join(ferr, errors.ErrUnknownOutcome)
	}
	p.finishLocked(b, e, -1, nil)
}

// Encoded batches are up to BatchMaxBytes large; their buffers are reused
// once a batch is finished and its last request is off the wire. Pools by
// power-of-two capacity; small buffers are not pooled.
const minPooledBuf = 16 << 10

var bufPools [40]sync.Pool // *[]byte by log2 of capacity

func getBuf(n int) []byte {
	if n < minPooledBuf {
		return make([]byte, 0, n)
	}
	i := bits.Len(uint(n - 1)) // smallest power of two ≥ n
	if v, _ := bufPools[i].Get().(*[]byte); v != nil {
		return (*v)[:0]
	}
	return make([]byte, 0, 1<<i)
}

func putBuf(b []byte) {
	if cap(b) < minPooledBuf {
		return
	}
	i := bits.Len(uint(cap(b))) - 1 // largest power of two ≤ cap
	b = b[:0]
	bufPools[i].Put(&b)
}
