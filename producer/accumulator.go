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

	// Non-idempotent producers: the batch in flight (one per partition,
	// so a retry never overtakes a later batch).
	inflight *pbatch
}

// pending is one buffered record with its callback.
type pending struct {
	rec  *Record
	cb   func(Result)
	size int
}

// pbatch is one record batch of one partition.
type pbatch struct {
	tp       TopicPartition
	recs     []*pending
	size     int
	created  time.Time
	deadline time.Time
	encoded  []byte // the batch as sent; its producer fields are stamped per send

	ref      BatchRef
	assigned bool
	epoch    int32 // leader epoch from metadata at the last send
	retryAt  time.Time
	maybe    bool // an attempt ended without a definite answer (non-idempotent)
	recovery Outcome
}

func (p *Producer) pstateLocked(tp TopicPartition, topicID [16]byte) *pstate {
	ps := p.parts[tp]
	if ps == nil {
		ps = &pstate{tp: tp, topicID: topicID, leader: -1, epoch: -1}
		if mp, err := p.meta.Lookup(tp.Topic, tp.Partition); err == nil || mp.Leader >= 0 {
			ps.leader, ps.epoch = mp.Leader, mp.LeaderEpoch
		}
		p.parts[tp] = ps
		p.sinkLocked(ps.leader)
	}
	if topicID != ([16]byte{}) {
		ps.topicID = topicID
	}
	return ps
}

// add appends a record to the open batch, closing it first when the record
// would overflow it.
func (ps *pstate) add(p *Producer, pr *pending) {
	if ps.open != nil && ps.open.size+pr.size > p.cfg.batchBytes {
		ps.closeOpen(p)
	}
	if ps.open == nil {
		now := time.Now()
		ps.open = &pbatch{tp: ps.tp, created: now, deadline: now.Add(p.cfg.deliveryTO), size: recbatch.HeaderSize}
	}
	ps.open.recs = append(ps.open.recs, pr)
	ps.open.size += pr.size
	if ps.open.size >= p.cfg.batchBytes {
		ps.closeOpen(p)
	}
	if s := p.sinks[ps.leader]; s != nil {
		s.wakeUp()
	}
}

// closeOpen ends the open batch: it is encoded once, and queued.
func (ps *pstate) closeOpen(p *Producer) {
	b := ps.open
	if b == nil {
		return
	}
	ps.open = nil
	p.part.BatchClosed(ps.tp.Topic, ps.tp.Partition)
	if err := p.encode(b); err != nil {
		// A record the codec refuses (e.g. too many headers) fails alone
		// with its batch; nothing was sent.
		p.deferred = p.finishLocked(b, err, -1, nil, p.deferred)
		return
	}
	ps.queue = append(ps.queue, b)
}

// ready reports whether the open batch should be closed now.
func (ps *pstate) openReady(p *Producer, now time.Time) bool {
	return ps.open != nil && (p.flushing > 0 || p.cfg.linger == 0 || now.Sub(ps.open.created) >= p.cfg.linger)
}

func (p *Producer) encode(b *pbatch) error {
	spec := recbatch.DefaultSpec()
	spec.Codec = p.cfg.codec
	if p.seq != nil {
		// Placeholder identity, stamped for real at each send.
		spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = 0, 0, 0
		spec.Transactional = p.txn != nil
	}
	p.builder.Reset(spec)
	for _, pr := range b.recs {
		r := pr.rec
		if err := p.builder.Append(r.Timestamp.UnixMilli(), r.Key, r.Value, toBatchHeaders(r.Headers)); err != nil {
			return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: -1, Err: err}
		}
	}
	enc, err := p.builder.AppendFinished(nil)
	if err != nil {
		return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: -1, Err: err}
	}
	b.encoded = enc
	return nil
}

// finishLocked ends every record of b with its report: acknowledged at
// base (err nil) or failed with err. It returns the callbacks to run
// outside the lock, appended to cbs.
func (p *Producer) finishLocked(b *pbatch, err error, base int64, recovery Outcome, cbs []func()) []func() {
	if recovery == nil {
		recovery = b.recovery
	}
	for i, pr := range b.recs {
		res := Result{Record: pr.rec, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: b.epoch, Err: err, Recovery: recovery}
		if err == nil && base >= 0 {
			res.Offset = base + int64(i)
		}
		if err != nil {
			res.LeaderEpoch = -1
		}
		p.buffered -= pr.size
		p.records--
		if cb := pr.cb; cb != nil {
			cbs = append(cbs, func() { cb(res) })
		}
	}
	b.recs = nil
	close(p.spaceWake)
	p.spaceWake = make(chan struct{})
	close(p.doneWake)
	p.doneWake = make(chan struct{})
	return cbs
}

// failAll fails every batch of the partition that is not on the wire.
func (ps *pstate) failAll(p *Producer, err error, cbs []func()) []func() {
	if ps.open != nil {
		cbs = p.finishLocked(ps.open, err, -1, nil, cbs)
		ps.open = nil
	}
	for _, b := range ps.queue {
		cbs = p.finishLocked(b, err, -1, nil, cbs)
	}
	ps.queue = nil
	if b := ps.inflight; b != nil {
		if b.maybe {
			err = errors.Join(err, errors.ErrUnknownOutcome)
		}
		cbs = p.finishLocked(b, err, -1, nil, cbs)
		ps.inflight = nil
	}
	return cbs
}
