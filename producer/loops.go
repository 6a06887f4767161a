package producer

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/errors"
	recbatch "github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/wire"
	"github.com/kepoch/kepoch/metadata"
)

// applyLocked carries out a Sequencer decision: acknowledgements become
// delivery reports and ledger entries, outcomes go to the application,
// splits are re-encoded, a producer ID is requested, acked-write checks are
// queued. Callbacks are queued for the callback goroutine.
func (p *Producer) applyLocked(d Decision) {
	for _, a := range d.Acks {
		b := p.batches[a.Batch]
		if b == nil {
			continue
		}
		delete(p.batches, a.Batch)
		if p.replacedLocked(b) {
			// Acknowledged by a deleted incarnation (its answer was
			// handled after metadata learned of the new one): nothing of
			// it is in the topic now, nor in the ack ledger, which forgot
			// the partition at the recreation.
			if !a.AfterFailure {
				p.finishLocked(b, replacedErr(b, a.BaseOffset), -1, nil)
			}
			continue
		}
		if a.BaseOffset >= 0 {
			_ = p.recordAckLocked(a.TP, AckedRange{From: a.BaseOffset, To: a.BaseOffset + int64(a.Records), LeaderEpoch: b.epoch,
				Producer: a.Identity.Producer, FirstSequence: a.Identity.BaseSequence})
		}
		if a.AfterFailure {
			continue // its records were already reported failed (maybe written): now known written
		}
		p.finishLocked(b, nil, a.BaseOffset, nil)
	}
	for _, o := range d.Outcomes {
		switch o := o.(type) {
		case Failed:
			b := p.batches[o.Batch]
			if b == nil {
				continue
			}
			delete(p.batches, o.Batch)
			cause := o.Err
			if d.Fatal != nil && !errors.Is(cause, ErrProducerFatal) {
				// The batch that met the fatal error: its report says
				// the producer is stopped, like every other pending one.
				cause = fmt.Errorf("%w: %w", ErrProducerFatal, cause)
			}
			err := error(&errors.PartitionError{Op: "produce", Topic: o.TP.Topic, Partition: o.TP.Partition, Offset: -1, LeaderEpoch: b.epoch, Err: cause})
			if o.MaybeWritten {
				err = errors.Join(err, errors.ErrUnknownOutcome)
			}
			p.finishLocked(b, err, -1, nil)
		case ResequencedNoLoss:
			if b := p.batches[o.Batch]; b != nil {
				b.recovery = o
			}
		case PossibleDuplicate:
			if b := p.batches[o.Batch]; b != nil {
				b.recovery = o
			}
		}
		if fn := p.cfg.onOutcome; fn != nil {
			p.queueFnLocked(func() { fn(o) })
		}
	}
	for _, ref := range d.Split {
		p.splitLocked(ref)
	}
	if d.NeedProducerID {
		p.needPID = true
		select {
		case p.pidWake <- struct{}{}:
		default:
		}
	}
	if d.Fatal != nil {
		p.fatal = errors.Join(ErrProducerFatal, d.Fatal)
		for _, ps := range p.parts {
			ps.failAll(p, p.fatal)
		}
	}
	for _, tp := range d.CheckAckedWrites {
		if ps := p.parts[tp]; ps != nil {
			if q, ok := p.ledger.Recheck(tp, ps.epoch); ok {
				p.queueLedgerLocked(ledgerTask{query: &q})
			}
		}
	}
}

// splitLocked re-encodes a batch the broker refused as too large into two
// halves that take over its sequences.
func (p *Producer) splitLocked(ref BatchRef) {
	b := p.batches[ref]
	if b == nil {
		return
	}
	delete(p.batches, ref)
	if b.encoded != nil {
		// Refused as too large: its request is off the wire (splits come
		// from answers), and the parts are encoded anew.
		putBuf(b.encoded)
		b.encoded = nil
	}
	n := len(b.recs)
	counts := []int32{int32(n / 2), int32(n - n/2)}
	refs, err := p.seq.Split(ref, counts)
	if err != nil {
		p.finishLocked(b, &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: -1, Err: err}, -1, nil)
		return
	}
	parts := make([]*pbatch, len(refs))
	at := 0
	for i, r := range refs {
		nb := splitPart(b, b.recs[at:at+int(counts[i]):at+int(counts[i])])
		nb.ref, nb.assigned, nb.recovery = r, true, b.recovery
		at += int(counts[i])
		parts[i] = nb
		p.batches[r] = nb
	}
	p.replaceSplitLocked(p.parts[b.tp], b, parts)
}

// splitPart is a part of b's split holding recs: b's partition, times,
// leader epoch and Flush number.
func splitPart(b *pbatch, recs []pending) *pbatch {
	nb := &pbatch{tp: b.tp, recs: recs, created: b.created, deadline: b.deadline, epoch: b.epoch, no: b.no, size: recbatch.HeaderSize}
	for _, pr := range recs {
		nb.size += int(pr.size)
	}
	return nb
}

// replaceSplitLocked puts the parts of b's split in its place in its
// partition's report order (ps may be nil), and in what Flush calls wait for.
func (p *Producer) replaceSplitLocked(ps *pstate, b *pbatch, parts []*pbatch) {
	if ps != nil {
		ps.replaceInOrder(b, parts)
	}
	p.undelivered += len(parts) - 1
	for _, w := range p.flushers {
		if b.no < w.limit && w.remaining > 0 {
			w.remaining += len(parts) - 1
		}
	}
}

// splitPlainLocked replaces a non-idempotent producer's batch the broker
// refused as too large (so it was not written) by its two halves, first in
// the partition's queue.
func (p *Producer) splitPlainLocked(ps *pstate, b *pbatch) {
	if b.encoded != nil {
		putBuf(b.encoded) // its request is off the wire
		b.encoded = nil
	}
	h := len(b.recs) / 2
	parts := []*pbatch{splitPart(b, b.recs[:h:h]), splitPart(b, b.recs[h:])}
	ps.inflight = nil
	ps.queue = append(parts, ps.queue...)
	p.replaceSplitLocked(ps, b, parts)
}

// initProducerIDFatal reports whether an idempotent producer's
// InitProducerId error ends the producer: it is not authorized, or the
// broker answered a code this client does not know (its meaning, and so
// whether asking again can ever succeed, is unknown: Java's producer makes
// an unexpected InitProducerId error fatal too). Other errors are asked
// again after the backoff.
func initProducerIDFatal(err error) bool {
	if _, unknown := errors.AsType[*errors.UnknownCodeError](err); unknown {
		return true
	}
	return errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// pidLoop sends InitProducerId whenever the producer needs a producer ID,
// retrying with backoff until it gets one.
func (p *Producer) pidLoop() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.pidWake:
		}
		for {
			p.mu.Lock()
			need := p.needPID && p.fatal == nil // a fatal producer takes no new identity
			p.mu.Unlock()
			if !need {
				break
			}
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionTimeoutMillis = int32(p.cfg.txnTimeout / time.Millisecond)
			ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
			resp, err := req.RequestWith(ctx, p.cl)
			cancel()
			if err == nil {
				err = errors.FromCode(resp.ErrorCode)
			}
			if err == nil && !(ProducerID{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}).Valid() {
				// An answer without error that holds no producer
				// identity, a broker's fault: asked again after the
				// backoff like a failed one, not at once (a broker
				// that answers it every time would get a request loop
				// that never waits).
				err = fmt.Errorf("%w (producer ID %d, epoch %d)", ErrNoProducerIdentity, resp.ProducerID, resp.ProducerEpoch)
			}
			if err == nil {
				p.mu.Lock()
				d, serr := p.seq.SetProducer(ProducerID{ID: resp.ProducerID, Epoch: resp.ProducerEpoch})
				if serr == nil {
					p.needPID, p.pidErr = false, nil
				}
				p.applyLocked(d)
				p.wakeSinksLocked()
				p.mu.Unlock()
				if serr == nil {
					continue
				}
				err = serr
			}
			p.mu.Lock()
			p.pidErr = err
			p.mu.Unlock()
			if !errors.IsRetriable(err) && p.ctx.Err() == nil {
				p.mu.Lock()
				if p.fatal == nil && initProducerIDFatal(err) {
					p.fatal = errors.Join(ErrProducerFatal, err)
					for _, ps := range p.parts {
						ps.failAll(p, p.fatal)
					}
					// Batches the Sequencer holds (waiting for this
					// identity) fail now too.
					p.applyLocked(p.seq.FailPending(p.fatal))
					p.mu.Unlock()
					return
				}
				p.mu.Unlock()
			}
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(p.cfg.retryBackoff):
			}
		}
	}
}

// metadataLoop follows leader changes: partitions move to their new
// leader's sink, and the ack ledger checks what the new leader still has.
func (p *Producer) metadataLoop() {
	for {
		evs, err := p.sub.Next(p.ctx)
		if err != nil {
			if p.ctx.Err() == nil {
				// The refresher ended under the producer: one shared
				// with WithMetadata, closed first.
				go p.refresherClosed(err)
			}
			return
		}
		p.mu.Lock()
		for _, ev := range evs {
			tp := TopicPartition{ev.Topic, ev.Partition}
			ps := p.parts[tp]
			if ev.Kind == metadata.PartitionRemoved ||
				(ev.Kind == metadata.TopicRecreated && (ps == nil || ps.topicID == [16]byte{})) {
				// A partition state that names a topic ID forgets its
				// ledger when it adopts another (setTopicIDLocked,
				// below or earlier from Produce's lookup): forgotten
				// here again, what the new incarnation acknowledged
				// since would be.
				p.ledger.Forget(tp)
			}
			if ev.Kind == metadata.PartitionRemoved && p.byTopic[ev.Topic] != nil {
				if _, err := p.meta.Topic(ev.Topic); err != nil {
					p.gone[ev.Topic] = true // the topic, not only this partition
				}
			}
			if ps == nil {
				continue
			}
			if ps.leader != ev.Leader || ps.epoch != ev.LeaderEpoch {
				if p.seq != nil {
					p.seq.LeaderChanged(tp) // one batch at a time until the new leader acknowledges one
				}
			}
			ps.leader, ps.epoch = ev.Leader, ev.LeaderEpoch
			if ev.Leader < 0 && ps.open != nil {
				// No sink sends the open batch while the partition has
				// no leader (nor closes it at its linger): close it, so
				// that a sticky partitioner moves unkeyed records on to
				// a partition with a leader instead of filling this
				// batch until its delivery timeout.
				ps.closeOpen(p)
			}
			p.setTopicIDLocked(ps, ev.TopicID)
			p.sinkLocked(ev.Leader).wakeUp()
			if ev.LeaderEpoch >= 0 {
				if q, ok := p.ledger.ObserveLeaderEpoch(tp, ev.LeaderEpoch); ok {
					p.queueLedgerLocked(ledgerTask{query: &q})
				}
			}
		}
		p.dropGoneLocked()
		p.mu.Unlock()
	}
}

// expireLoop fails batches whose delivery deadline passed.
func (p *Producer) expireLoop() {
	t := time.NewTicker(p.cfg.retryBackoff)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			if p.seq != nil {
				d := p.seq.Expire(now)
				p.applyLocked(d)
				if p.txn != nil && !d.Empty() {
					p.txnStepLocked(p.txn.HandleProduce(d))
				}
			}
			expiredUnsent := false
			for _, ps := range p.parts {
				// Batches never sent: certainly not written.
				for len(ps.queue) > 0 && !now.Before(ps.queue[0].deadline) {
					b := ps.popQueue()
					p.finishLocked(b, p.expiredUnsentLocked(b), -1, nil)
					expiredUnsent = true
				}
				if b := ps.inflight; b != nil && !b.retryAt.IsZero() && !now.Before(b.deadline) {
					// Non-idempotent batch waiting for its retry (not on
					// the wire): it may wait for a leader forever.
					ps.inflight = nil
					err := expiredErr(b, b.epoch)
					if b.maybe {
						err = errors.Join(err, errors.ErrUnknownOutcome)
					}
					p.finishLocked(b, err, -1, nil)
				}
				if ps.open != nil && !now.Before(ps.open.deadline) {
					b := ps.open
					ps.open = nil
					// It ends like a closed batch: a sticky partitioner
					// moves on (the partition had no leader to send it).
					p.part.BatchClosed(ps.tp.Topic, ps.tp.Partition)
					p.finishLocked(b, p.expiredUnsentLocked(b), -1, nil)
					expiredUnsent = true
				}
				if ps.leader < 0 && (ps.open != nil || len(ps.queue) > 0 || ps.inflight != nil) {
					p.meta.Trigger(metadata.ReasonWait)
				}
			}
			if p.txn != nil && expiredUnsent {
				// A record of the transaction failed: it cannot commit
				// (never sent, so no sequence was disturbed).
				p.txnStepLocked(p.txn.HandleProduce(Decision{Abortable: &AbortableError{Err: ErrDeliveryTimeout}}))
			}
			p.dropGoneLocked() // what expired may have been all a deleted topic had left
			p.wakeSinksLocked()
			p.mu.Unlock()
		}
	}
}

// expiredErr is the report of a batch whose delivery deadline passed before
// it could be sent (epoch: the leader epoch it was last sent under, or -1).
func expiredErr(b *pbatch, epoch int32) error {
	return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: epoch, Err: ErrDeliveryTimeout}
}

// expiredUnsentLocked is the report of a batch whose delivery deadline
// passed before it was ever sent: while the producer waits for a producer
// identity, it also wraps the last InitProducerId failure (the reason it
// was not sent, which a bare delivery timeout left unsaid).
func (p *Producer) expiredUnsentLocked(b *pbatch) error {
	if !p.needPID || p.pidErr == nil {
		return expiredErr(b, -1)
	}
	return &errors.PartitionError{Op: "produce", Topic: b.tp.Topic, Partition: b.tp.Partition, Offset: -1, LeaderEpoch: -1,
		Err: fmt.Errorf("%w (waiting for a producer identity; last InitProducerId: %w)", ErrDeliveryTimeout, p.pidErr)}
}

// ledgerTask is one acked-write check to send: an OffsetForLeaderEpoch
// question or a probe fetch.
type ledgerTask struct {
	query *EpochQuery
	probe *Probe
	tries int
}

func (p *Producer) queueLedgerLocked(t ledgerTask) {
	p.ledgerQ = append(p.ledgerQ, t)
	select {
	case p.ledgerW <- struct{}{}:
	default:
	}
}

// ledgerLoop sends the ack ledger's questions to partition leaders and
// reports acknowledged writes that are gone.
func (p *Producer) ledgerLoop() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.ledgerW:
		}
		p.mu.Lock()
		tasks := p.ledgerQ
		p.ledgerQ = nil
		p.mu.Unlock()
		for _, t := range tasks {
			p.runLedgerTask(t)
		}
	}
}

func (p *Producer) runLedgerTask(t ledgerTask) {
	p.mu.Lock()
	var tp TopicPartition
	if t.query != nil {
		tp = t.query.TP
	} else {
		tp = t.probe.TP
	}
	if (t.query != nil && !p.ledger.Wants(*t.query)) || (t.probe != nil && !p.ledger.WantsProbe(*t.probe)) {
		// Superseded (a newer leader epoch, a recheck, the topic
		// recreated): the ledger has asked its new question, and this
		// one, sent or resent, would only be refused as fenced or
		// answered Stale.
		p.mu.Unlock()
		return
	}
	ps := p.parts[tp]
	if ps == nil || ps.leader < 0 {
		p.mu.Unlock()
		p.retryLedger(t, errors.ErrLeaderNotAvailable)
		return
	}
	leader, topicID := ps.leader, ps.topicID
	p.mu.Unlock()

	var res CheckResult
	if q := t.query; q != nil {
		end, err := p.offsetForLeaderEpoch(leader, tp, q.Epoch, q.CurrentLeaderEpoch)
		if err != nil {
			p.ledgerFailed(t, leader, err)
			return
		}
		p.mu.Lock()
		needStart := p.ledger.NeedsLogStart(*q, end)
		p.mu.Unlock()
		if needStart {
			// The answer may be the leader's echo of an epoch it no
			// longer keeps: its log start tells.
			if end.LogStartOffset, err = p.logStart(leader, tp, q.CurrentLeaderEpoch); err != nil {
				p.ledgerFailed(t, leader, err)
				return
			}
		}
		p.mu.Lock()
		res = p.ledger.ApplyEpochEnd(*q, end)
		p.mu.Unlock()
	} else {
		pr, err := p.probe(leader, tp, topicID, *t.probe)
		if err != nil {
			p.ledgerFailed(t, leader, err)
			return
		}
		p.mu.Lock()
		res = p.ledger.ApplyProbe(*t.probe, pr)
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.reportLedgerLocked(res)
	if res.Next != nil {
		p.queueLedgerLocked(ledgerTask{query: res.Next})
	}
	if res.Probe != nil {
		if t.probe != nil && res.Probe.Offset == t.probe.Offset && res.Probe.Tail == t.probe.Tail {
			// The fetch got nowhere (offsets above the high
			// watermark, say): ask again after a backoff, a bounded
			// number of times, not at once and forever.
			p.mu.Unlock()
			p.retryLedger(ledgerTask{probe: res.Probe, tries: t.tries}, errProbeStuck)
			return
		}
		p.queueLedgerLocked(ledgerTask{probe: res.Probe})
	}
	p.mu.Unlock()
}

// recordAckLocked records an acknowledged range in the ack ledger and
// queues the check the ledger asks for at once: one for a range recorded
// under a leader epoch older than the newest it has seen (the metadata the
// batch was sent with lagged), which no outstanding check covers.
func (p *Producer) recordAckLocked(tp TopicPartition, r AckedRange) error {
	res, err := p.ledger.Record(tp, r)
	if err != nil {
		return err
	}
	if res.Next != nil {
		p.queueLedgerLocked(ledgerTask{query: res.Next})
	}
	if res.Probe != nil {
		p.queueLedgerLocked(ledgerTask{probe: res.Probe})
	}
	return nil
}

// reportLedgerLocked queues res's reports for OnAckedWritesLost.
func (p *Producer) reportLedgerLocked(res CheckResult) {
	if fn := p.cfg.onAckedLoss; fn != nil {
		for _, l := range res.Lost {
			p.queueFnLocked(func() { fn(l) })
		}
		for _, l := range res.Unconfirmed {
			p.queueFnLocked(func() { fn(l) })
		}
	}
}

// ledgerTries bounds the attempts of one acked-write check (with the
// backoff growing each try: about 21 s with the default RetryBackoff).
const ledgerTries = 20

// errProbeStuck is the error of a probe whose fetches kept reaching none of
// the ranges it is about.
var errProbeStuck = errors.New("the leader's log could not be read at the acknowledged offsets (the fetch returned nothing there)")

// ledgerFailed handles a check whose request to leader failed with err: one
// the broker refused for good (a Kafka error that is not retriable, such as
// TOPIC_AUTHORIZATION_FAILED) is abandoned at once, and so is one that can
// never be sent (unsupportedLedger: kgo refuses, before sending, a request
// the broker does not list or the client's MaxVersions leaves out, with
// errors of its own); anything else is retried.
func (p *Producer) ledgerFailed(t ledgerTask, leader int32, err error) {
	if p.ctx.Err() != nil {
		return // closing: nothing is reported any more
	}
	if _, kafka := errors.CodeOf(err); kafka {
		// A Kafka code, one this client does not know included (not
		// retriable: its meaning is unknown).
		if !errors.IsRetriable(err) {
			p.abandonLedger(t, err)
			return
		}
	} else if refused := p.unsupportedLedger(t, leader); refused != nil {
		p.abandonLedger(t, fmt.Errorf("%w (%w)", refused, err))
		return
	}
	p.retryLedger(t, err)
}

// errLedgerUnsupported is the error of a check whose requests cannot be
// sent to the leader at all.
var errLedgerUnsupported = errors.New("kepoch: a request the check needs cannot be sent")

// unsupportedLedger returns an error wrapping errLedgerUnsupported when a
// request t needs (OffsetForLeaderEpoch and ListOffsets, which a question
// needs when its answer may be an echo (AckLedger.NeedsLogStart); for a
// probe also Fetch) is left out by the client's MaxVersions or by the leader's
// ApiVersions (asked once and kept in p.ledgerAPIs: a check that fails
// again and again does not ask it again each time); nil if both have them,
// or the leader could not be asked (a transient failure: the check is
// retried).
func (p *Producer) unsupportedLedger(t ledgerTask, leader int32) error {
	keys := []kmsg.Key{kmsg.OffsetForLeaderEpoch, kmsg.ListOffsets}
	if t.probe != nil {
		keys = append(keys, kmsg.Fetch)
	}
	if vs, _ := p.cl.OptValue(kgo.MaxVersions).(*kversion.Versions); vs != nil {
		for _, k := range keys {
			if !vs.HasKey(int16(k)) {
				return fmt.Errorf("%w: the client's MaxVersions leaves out %s", errLedgerUnsupported, kmsg.NameForKey(int16(k)))
			}
		}
	}
	addr := "" // a node metadata does not describe (yet) is cached as such
	bs := p.meta.Brokers()
	if i, ok := slices.BinarySearchFunc(bs, leader, func(b metadata.Broker, id int32) int { return cmp.Compare(b.NodeID, id) }); ok {
		addr = bs[i].Addr()
	}
	listed, ok := p.ledgerAPIs.lookup(leader, addr, time.Now())
	if !ok {
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = "kepoch", "1" // v3+ refuses empty names
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
		defer cancel()
		kr, err := p.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return nil
		}
		resp := kr.(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			return nil
		}
		listed = make(map[int16]bool, len(resp.ApiKeys))
		for _, a := range resp.ApiKeys {
			if a.MaxVersion >= 0 {
				listed[a.ApiKey] = true
			}
		}
		p.ledgerAPIs.store(leader, addr, time.Now(), listed)
	}
	for _, k := range keys {
		if !listed[int16(k)] {
			return fmt.Errorf("%w: broker %d does not list %s in its ApiVersions", errLedgerUnsupported, leader, kmsg.NameForKey(int16(k)))
		}
	}
	return nil
}

// ledgerAPIsTTL bounds how long unsupportedLedger trusts a broker's
// ApiVersions answer. What a broker lists changes only when its software
// does, which takes a restart (at the same address, unseen by metadata); a
// minute outlasts one check's retries (about 21 s with the default
// RetryBackoff), so a check failing again and again costs one ApiVersions
// request, and a broker upgraded in place is believed within a minute.
const ledgerAPIsTTL = time.Minute

// brokerAPIs caches, per broker node, the request keys its ApiVersions
// answer listed (with a max version ≥ 0), with the address metadata gave
// the node when it was asked: a node moved to another address (another
// broker process, maybe another version) is asked again, and so is one
// asked ledgerAPIsTTL ago or more. Failed or refused ApiVersions questions
// are not cached. Not safe for concurrent use.
type brokerAPIs struct {
	by map[int32]brokerAPIsEntry
}

type brokerAPIsEntry struct {
	addr   string
	at     time.Time
	listed map[int16]bool
}

// lookup returns the keys node listed, if it was asked at addr less than
// ledgerAPIsTTL before now.
func (c *brokerAPIs) lookup(node int32, addr string, now time.Time) (map[int16]bool, bool) {
	e, ok := c.by[node]
	if !ok || e.addr != addr || now.Sub(e.at) >= ledgerAPIsTTL {
		return nil, false
	}
	return e.listed, true
}

// store records the keys node, at addr, listed at now.
func (c *brokerAPIs) store(node int32, addr string, now time.Time, listed map[int16]bool) {
	if c.by == nil {
		c.by = make(map[int32]brokerAPIsEntry)
	}
	c.by[node] = brokerAPIsEntry{addr: addr, at: now, listed: listed}
}

// retryLedger queues a failed check again after a backoff (a newer leader
// epoch supersedes it anyway). The backoff is waited on a timer, not in the
// ledger loop: the other partitions' checks go on meanwhile. After
// ledgerTries the check is abandoned: its ranges are reported unverified.
func (p *Producer) retryLedger(t ledgerTask, err error) {
	t.tries++
	if t.tries > ledgerTries {
		p.abandonLedger(t, err)
		return
	}
	p.meta.Trigger(metadata.ReasonWait)
	time.AfterFunc(p.cfg.retryBackoff*time.Duration(t.tries), func() {
		if p.ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.queueLedgerLocked(t)
		p.mu.Unlock()
	})
}

// abandonLedger gives up on a check: unless it was superseded meanwhile (a
// newer leader epoch, a recheck, the topic recreated: its successor covers
// the same ranges), the application is told that the ranges it was about
// were not verified (AckedWritesLost with Unconfirmed and Err), never left
// to believe that no report means they survived.
func (p *Producer) abandonLedger(t ledgerTask, err error) {
	if p.ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var res CheckResult
	if t.query != nil {
		res = p.ledger.AbandonQuery(*t.query, err)
	} else {
		res = p.ledger.AbandonProbe(*t.probe, err)
	}
	p.reportLedgerLocked(res)
}

// offsetForLeaderEpoch asks the leader where epoch ends in tp's log. An
// answer about another partition is refused (wire.ErrMalformedAnswer) and
// the check retried like a failed request, never applied to tp.
func (p *Producer) offsetForLeaderEpoch(leader int32, tp TopicPartition, epoch, current int32) (EpochEnd, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
	defer cancel()
	r, err := wire.OffsetForLeaderEpoch(ctx, p.cl.Broker(int(leader)), tp.Topic, tp.Partition, current, epoch)
	if err != nil {
		return EpochEnd{}, err
	}
	if err := errors.FromCode(r.ErrorCode); err != nil {
		return EpochEnd{}, err
	}
	return EpochEnd{Epoch: r.LeaderEpoch, EndOffset: r.EndOffset, LogStartOffset: -1}, nil
}

// tailProbeBytes is the fetch size of a tail probe: the broker returns the
// batch holding the offset whatever the size, so it only bounds what else
// comes along.
const tailProbeBytes = 1

// probe fetches batch headers from the leader at pr.Offset, and (unless it
// is a tail probe) the leader's log end offset for its current epoch.
func (p *Producer) probe(leader int32, tp TopicPartition, topicID [16]byte, pr Probe) (ProbeResult, error) {
	out := ProbeResult{LogStartOffset: -1, LogEndOffset: -1}
	// A tail probe reads one batch and needs no log end: one request.
	maxBytes := int32(tailProbeBytes)
	if !pr.Tail {
		maxBytes = 4 << 20
		end, err := p.offsetForLeaderEpoch(leader, tp, pr.CurrentLeaderEpoch, pr.CurrentLeaderEpoch)
		if err != nil {
			return out, err
		}
		if end.Epoch == pr.CurrentLeaderEpoch {
			out.LogEndOffset = end.EndOffset
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = tp.Topic, topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = tp.Partition
	rp.FetchOffset = pr.Offset
	rp.CurrentLeaderEpoch = pr.CurrentLeaderEpoch
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
	defer cancel()
	resp, err := req.RequestWith(ctx, p.cl.Broker(int(leader)))
	if err != nil {
		return out, err
	}
	// Another partition's batches would be judged as tp's.
	fp, err := wire.FetchAnswer(resp, tp.Topic, topicID, tp.Partition)
	if err != nil {
		return out, err
	}
	switch fp.ErrorCode {
	case 0:
	case kerr.OffsetOutOfRange.Code:
		// Kafka answers it with log_start_offset -1: ask for the log
		// start, so that records retention removed are told apart.
		out.LogStartOffset = fp.LogStartOffset
		if out.LogStartOffset < 0 {
			if out.LogStartOffset, err = p.logStart(leader, tp, pr.CurrentLeaderEpoch); err != nil {
				return out, err
			}
		}
		return out, nil
	default:
		return out, errors.FromCode(fp.ErrorCode)
	}
	out.LogStartOffset = fp.LogStartOffset
	var it recbatch.Iterator
	it.ResetFetch(fp, recbatch.Options{Topic: tp.Topic})
	for it.Next() {
		h := it.Batch().Header
		out.Batches = append(out.Batches, ProbedBatch{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), LeaderEpoch: h.PartitionLeaderEpoch,
			ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence, CRC: h.CRC})
	}
	return out, it.Err()
}

// logStart asks the leader for the partition's log start offset
// (ListOffsets, EARLIEST).
func (p *Producer) logStart(leader int32, tp TopicPartition, current int32) (int64, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
	defer cancel()
	r, err := wire.ListOffset(ctx, p.cl.Broker(int(leader)), tp.Topic, tp.Partition, current, -2)
	if err != nil {
		return -1, err
	}
	if err := errors.FromCode(r.ErrorCode); err != nil {
		return -1, err
	}
	return r.Offset, nil
}
