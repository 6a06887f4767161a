package producer

// recovery.go: what the Sequencer does with each Produce answer, with
// delivery timeouts, and with new producer identities; the epoch bump
// (KIP-360) and the per-batch outcomes it reports.

import (
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	kepocherrors "github.com/kepoch/kepoch/errors"
)

// Delivery says how a Produce attempt ended for one batch.
type Delivery uint8

const (
	// Answered: the partition's response arrived; ProduceResult.Code holds
	// its error code (0 = none).
	Answered Delivery = iota
	// NotSent: the request was certainly never written to a connection
	// (dial failure, cancelled before writing). The broker cannot have
	// appended it.
	NotSent
	// NoResponse: the request was written but no answer came (request
	// timeout, connection lost). The batch may or may not have been
	// appended.
	NoResponse
)

// ProduceResult is one batch's share of a Produce response.
type ProduceResult struct {
	Delivery Delivery
	// Code is the partition's error code (Answered only).
	Code int16
	// BaseOffset is the offset of the first record (Code 0).
	BaseOffset int64
	// LogStartOffset is the partition's log start offset from the response
	// (Produce v5+); -1 when absent.
	LogStartOffset int64
	// ByTopicID: the answer named the topic by ID (Produce v13+), so the
	// broker takes the partition's requests by topic ID, and one that
	// named a deleted incarnation is never appended to a new one.
	ByTopicID bool
}

// class is what a Produce error code means for the batch.
type class uint8

const (
	classOK         class = iota
	classDuplicate        // in the log already, offset unknown
	classRetry            // certainly not appended; resend unchanged
	classRetryMaybe       // may have been appended; resend unchanged
	classOutOfOrder
	classUnknownProducer
	classInvalidEpoch
	classInvalidMapping
	classTooLarge
	classTxnAbortable
	classRefused // certainly not appended, and resending cannot help
	classFatal
)

// classify maps a Produce error code to its class. The mapping is documented
// on Sequencer.Complete.
func classify(code int16) class {
	switch code {
	case 0:
		return classOK
	case kerr.DuplicateSequenceNumber.Code:
		return classDuplicate
	case kerr.UnknownTopicOrPartition.Code, kerr.LeaderNotAvailable.Code, kerr.NotEnoughReplicas.Code,
		kerr.ReplicaNotAvailable.Code, kerr.UnknownTopicID.Code, kerr.InconsistentTopicID.Code,
		kerr.FencedLeaderEpoch.Code, kerr.UnknownLeaderEpoch.Code:
		return classRetry
	case kerr.NotLeaderForPartition.Code, kerr.RequestTimedOut.Code, kerr.NotEnoughReplicasAfterAppend.Code,
		kerr.NetworkException.Code, kerr.KafkaStorageError.Code, kerr.UnknownServerError.Code:
		return classRetryMaybe
	case kerr.OutOfOrderSequenceNumber.Code:
		return classOutOfOrder
	case kerr.UnknownProducerID.Code:
		return classUnknownProducer
	case kerr.InvalidProducerEpoch.Code:
		return classInvalidEpoch
	case kerr.InvalidProducerIDMapping.Code:
		return classInvalidMapping
	case kerr.MessageTooLarge.Code, kerr.RecordListTooLarge.Code:
		return classTooLarge
	case kerr.TransactionAbortable.Code:
		return classTxnAbortable
	case kerr.CorruptMessage.Code, kerr.InvalidRecord.Code, kerr.InvalidTimestamp.Code,
		kerr.TopicAuthorizationFailed.Code, kerr.InvalidRequiredAcks.Code, kerr.InvalidTxnState.Code,
		kerr.InvalidTopicException.Code, kerr.InvalidRequest.Code, kerr.UnsupportedCompressionType.Code:
		return classRefused
	case kerr.ProducerFenced.Code, kerr.TransactionalIDAuthorizationFailed.Code,
		kerr.ClusterAuthorizationFailed.Code, kerr.UnsupportedVersion.Code, kerr.UnsupportedForMessageFormat.Code:
		return classFatal
	default:
		// A code this table does not know: nothing says the batch was
		// not appended, and resending it unchanged can never duplicate
		// it. Retry until its delivery deadline.
		return classRetryMaybe
	}
}

// codeError returns the error for a Kafka error code: an
// *errors.UnknownCodeError, which keeps the code, for one this client does
// not know.
func codeError(code int16) error { return kepocherrors.FromCode(code) }

// Complete records how the latest send of batch ref ended and decides what
// happens next. Call it exactly once for every send (Assign or Sent), in any
// order across partitions; a timeout is NoResponse. Calls for unknown
// batches, or without a send outstanding, return an empty Decision.
//
// Terms: "resend" = the batch stays in flight unchanged and NextResend offers
// it again; "rewrite" = once no request of the partition is outstanding, its
// remaining batches are resequenced from 0 under the producer's current
// identity, each reported ResequencedNoLoss (every attempt definitely refused)
// or PossibleDuplicate (some attempt had no definite answer); "next" = the
// batch is the partition's first unacknowledged one and starts right after
// the last acknowledged sequence, in an attempt sent after the acknowledged
// attempt that proved the batch before it appended (an attempt sent earlier
// may have reached a leader that did not hold it yet: a retry acknowledged
// by a new leader before the old one's answer to a batch pipelined behind
// the retried one's first attempt); "stale" = the producer's identity changed
// since the batch was assigned (a bump already happened: the batch joins it,
// no second bump).
//
//	answer                               idempotent                               transactional
//	NONE                                 Ack                                      Ack
//	DUPLICATE_SEQUENCE_NUMBER            Ack, offset unknown (-1)                 same
//	NotSent; UNKNOWN_TOPIC_OR_PARTITION, resend                                   resend
//	  LEADER_NOT_AVAILABLE,
//	  NOT_ENOUGH_REPLICAS, …
//	NoResponse; NOT_LEADER_OR_FOLLOWER,  resend, batch marked maybe-written       same
//	  REQUEST_TIMED_OUT, NOT_ENOUGH_
//	  REPLICAS_AFTER_APPEND, NETWORK_
//	  EXCEPTION, KAFKA_STORAGE_ERROR,
//	  UNKNOWN_SERVER_ERROR, unknown codes
//	OUT_OF_ORDER_SEQUENCE_NUMBER         resend (an earlier batch failed)         same
//	  not next, not stale
//	OUT_OF_ORDER_SEQUENCE_NUMBER, next   ProvenGap (PossibleGap if nothing was    ProvenGap/PossibleGap; Failed;
//	                                     acked under the identity), check acked   abortable, bump after abort
//	                                     writes; rewrite under a bumped epoch
//	UNKNOWN_PRODUCER_ID answering an     resend                                   resend
//	  attempt sent before the acknowledged
//	  one that set the last acked sequence
//	UNKNOWN_PRODUCER_ID, no loss         rewrite under a bumped epoch             rewrite from 0, same epoch, no abort
//	  (nothing acked, or LogStartOffset
//	  > last acked offset)
//	UNKNOWN_PRODUCER_ID, otherwise       PossibleGap, check acked writes;         PossibleGap; Failed; abortable,
//	  (incl. LogStartOffset -1)          rewrite under a bumped epoch             bump after abort
//	INVALID_PRODUCER_EPOCH               rewrite under a new producer ID          Failed; abortable, bump after abort
//	INVALID_PRODUCER_ID_MAPPING          rewrite under a new producer ID          Failed; abortable, bump, skip EndTxn
//	any of the four above, stale         joins the bump already made: rewrite     (see transactional rows)
//	any of the four above, answering a   resend (the batch starts afresh in the   same, no abort
//	  send to a replaced incarnation     new incarnation: NewIncarnation)
//	MESSAGE_TOO_LARGE, RECORD_LIST_      Split if > 1 record and never            same (Failed + abortable when
//	  TOO_LARGE                          maybe-written, else Failed                 not split)
//	TRANSACTION_ABORTABLE, INVALID_      Failed                                   Failed; abortable, bump after abort
//	  RECORD, CORRUPT_MESSAGE, INVALID_
//	  TIMESTAMP, TOPIC_AUTHORIZATION_
//	  FAILED, INVALID_TXN_STATE, …
//	PRODUCER_FENCED, TRANSACTIONAL_ID_   Failed; Fatal; every batch not on the    same
//	  AUTHORIZATION_FAILED, CLUSTER_     wire Failed
//	  AUTHORIZATION_FAILED,
//	  UNSUPPORTED_VERSION, UNSUPPORTED_
//	  FOR_MESSAGE_FORMAT
//
// A Failed batch keeps its sequences until its partition has nothing
// outstanding. Then, if it is at the tail and certainly not appended, its
// sequences are given back (the next batch reuses them); otherwise the
// partition needs a new identity: an idempotent Sequencer bumps the epoch
// then (one bump, whatever number of batches failed), a transactional one
// reports NeedsBump for the abort. An acknowledgement proves that the leader
// holds every earlier batch of the same identity, so a Failed batch before an
// acknowledged one is resolved as appended (and needs no bump).
//
// Why NOT_LEADER_OR_FOLLOWER counts as maybe-written: with acks=all a leader
// can append, lose leadership before the high watermark moves, and answer
// NOT_LEADER_OR_FOLLOWER while the new leader has the batch (KAFKA-13574).
// Resending unchanged is always safe (the new leader deduplicates it); only a
// rewrite under a new identity could duplicate it, and then the batch is
// reported PossibleDuplicate.
//
// Departures from Java's producer: INVALID_PRODUCER_EPOCH on an idempotent
// producer takes a new producer ID rather than epoch+1 (the leader's epoch for
// this ID is ahead of ours by an unknown amount, and nothing but this
// producer uses it); a batch refused for good is not failed with
// "adjustSequenceNumbers" (renumbering later batches that may be on the wire)
// but given back only at the tail, else resolved by a bump; in a transaction,
// every abort that follows a failed batch bumps the epoch.
func (s *Sequencer) Complete(ref BatchRef, r ProduceResult) Decision {
	var d Decision
	b := s.batches[ref]
	if b == nil || !b.outstanding {
		return d
	}
	b.outstanding = false
	before := s.producer
	switch r.Delivery {
	case NotSent:
		s.resend(b, false, &d)
	case NoResponse:
		s.resend(b, true, &d)
	default:
		s.answer(b, r, &d)
	}
	s.settle(b.part, &d)
	if s.producer != before {
		s.settleAll(&d)
	}
	return d
}

func (s *Sequencer) answer(b *batch, r ProduceResult, d *Decision) {
	b.part.byTopicID = r.ByTopicID
	c := classify(r.Code)
	cause := Cause{TP: b.part.tp, Err: codeError(r.Code)}
	if b.inc != b.part.inc {
		switch c {
		case classOutOfOrder, classUnknownProducer, classInvalidEpoch, classInvalidMapping:
			// About the producer state of a deleted incarnation, and a
			// definite refusal: the batch starts afresh in the new one
			// (NewIncarnation), with no gap and no new identity.
			s.resend(b, false, d)
			return
		}
	}
	switch c {
	case classOK:
		s.ack(b, r.BaseOffset, r.LogStartOffset, d)
	case classDuplicate:
		s.ack(b, -1, r.LogStartOffset, d)
	case classRetry:
		b.retried = cause.Err
		s.resend(b, false, d)
	case classRetryMaybe:
		b.retried = cause.Err
		s.resend(b, true, d)
	case classOutOfOrder:
		s.outOfOrder(b, cause, d)
	case classUnknownProducer:
		s.unknownProducer(b, r.LogStartOffset, cause, d)
	case classInvalidEpoch, classInvalidMapping:
		s.needRewrite(b, cause, true, c == classInvalidMapping, d)
	case classTooLarge:
		if b.disp == active && b.records > 1 && !b.maybeWritten && s.failing == nil && s.fatal == nil {
			b.disp = splitting
			d.Split = append(d.Split, b.ref)
			return
		}
		s.refuse(b, cause, d)
	case classTxnAbortable, classRefused:
		s.refuse(b, cause, d)
	case classFatal:
		s.enterFatal(b, cause.Err, d)
	}
}

// answersBeforeAck reports whether b's latest attempt was sent before the
// acknowledged attempt that set the partition's last acknowledged sequence:
// a refusal of it by the producer state of its leader proves nothing about
// the state of the leader that acknowledged that later attempt.
func (p *partition) answersBeforeAck(b *batch) bool {
	return p.lastAckedSeq >= 0 && b.send < p.lastAckedSend
}

// stale reports whether the producer's identity changed since b was assigned.
func (s *Sequencer) stale(b *batch) bool { return b.id.Producer != s.producer }

// resend keeps b in flight unchanged, to be sent again (or rewritten), unless
// the producer is failing. indefinite marks the attempt as possibly appended.
func (s *Sequencer) resend(b *batch, indefinite bool, d *Decision) {
	if indefinite {
		b.maybeWritten = true
		b.maybeInLog = true
	}
	if b.disp != active {
		return
	}
	switch {
	case s.fatal != nil:
		s.fail(b, fmt.Errorf("%w: %w", ErrProducerFatal, s.fatal), d)
	case s.failing != nil:
		s.fail(b, fmt.Errorf("%w: %w", ErrProducerFailing, s.failing), d)
	}
}

func (s *Sequencer) ack(b *batch, offset, logStart int64, d *Decision) {
	p := b.part
	late := b.disp == abandoned
	b.disp = acked
	b.ackedSend = b.send
	if b.gen == p.gen {
		p.solo = false // the current leader holds the producer's state
	}
	if b.assignedAt.After(p.lastAppend) {
		p.lastAppend = b.assignedAt
	}
	p.ackedN = max(p.ackedN, b.n)
	if offset >= 0 {
		if last := offset + int64(b.records) - 1; last > p.lastAckedOffset {
			p.lastAckedOffset = last
		}
	}
	if b.id.Producer == p.owner && !p.ackedAfter(b) {
		p.latestAckedSeq = b.lastSequence()
	}
	d.Acks = append(d.Acks, Ack{
		Batch: b.ref, TP: p.tp, Records: b.records, Identity: b.id,
		BaseOffset: offset, LogStartOffset: logStart, AfterFailure: late,
	})
	p.resolveAppended(s)
}

// ackedAfter reports whether a batch after b in p is acknowledged.
func (p *partition) ackedAfter(b *batch) bool {
	after := false
	for _, e := range p.inflight {
		if after && e.disp == acked {
			return true
		}
		after = after || e == b
	}
	return false
}

// resolveAppended marks as appended every failed batch that is off the wire
// and precedes an acknowledged batch of the same identity, then pops the
// acknowledged front: the leader accepted that batch's sequence only after
// theirs. This holds whichever came first, the acknowledgement or the
// failure (a batch with no answer can expire after a later one was
// acknowledged): such a batch leaves no gap to bump for.
func (p *partition) resolveAppended(s *Sequencer) {
	for i := len(p.inflight) - 1; i >= 0; i-- {
		x := p.inflight[i]
		if x.disp != acked {
			continue
		}
		for _, e := range p.inflight[:i] {
			if e.disp == abandoned && !e.outstanding && e.id.Producer == x.id.Producer {
				e.disp = acked
				e.ackedSend = x.ackedSend
			}
		}
		break
	}
	p.popAcked(s)
}

func (s *Sequencer) outOfOrder(b *batch, cause Cause, d *Decision) {
	p := b.part
	// A refusal of an attempt sent before the acknowledged attempt of
	// the batch before it proves nothing: that acknowledgement may have
	// come from a leader that had not appended it yet when this attempt
	// reached it (a retry acknowledged by a new leader before the old
	// one's answer to a batch pipelined behind the first attempt).
	next := !p.rewrite && p.isNext(b) && !p.answersBeforeAck(b)
	if !next && !p.rewrite {
		// The leader expects an earlier sequence: an earlier batch of
		// this partition failed or is being retried (or was, when this
		// attempt reached it). Resend after it, under the same identity
		// even if the producer bumped since.
		s.resend(b, false, d)
		return
	}
	if next {
		s.reportGap(p, b, -1, cause, true, d)
	}
	s.needRewrite(b, cause, false, false, d)
}

func (s *Sequencer) unknownProducer(b *batch, logStart int64, cause Cause, d *Decision) {
	p := b.part
	if !p.rewrite && b.id.Producer == p.owner && p.answersBeforeAck(b) {
		// About a leader that saw this attempt before the acknowledged
		// one reached a leader (the acknowledging one holds the
		// producer's state): resend.
		s.resend(b, false, d)
		return
	}
	// The leader has no state for this producer. If every record this
	// partition acknowledged is below the log start offset, retention
	// removed them and the state with them: nothing is lost.
	noLoss := p.lastAckedOffset < 0 || (logStart >= 0 && logStart > p.lastAckedOffset)
	if !noLoss && !p.rewrite {
		s.reportGap(p, b, logStart, cause, false, d)
	}
	if s.cfg.Transactional && noLoss && !s.stale(b) {
		// The leader accepts any first sequence for a producer it does
		// not know: restart this partition at 0 under the same epoch,
		// without aborting the transaction (as Java does).
		p.markRewrite(cause, false, false)
		s.resend(b, false, d)
		return
	}
	s.needRewrite(b, cause, false, false, d)
}

// needRewrite handles a refusal that calls for a new identity on b's
// partition: idempotent, the partition is rewritten when it drains (bumping
// then if no bump happened since b was assigned); transactional, b fails and
// the transaction must abort and bump.
func (s *Sequencer) needRewrite(b *batch, cause Cause, newPID, skipEndTxn bool, d *Decision) {
	if s.cfg.Transactional {
		s.fail(b, cause.Err, d)
		s.enterFailing(cause.Err, true, skipEndTxn, d)
		return
	}
	b.part.markRewrite(cause, true, newPID)
	s.resend(b, false, d)
}

// refuse fails b for good (it was certainly not appended by this attempt).
func (s *Sequencer) refuse(b *batch, cause Cause, d *Decision) {
	s.fail(b, cause.Err, d)
	if s.cfg.Transactional {
		s.enterFailing(cause.Err, true, false, d)
	}
}

// reportGap reports that the leader's producer state lacks what it
// acknowledged (proven when oosn and something was acknowledged under b's
// identity), and asks for an acked-write check.
func (s *Sequencer) reportGap(p *partition, b *batch, logStart int64, cause Cause, oosn bool, d *Decision) {
	ackedUnder := p.lastAckedSeq >= 0 && p.owner == b.id.Producer
	// The sequence named is that of the latest write acknowledged under
	// the identity, which may lie beyond lastAckedSeq: a later batch
	// acknowledged before an earlier one's retry, or failed batches that
	// such an acknowledgement resolved as appended (their records were
	// reported failed, never acknowledged).
	seq := int32(-1)
	if ackedUnder {
		seq = p.lastAckedSeq
		if p.latestAckedSeq >= 0 {
			seq = p.latestAckedSeq
		}
	}
	if oosn && ackedUnder {
		d.Outcomes = append(d.Outcomes, ProvenGap{
			TP: p.tp, Producer: b.id.Producer, LastAckedSequence: seq,
			LastAckedOffset: p.lastAckedOffset, RejectedSequence: b.id.BaseSequence, Cause: cause,
		})
	} else {
		d.Outcomes = append(d.Outcomes, PossibleGap{
			TP: p.tp, Producer: b.id.Producer, LastAckedSequence: seq,
			LastAckedOffset: p.lastAckedOffset, LogStartOffset: logStart, Cause: cause,
		})
	}
	if p.lastAckedOffset >= 0 {
		d.checkAcked(p.tp)
	}
}

func (p *partition) markRewrite(cause Cause, newIdentity, newPID bool) {
	if !p.rewrite || p.cause.Err == nil {
		p.cause = cause
	}
	p.rewrite = true
	p.needNewIdentity = p.needNewIdentity || newIdentity
	p.newPID = p.newPID || newPID
}

// fail reports b Failed and abandons it (it keeps its sequences until the
// partition settles).
func (s *Sequencer) fail(b *batch, err error, d *Decision) {
	if b.disp == abandoned || b.disp == acked {
		return
	}
	b.disp = abandoned
	d.Outcomes = append(d.Outcomes, Failed{
		Batch: b.ref, TP: b.part.tp, Records: b.records, Identity: b.id,
		Err: err, MaybeWritten: b.maybeWritten || b.outstanding,
	})
}

// enterFailing (transactional) makes the transaction abortable and fails
// every batch that is not on the wire.
func (s *Sequencer) enterFailing(err error, bump, skipEndTxn bool, d *Decision) {
	d.abortable(err, bump, skipEndTxn)
	if s.failing == nil {
		s.failing = err
	}
	s.failUnsent(fmt.Errorf("%w: %w", ErrProducerFailing, err), d)
}

func (s *Sequencer) failUnsent(err error, d *Decision) {
	for _, p := range s.order {
		for _, b := range p.inflight {
			if (b.disp == active || b.disp == splitting) && !b.outstanding {
				s.fail(b, err, d)
			}
		}
	}
}

func (s *Sequencer) enterFatal(b *batch, err error, d *Decision) {
	s.fail(b, err, d)
	if s.fatal == nil {
		s.fatal = err
		d.Fatal = err
	}
	s.failUnsent(fmt.Errorf("%w: %w", ErrProducerFatal, err), d)
}

// settle moves partition p on once nothing of it is outstanding: gives back
// the sequences of failed batches at its tail, bumps the epoch when p needs a
// new identity (idempotent), rewrites p's batches under the current identity,
// or restarts p's sequences at 0 under a new identity (KAFKA-12152: never
// while batches under the old identity are on the wire).
func (s *Sequencer) settle(p *partition, d *Decision) {
	if s.fatal != nil || p.outstanding() > 0 {
		return
	}
	p.resolveAppended(s)
	if p.hasAbandoned() && !p.needNewIdentity && !p.restart {
		if p.rewrite || !p.rollbackTail(s) {
			p.markRewrite(p.abandonedCause(), true, false)
		}
	}
	if p.rewrite && p.needNewIdentity && p.owner == s.producer {
		if s.cfg.Transactional {
			return // the abort that follows bumps the epoch (SetProducer)
		}
		s.bump(p, d)
	}
	if !s.producer.Valid() {
		return
	}
	switch {
	case p.rewrite:
		s.rewrite(p, d)
	case p.owner != s.producer && !p.hasLive():
		p.drop(s)
		p.reset(s.producer)
	}
}

func (s *Sequencer) settleAll(d *Decision) {
	for {
		before := s.producer
		for _, p := range s.order {
			s.settle(p, d)
		}
		if s.producer == before {
			return
		}
	}
}

// bump takes a new identity for the producer because of p (idempotent).
func (s *Sequencer) bump(p *partition, d *Decision) {
	from := s.producer
	s.bumps++
	if p.newPID || from.Epoch == math.MaxInt16 {
		s.producer = NoProducerID
		s.awaitingID = true
		d.NeedProducerID = true
		d.Bump = &EpochBump{From: from, To: NoProducerID, NewProducerID: true, Cause: p.cause}
		return
	}
	s.producer = ProducerID{ID: from.ID, Epoch: from.Epoch + 1}
	d.Bump = &EpochBump{From: from, To: s.producer, Cause: p.cause}
}

// rewrite resequences p's remaining batches from 0 under the current
// identity; failed and acknowledged batches are dropped.
func (s *Sequencer) rewrite(p *partition, d *Decision) {
	p.reset(s.producer)
	restart := p.restart
	if restart {
		// Nothing acknowledged by the deleted incarnation is in the new
		// one: its offsets mean nothing there.
		p.lastAckedOffset = -1
		p.lastAppend = time.Time{}
		p.restart = false
	}
	kept := p.inflight[:0]
	for _, b := range p.inflight {
		if b.disp == acked || b.disp == abandoned {
			delete(s.batches, b.ref)
			continue
		}
		from := b.id
		b.id = BatchIdentity{Producer: s.producer, BaseSequence: p.nextSeq}
		p.nextSeq = NextSequence(p.nextSeq, b.records)
		if b.maybeInLog {
			d.Outcomes = append(d.Outcomes, PossibleDuplicate{Batch: b.ref, TP: p.tp, Records: b.records, From: from, To: b.id, Cause: p.cause})
		} else {
			d.Outcomes = append(d.Outcomes, ResequencedNoLoss{Batch: b.ref, TP: p.tp, Records: b.records, From: from, To: b.id, Cause: p.cause})
		}
		if restart && p.byTopicID {
			// The possible copy in the deleted log is reported just
			// now; the new incarnation's log has not received the
			// batch (its requests named the deleted one by ID), so
			// b.id's sequences are free there until an attempt to it
			// goes unanswered. Requests that name the topic only
			// could have reached the new log: the batch stays maybe
			// in it, and a failure of it then bumps the epoch.
			b.maybeInLog = false
		}
		kept = append(kept, b)
	}
	clear(p.inflight[len(kept):])
	p.inflight = kept
	p.rewrite, p.needNewIdentity, p.newPID = false, false, false
	p.cause = Cause{}
}

// rollbackTail gives back the sequences of failed batches at the end of p
// that were certainly never appended to the partition's current topic
// incarnation, if no other failed batch precedes them. (A batch possibly
// written only to a deleted incarnation has had no attempt to the current
// one, or only definitely refused ones: its sequences are free there.)
func (p *partition) rollbackTail(s *Sequencer) bool {
	i := len(p.inflight)
	for i > 0 && p.inflight[i-1].disp == abandoned && !p.inflight[i-1].maybeInLog {
		i--
	}
	if i == len(p.inflight) {
		return false
	}
	for _, b := range p.inflight[:i] {
		if b.disp == abandoned {
			return false
		}
	}
	p.nextSeq = p.inflight[i].id.BaseSequence
	for _, b := range p.inflight[i:] {
		delete(s.batches, b.ref)
	}
	clear(p.inflight[i:])
	p.inflight = p.inflight[:i]
	return true
}

func (p *partition) hasLive() bool {
	for _, b := range p.inflight {
		if b.disp == active || b.disp == splitting {
			return true
		}
	}
	return false
}

func (p *partition) drop(s *Sequencer) {
	for _, b := range p.inflight {
		delete(s.batches, b.ref)
	}
	clear(p.inflight)
	p.inflight = p.inflight[:0]
}

func (p *partition) abandonedCause() Cause {
	return Cause{TP: p.tp, Err: errAbandonedSequences}
}

var errAbandonedSequences = fmt.Errorf("kepoch: failed batch left a sequence gap")

// Expire fails every batch whose delivery deadline is at or before now
// (Failed with ErrDeliveryTimeout; MaybeWritten when a request for it is still
// on the wire or an earlier attempt had no definite answer). A batch still on
// the wire keeps its sequences until its answer arrives: if the answer is an
// acknowledgement the Decision then carries an Ack with AfterFailure set.
// Transactional: the transaction becomes abortable with a bump (a timed-out
// batch cannot be resent under new sequences without risking a duplicate,
// KAFKA-18579).
func (s *Sequencer) Expire(now time.Time) Decision {
	var d Decision
	if now.After(s.clock) {
		s.clock = now
	}
	before := s.producer
	expired := false
	for _, p := range s.order {
		touched := false
		for _, b := range p.inflight {
			if b.deadline.IsZero() || now.Before(b.deadline) || b.disp == abandoned || b.disp == acked {
				continue
			}
			s.fail(b, expiredError(b), &d)
			touched = true
		}
		if touched {
			expired = true
			if !s.cfg.Transactional {
				s.settle(p, &d)
			}
		}
	}
	if expired && s.cfg.Transactional {
		s.enterFailing(ErrDeliveryTimeout, true, false, &d)
	}
	if s.producer != before {
		s.settleAll(&d)
	}
	return d
}

// expiredError is the error of batch b whose delivery deadline passed:
// ErrDeliveryTimeout, and the error code that had it retried last, if an
// answer did (an unknown code among them would otherwise go unsaid).
func expiredError(b *batch) error {
	if b.retried == nil {
		return ErrDeliveryTimeout
	}
	return fmt.Errorf("%w (last answer: %w)", ErrDeliveryTimeout, b.retried)
}

// Abandon gives up on batch ref for a reason of the I/O layer's own (it
// cannot encode the batch, the producer is closing): the batch is reported
// Failed with err (MaybeWritten if a request for it is on the wire or an
// earlier attempt had no definite answer) and its sequences are resolved like
// a refused batch's: given back at the tail, else by a bump once the
// partition has nothing outstanding. Transactional: the transaction becomes
// abortable. A nil err is taken as an error matching
// errors.ErrInvalidArgument that says so.
func (s *Sequencer) Abandon(ref BatchRef, err error) Decision {
	var d Decision
	b := s.batches[ref]
	if b == nil || b.disp == abandoned || b.disp == acked {
		return d
	}
	if err == nil {
		// The batch fails all the same: a Failed outcome without an
		// error would read as delivered.
		err = invalidArgument("Sequencer.Abandon", "err", "nil (a batch is abandoned for a reason)")
	}
	before := s.producer
	s.fail(b, err, &d)
	if s.cfg.Transactional {
		s.enterFailing(err, true, false, &d)
	}
	s.settle(b.part, &d)
	if s.producer != before {
		s.settleAll(&d)
	}
	return d
}

// NewIncarnation tells the Sequencer that tp's topic was deleted and
// created again (metadata names a new topic ID for it): call it when the
// I/O layer adopts the new ID, before anything is sent to it. The new
// partition holds no state for this producer, so it accepts sequence 0
// under the current identity and refuses any other first sequence; tp's
// sequences therefore start afresh, with no gap reported and no bump.
//
// Once no request of tp is outstanding (answers to requests that named the
// deleted incarnation are about its log: acknowledgements are acknowledged,
// and OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID,
// INVALID_PRODUCER_EPOCH and INVALID_PRODUCER_ID_MAPPING are definite
// refusals that need no new identity), tp's remaining batches are
// resequenced from 0 under the current identity, in order, each reported
// with Cause errors.ErrTopicIDChanged: ResequencedNoLoss when every attempt
// on the deleted incarnation was definitely refused, PossibleDuplicate when
// some attempt on it had no definite answer (the deleted log may have held
// it, and a consumer may have read it there; a possible copy in an
// incarnation deleted before it was reported then, and is not again). Until then tp sends nothing,
// so no batch reaches the new incarnation with a sequence of the old one.
// Batches failed on the deleted incarnation leave no gap in the new one;
// nor does a resequenced batch that fails before an attempt of it to the
// new incarnation goes unanswered: at the tail, its sequences are given
// back there without a bump, whatever it may have left in the deleted log
// (when the partition's answers name the topic by ID, Produce v13+; a
// request naming the topic only may have reached the new log, and the
// batch's failure bumps the epoch).
func (s *Sequencer) NewIncarnation(tp TopicPartition) Decision {
	var d Decision
	p := s.parts[tp]
	if p == nil || s.fatal != nil {
		return d
	}
	p.inc++
	p.restart = true
	p.rewrite = true
	p.cause = Cause{TP: tp, Err: kepocherrors.ErrTopicIDChanged}
	// A new identity the deleted incarnation called for is not needed in
	// the new one; a new producer ID still is.
	p.needNewIdentity = p.newPID
	before := s.producer
	s.settle(p, &d)
	if s.producer != before {
		s.settleAll(&d)
	}
	return d
}

// ackedSince reports whether tp had a batch acknowledged among those
// assigned after the first n (a transaction's: TxnState.assignedAtBegin).
func (s *Sequencer) ackedSince(tp TopicPartition, n uint64) bool {
	p := s.parts[tp]
	return p != nil && p.ackedN > n
}

// SetProducer adopts a producer identity: the first one from InitProducerId,
// a new producer ID after Decision.NeedProducerID, or a transactional
// producer's new epoch (InitProducerId after an abort, or EndTxn v5+). Each
// partition restarts its sequences at 0 under it once its in-flight batches
// under the old identity are finished; pending rewrites happen now if
// nothing of their partition is on the wire. It also ends a failing period
// (FailPending, a transactional abort).
func (s *Sequencer) SetProducer(id ProducerID) (Decision, error) {
	var d Decision
	if !id.Valid() {
		return d, invalidArgument("Sequencer.SetProducer", "id", fmt.Sprintf("%v is not a producer identity", id))
	}
	if s.fatal != nil {
		return d, fmt.Errorf("%w: %w", ErrProducerFatal, s.fatal)
	}
	s.producer = id
	s.awaitingID = false
	s.failing = nil
	s.settleAll(&d)
	return d, nil
}

// FailPending fails every batch that is not on the wire with err and stops
// resends and new batches until SetProducer or Resume: for a transaction being
// aborted, or a producer closing. Batches on the wire fail when their answer
// comes (unless it is an acknowledgement). A nil err is taken as an error
// matching errors.ErrInvalidArgument that says so.
func (s *Sequencer) FailPending(err error) Decision {
	var d Decision
	if err == nil {
		// Batches fail all the same, and the period starts: a nil
		// failing would neither read as failed nor stop new batches.
		err = invalidArgument("Sequencer.FailPending", "err", "nil (batches fail for a reason)")
	}
	if s.failing == nil {
		s.failing = err
	}
	s.failUnsent(err, &d)
	return d
}

// Resume ends a failing period when no new identity is needed (a
// transactional abort in which no batch lost its sequences); otherwise it
// returns an error matching ErrResumeRefused and the caller must bump
// (SetProducer with a new epoch) or wait for the batches on the wire.
func (s *Sequencer) Resume() error {
	if s.NeedsBump() {
		return fmt.Errorf("%w: they need a new producer epoch", ErrResumeRefused)
	}
	if s.Outstanding() > 0 {
		return fmt.Errorf("%w: %d batches still on the wire", ErrResumeRefused, s.Outstanding())
	}
	s.failing = nil
	return nil
}
