package producer

import (
	"time"

	"github.com/kepoch/kepoch/errors"
	recbatch "github.com/kepoch/kepoch/internal/batch"
)

// pstate is one partition's buffer: the batch filling up and the closed
// batches waiting for a sequence. Guarded by Producer.mu.
type pstate struct {
	tp      TopicPartition
	topicID [16]byte
	leader  int32 // broker id from metadata, -1 unknown
	epoch   int32 // leader epoch from metadata, -1 unknown

	open  *pbatch
	queue []*pbatch // closed, not yet assigned a sequence (FIFO)

	// order holds the partition's unreported batches in the order their
	// records were produced (which is sequence and offset order). A
	// finished batch is reported only once every batch before it is, so
	// delivery reports of a partition come in offset order even when a
	// later batch is acknowledged before an earlier one's retry.
	order []*pbatch

	// Non-idempotent producers: the batch in flight (one per partition,
	// so a retry never overtakes a later batch).
	inflight *pbatch

	recHint int // records per batch lately

	// The open batch's size when the sink last saw it grow, and when
	// (sink.build: a batch that stopped growing is sent).
	quietSize int
	quietAt   time.Time
}

// pending is one buffered record with its callback.
type pending struct {
	rec     *Record
	cb      func(Result)
	ts      int64 // rec.Timestamp in milliseconds
	size    int32 // encoded size (recbatch.RecordSize)
	headers bool  // rec has headers
}

// pbatch is one record batch of one partition.
type pbatch struct {
	tp       TopicPartition
	recs     []pending
	size     int
	created  time.Time
	deadline time.Time
	encoded  []byte        // the batch as sent (encoded by the sink that first sends it)
	stamped  BatchIdentity // the identity in encoded's header

	ref      BatchRef
	assigned bool
	epoch    int32 // leader epoch from metadata at the last send
	// topicID is the topic incarnation the last send named (zero: the
	// brokers send no IDs). An answer is about that incarnation's log.
	topicID  [16]byte
	retryAt  time.Time
	maybe    bool  // an attempt ended without a definite answer (non-idempotent)
	maybeErr error // the first such attempt's error (non-idempotent)
	recovery Outcome

	// no numbers the batch (split parts keep their parent's) for Flush.
	no uint64

	// The report, once the batch is finished (guarded by Producer.mu until
	// handed to the callback goroutine).
	done bool
	err  error
	base int64
}

func (p *Producer) pstateLocked(tp TopicPartition, topicID [16]byte) *pstate {
	// Fast path: the topic Produce saw last, indexed by partition.
	if tp.Topic == p.lastTopic && tp.Partition >= 0 && int(tp.Partition) < len(p.lastParts) {
		if ps := p.lastParts[tp.Partition]; ps != nil {
			if topicID != ps.topicID {
				p.setTopicIDLocked(ps, topicID)
			}
			return ps
		}
	}
	ps := p.parts[tp]
	if ps != nil {
		p.cachePstateLocked(ps)
	}
	if ps == nil {
		// Its topic ID is set below (setTopicIDLocked: the one metadata
		// holds now).
		ps = &pstate{tp: tp, leader: -1, epoch: -1}
		if mp, err := p.meta.Lookup(tp.Topic, tp.Partition); err == nil && mp.Leader >= 0 {
			ps.leader, ps.epoch = mp.Leader, mp.LeaderEpoch
		}
		p.parts[tp] = ps
		p.sinkLocked(ps.leader)
		p.cachePstateLocked(ps)
		// The producer watches the topics it holds partition states
		// of (Produce's lookup watched it only while it looked; a
		// deleted topic's state and watch may have been dropped
		// since, dropGoneLocked): watched, and gone again if metadata
		// has no partitions for it now.
		p.watchLocked(tp.Topic)
		if _, err := p.meta.Topic(tp.Topic); err != nil {
			p.gone[tp.Topic] = true
		}
	}
	p.setTopicIDLocked(ps, topicID)
	return ps
}

// setTopicIDLocked makes id (unless zero: unknown) the topic incarnation
// ps's requests name. Another ID than the one ps named is a new incarnation
// of the topic (metadata adopts topic IDs only forward): the partition's
// sequences start afresh for it (Sequencer.NewIncarnation), before
// anything is sent to it.
//
// The ID given may be stale: Produce reads it before it takes the lock (and
// may wait for buffer space in between), and a metadata event may have been
// queued before the topic was recreated. The ID metadata holds now is taken
// instead, so that a partition never goes back to a deleted incarnation
// (its batches would be sent to a topic ID that no longer exists, until
// their delivery timeout).
func (p *Producer) setTopicIDLocked(ps *pstate, id [16]byte) {
	if id == ([16]byte{}) || id == ps.topicID {
		return
	}
	if t, _, err := p.meta.TopicAt(ps.tp.Topic); err == nil && t.ID != ([16]byte{}) {
		if id = t.ID; id == ps.topicID {
			return
		}
	}
	old := ps.topicID
	ps.topicID = id
	if old == ([16]byte{}) {
		if p.seq != nil {
			// A partition of a topic dropped as deleted
			// (dropGoneLocked) continues its sequences if the
			// topic is the same incarnation after all.
			p.seq.Revive(ps.tp, id)
		}
		return
	}
	// The ack ledger's ranges are the deleted incarnation's offsets and
	// epochs: forgotten now, before an acknowledgement of the new one is
	// recorded beside them or a check judges them against the new log
	// (the metadata loop's event for the recreation may come later).
	p.ledger.Forget(ps.tp)
	if p.seq == nil {
		return
	}
	if p.txn != nil {
		// A batch of the open transaction acknowledged by the deleted
		// incarnation makes it abortable (TxnState.NewIncarnation).
		p.txnStepLocked(p.txn.NewIncarnation(ps.tp))
	} else {
		p.applyLocked(p.seq.NewIncarnation(ps.tp))
	}
	p.wakeSinksLocked()
}

// cachePstateLocked makes ps the fast path's.
func (p *Producer) cachePstateLocked(ps *pstate) {
	parts := p.byTopic[ps.tp.Topic]
	for int(ps.tp.Partition) >= len(parts) {
		parts = append(parts, nil)
	}
	parts[ps.tp.Partition] = ps
	p.byTopic[ps.tp.Topic] = parts
	p.lastTopic, p.lastParts = ps.tp.Topic, parts
}

// add appends a record to the open batch, closing it first when the record
// would overflow it.
func (ps *pstate) add(p *Producer, pr pending) {
	queued := len(ps.queue)
	if ps.open != nil && ps.open.size+int(pr.size) > p.cfg.batchBytes {
		ps.closeOpen(p)
	}
	if ps.open == nil {
		now := time.Now()
		ps.open = &pbatch{tp: ps.tp, created: now, deadline: now.Add(p.cfg.deliveryTO), size: recbatch.HeaderSize, epoch: -1, no: p.batchNo,
			recs: make([]pending, 0, max(16, ps.recHint+ps.recHint/8))}
		p.batchNo++
		p.undelivered++
		ps.order = append(ps.order, ps.open)
	}
	ps.open.recs = append(ps.open.recs, pr)
	ps.open.size += int(pr.size)
	if ps.open.size >= p.cfg.batchBytes {
		ps.closeOpen(p)
	}
	// The sink needs to know when a batch is ready to go (queued now), when
	// a new batch's linger starts (its first record), and, without a
	// linger, when a record can go at once (no request on the wire): not
	// on every record. A batch queued earlier already woke it; if it
	// could not be sent then (MaxInFlight requests on the wire), the next
	// answer runs the sink again.
	if s := p.sinks[ps.leader]; s != nil && (len(ps.queue) > queued || len(ps.open.recs) == 1 || (p.cfg.linger == 0 && !s.busy.Load())) {
		s.wakeUp()
	}
}

// closeOpen ends the open batch: it is queued, to be encoded by the sink
// that sends it.
func (ps *pstate) closeOpen(p *Producer) {
	b := ps.open
	if b == nil {
		return
	}
	ps.open = nil
	ps.quietSize = 0
	p.part.BatchClosed(ps.tp.Topic, ps.tp.Partition)
	ps.queue = append(ps.queue, b)
	// Size the next batch's record slice like recent ones (decaying), to
	// spare it most of its growth.
	ps.recHint = max(len(b.recs), ps.recHint*3/4)
}

// finishLocked ends every record of b with its report: acknowledged at
// base (err nil) or failed with err. The buffer space is freed now; the
// reports go to the callback goroutine once every earlier batch of the
// partition is reported. A batch is finished once.
func (p *Producer) finishLocked(b *pbatch, err error, base int64, recovery Outcome) {
	if b.done {
		return
	}
	b.done, b.err, b.base = true, err, base
	if recovery != nil {
		b.recovery = recovery
	}
	p.buffered -= b.size - recbatch.HeaderSize
	if p.spaceWaiters > 0 {
		close(p.spaceWake)
		p.spaceWake = make(chan struct{})
	}
	ps := p.parts[b.tp]
	if ps == nil {
		p.queueEventLocked(event{b: b})
		return
	}
	i := 0
	for i < len(ps.order) && ps.order[i].done {
		p.queueEventLocked(event{b: ps.order[i]})
		i++
	}
	if i > 0 {
		clear(ps.order[:i])
		ps.order = ps.order[i:]
	}
}

// popQueue takes the queue's first batch. Its slot is cleared: the queue's
// array, which later appends reuse, must not keep a finished batch (and its
// records) reachable.
func (ps *pstate) popQueue() *pbatch {
	b := ps.queue[0]
	ps.queue[0] = nil
	ps.queue = ps.queue[1:]
	return b
}

// replaceInOrder puts the batches bs where b was in its partition's report
// order (b was split).
func (ps *pstate) replaceInOrder(b *pbatch, bs []*pbatch) {
	for i, x := range ps.order {
		if x == b {
			rest := append(bs, ps.order[i+1:]...)
			ps.order = append(ps.order[:i], rest...)
			return
		}
	}
	ps.order = append(ps.order, bs...)
}

// failAll fails every batch of the partition that is not on the wire.
func (ps *pstate) failAll(p *Producer, err error) {
	for _, b := range ps.queue {
		p.finishLocked(b, err, -1, nil)
	}
	ps.queue = nil
	if ps.open != nil {
		b := ps.open
		ps.open = nil
		p.finishLocked(b, err, -1, nil)
	}
	if b := ps.inflight; b != nil && !b.retryAt.IsZero() {
		// Waiting for its retry, not on the wire.
		if b.maybe {
			err = errors.Join(err, errors.ErrUnknownOutcome)
		}
		ps.inflight = nil
		p.finishLocked(b, err, -1, nil)
	}
}

// event is one thing the callback goroutine does, in order: the delivery
// reports of a finished batch, or another callback (OnOutcome,
// OnAckedWritesLost).
type event struct {
	b  *pbatch
	fn func()
}

func (p *Producer) queueEventLocked(e event) {
	p.events = append(p.events, e)
	select {
	case p.eventsW <- struct{}{}:
	default:
	}
}

// queueFnLocked queues a callback for the callback goroutine.
func (p *Producer) queueFnLocked(fn func()) { p.queueEventLocked(event{fn: fn}) }

// callbackLoop runs every application callback, one at a time, in the
// order they were queued, never with the producer's lock held. Records
// count as finished (for Flush) once their callback has run. It returns
// once Close asked it to stop and the queue is empty.
func (p *Producer) callbackLoop() {
	defer close(p.cbDone)
	var q []event
	for {
		p.mu.Lock()
		for len(p.events) == 0 {
			if p.cbStop {
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			<-p.eventsW
			p.mu.Lock()
		}
		q, p.events = p.events, q[:0]
		p.mu.Unlock()
		batches := 0
		for i := range q {
			if b := q[i].b; b != nil {
				deliver(b)
				batches++
			} else {
				q[i].fn()
			}
		}
		if batches > 0 {
			p.mu.Lock()
			for i := range q {
				if b := q[i].b; b != nil {
					p.deliveredLocked(b)
				}
			}
			p.mu.Unlock()
		}
		clear(q)
	}
}

// deliveredLocked counts b as delivered: its callbacks ran.
func (p *Producer) deliveredLocked(b *pbatch) {
	p.undelivered--
	for _, w := range p.flushers {
		if b.no < w.limit && w.remaining > 0 {
			w.remaining--
			if w.remaining == 0 {
				close(w.done)
			}
		}
	}
}

// deliver calls the callbacks of a finished batch's records. It only reads
// the batch: a sink may still be encoding it (a batch can fail, e.g. its
// delivery timeout, while on its way to the wire).
func deliver(b *pbatch) {
	epoch := b.epoch
	if b.err != nil {
		epoch = -1
	}
	for i := range b.recs {
		pr := &b.recs[i]
		if pr.cb == nil {
			continue
		}
		res := Result{Record: pr.rec, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: epoch, Err: b.err, Recovery: b.recovery}
		if b.err == nil && b.base >= 0 {
			res.Offset = b.base + int64(i)
		}
		pr.cb(res)
	}
}
