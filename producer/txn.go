package producer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// The transactional producer: a TxnState (pure) decides, the txn loop sends
// its coordinator requests one at a time and feeds the answers back. The
// application calls InitTransactions once, then Begin/Commit/Abort.

// InitTransactions gets the transactional producer its producer ID and
// epoch from the transaction coordinator, fencing any earlier producer with
// the same transactional ID. Call it once, before the first Begin.
func (p *Producer) InitTransactions(ctx context.Context) error {
	if ctx == nil {
		return nilContext("InitTransactions")
	}
	return p.txnOp(ctx, "init", func() (TxnStep, error) { return p.txn.InitTransactions() }, false)
}

// BeginTransaction opens a transaction: records produced until Commit or
// Abort belong to it. After Close it returns errors.ErrClosed.
func (p *Producer) BeginTransaction() error {
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.closedErrLocked()
	}
	if err := p.txn.Begin(); err != nil {
		return err
	}
	p.txnLeft = nil // a left operation's result belongs to the previous transaction
	return nil
}

// CommitTransaction sends every record of the transaction, waits for their
// acknowledgements, and commits. If the transaction cannot commit (an
// abortable error), the error matches ErrAbortRequired: call
// AbortTransaction. If ctx ends first, the commit goes on: calling
// CommitTransaction again waits for that same commit's outcome (and so do
// InitTransactions and AbortTransaction for theirs). A Close while it
// waits ends it with ErrClosed, and with ErrUnknownOutcome if its EndTxn
// may have reached the coordinator; if none can have (the commit was
// still waiting for its records, or every EndTxn was refused unapplied),
// the error matches ErrAbortRequired and ErrClosed: it did not commit.
// While it runs,
// Produce refuses records with an error matching ErrTxnState (delivery
// callbacks included), as Java's producer refuses sends once a commit
// began: produce a transaction's records before committing it.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	if ctx == nil {
		return nilContext("CommitTransaction")
	}
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	// Produce refuses records until the call returns (as Java's producer
	// refuses sends once a commit began): records still coming would keep
	// the flush below from ever ending, and whether they were in the
	// transaction would depend on timing.
	p.mu.Lock()
	if p.closed {
		err := p.closedTxnErrLocked("commit")
		p.mu.Unlock()
		return err
	}
	// Under way from now on: a Close waits for it (bounded).
	p.committing++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.committing--
		p.txnOpEndedLocked()
		p.mu.Unlock()
	}()
	p.mu.Lock()
	st := p.txn.State()
	p.mu.Unlock()
	// Commit refuses at once in an error state: no need to wait for the
	// records. Otherwise every record is in a batch the flush waits for
	// (none can come meanwhile), as TxnState.Commit requires.
	if st != TxnAbortableError && st != TxnFatalError {
		if err := p.Flush(ctx); err != nil {
			p.mu.Lock()
			closing := p.closed && err == p.closeErr
			p.mu.Unlock()
			if !closing {
				return err
			}
			// Close began while the commit flushed: every record was
			// reported (the flush waited for them) and Close waits for
			// the commit, which txnOp runs, or, once the producer
			// stopped, reports not committed (its records failed).
		}
	}
	// Admitted before Close began: it runs to its end while Close waits.
	return p.txnOp(ctx, "commit", func() (TxnStep, error) { return p.txn.Commit() }, true)
}

// AbortTransaction fails the transaction's records that are not sent yet
// (with ErrTransactionAborted), waits for those on the wire, and aborts;
// after an error that disturbed sequences it also bumps the producer epoch
// (KIP-360), so the next transaction starts clean.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	if ctx == nil {
		return nilContext("AbortTransaction")
	}
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	return p.txnOp(ctx, "abort", p.abortOp, false)
}

// abortOp starts an abort (p.mu held): the records still buffered for the
// transaction fail with ErrTransactionAborted. A request the txn loop has
// not taken yet (it sleeps the retry backoff before sending it again) is
// given back to the TxnState, which drops an AddPartitionsToTxn: waited
// out and sent, it only delayed the abort, and could start on the
// coordinator a transaction the abort then had to end with EndTxn.
func (p *Producer) abortOp() (TxnStep, error) {
	unsent := p.txnSend != nil
	step, err := p.txn.Abort(unsent)
	if err == nil {
		if unsent {
			p.txnSend = nil // the step hands out what is to be sent instead
		}
		for _, ps := range p.parts {
			ps.failAll(p, ErrTransactionAborted)
		}
	}
	return step, err
}

// closeTxnLocked is Close's part for a transactional producer, as Java's
// close does it: it waits for the InitTransactions, CommitTransaction or
// AbortTransaction under way, then aborts the transaction left open, both
// bounded by ctx and the DeliveryTimeout. With ctx already ended it waits
// for nothing and aborts nothing, as a crash would (the coordinator aborts
// the transaction when it times out, or InitTransactions of the next
// producer with the transactional ID does). It returns why a transaction
// left open was not aborted. p.mu is held, and released while it waits.
func (p *Producer) closeTxnLocked(ctx context.Context) error {
	open := func() bool {
		st := p.txn.State()
		return st == TxnInTransaction || st == TxnAbortableError
	}
	if err := ctx.Err(); err != nil {
		if open() {
			return fmt.Errorf("producer: the open transaction was not aborted: %w", err)
		}
		return nil
	}
	bctx, cancel := context.WithTimeout(ctx, p.cfg.deliveryTO)
	defer cancel()
	for p.txnBusyLocked() && bctx.Err() == nil {
		if p.txnIdle == nil {
			p.txnIdle = make(chan struct{})
		}
		idle := p.txnIdle
		p.mu.Unlock()
		select {
		case <-idle:
		case <-bctx.Done():
		}
		p.mu.Lock()
	}
	if p.txnBusyLocked() || !open() {
		// Still under way: its caller is told how it was stopped.
		return nil
	}
	if p.txnLeftKind == "abort" {
		p.txnLeft = nil // an earlier abort's outcome: this one is new
	}
	p.mu.Unlock()
	err := p.txnOp(bctx, "abort", p.abortOp, true)
	p.mu.Lock()
	if err != nil {
		return fmt.Errorf("producer: aborting the open transaction: %w", err)
	}
	return nil
}

// txnBusyLocked reports whether a transaction operation is under way: an
// InitTransactions, CommitTransaction (its flush included) or
// AbortTransaction, or one whose caller's context ended.
func (p *Producer) txnBusyLocked() bool { return p.txnDone != nil || p.committing > 0 }

// txnOpEndedLocked wakes a Close waiting for the operations under way once
// none is.
func (p *Producer) txnOpEndedLocked() {
	if p.txnIdle != nil && !p.txnBusyLocked() {
		close(p.txnIdle)
		p.txnIdle = nil
	}
}

// closedTxnErrLocked is the error of a transaction operation of kind
// refused because the producer closed: a commit of an open transaction
// (abortable or not) did not commit (ErrAbortRequired and ErrClosed),
// anything else is ErrClosed.
func (p *Producer) closedTxnErrLocked(kind string) error {
	if st := p.txn.State(); kind == "commit" && (st == TxnInTransaction || st == TxnAbortableError) {
		return fmt.Errorf("producer: %w: %w", ErrAbortRequired, p.closedErrLocked())
	}
	return p.closedErrLocked()
}

// txnOp runs a TxnState operation (kind names it: "init", "commit",
// "abort") and waits for its Done step. When ctx ends first, the operation
// goes on, and the next call of the same kind waits for its outcome
// instead of starting another (a commit that timed out for its caller may
// still commit; the retry says whether it did). After Close began it is
// refused unless closedOK (a commit admitted before, Close's own abort);
// once the txn loop stopped, always.
func (p *Producer) txnOp(ctx context.Context, kind string, op func() (TxnStep, error), closedOK bool) error {
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	p.mu.Lock()
	for kind != "init" && p.offsetsBusy > 0 {
		// A SendOffsetsToTransaction is under way: EndTxn must not
		// overtake its TxnOffsetCommit.
		idle := p.offsetsIdle
		p.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	var done chan error
	switch {
	case p.txnLeft != nil && p.txnLeftKind == kind:
		// The same operation, left by a caller whose context ended:
		// wait for (or take) its outcome, which Close supplies if the
		// coordinator's does not come.
		done, p.txnLeft = p.txnLeft, nil
	case (p.closed && !closedOK) || p.ctx.Err() != nil:
		// Closed before its EndTxn could be sent: a commit did not
		// commit.
		err := p.closedTxnErrLocked(kind)
		p.mu.Unlock()
		return err
	default:
		if p.txnDone != nil {
			p.mu.Unlock()
			return fmt.Errorf("producer: %w: another transaction operation is in progress", ErrTxnState)
		}
		done = make(chan error, 1)
		p.txnDone, p.txnKind = done, kind
		step, err := op()
		if err != nil {
			// Refused: a left operation's outcome stays for its retry.
			p.txnDone = nil
			p.txnOpEndedLocked()
			p.mu.Unlock()
			return err
		}
		p.txnLeft = nil
		p.txnStepLocked(step)
	}
	p.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The operation goes on; its outcome stays in done for a retry.
		p.mu.Lock()
		p.txnLeft, p.txnLeftKind = done, kind
		// An InitProducerId failing again and again (a bump, an
		// InitTransactions) is what it waited on: said, not a bare
		// context error.
		cause := p.pidErr
		p.mu.Unlock()
		if cause != nil {
			return fmt.Errorf("%w (last InitProducerId: %w)", ctx.Err(), cause)
		}
		return ctx.Err()
	}
}

// txnStepLocked carries out a TxnStep: its Decision, its request (handed to
// the txn loop), its completion.
func (p *Producer) txnStepLocked(step TxnStep) {
	p.applyLocked(step.Decision)
	if st := p.txn.State(); st == TxnAbortableError || st == TxnFatalError {
		// Records still buffered for the transaction can no longer be
		// part of it: they fail now (the Sequencer failed its batches).
		err := p.txn.stateErr()
		if st == TxnFatalError && p.fatal == nil {
			p.fatal = err
		}
		for _, ps := range p.parts {
			ps.failAll(p, err)
		}
	}
	if step.Send != nil {
		p.txnSend = step.Send
		p.wakeTxnLocked()
	}
	if step.Done && p.txnDone != nil {
		p.txnDone <- step.Err
		p.txnDone = nil
		p.txnOpEndedLocked()
	}
	p.wakeSinksLocked()
}

func (p *Producer) wakeTxnLocked() {
	select {
	case p.txnWake <- struct{}{}:
	default:
	}
}

// txnLoop sends the coordinator request the TxnState wants (one at a time)
// and applies its answer.
func (p *Producer) txnLoop() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.txnWake:
		}
		for {
			p.mu.Lock()
			send := p.txnSend
			p.txnSend = nil
			if send == nil {
				step := p.txn.Poll()
				if step.Send == nil {
					p.txnStepLocked(step)
					p.mu.Unlock()
					break
				}
				send = step.Send
			}
			p.mu.Unlock()
			step, retry, err := p.sendTxn(send)
			// The answer's result first: an operation it settled ends
			// now, and Close and the application see the state it
			// left, not the one before it, during the backoff below.
			p.mu.Lock()
			if err == nil {
				p.txnStepLocked(step)
			} else if p.txnDone != nil {
				p.txnDone <- err
				p.txnDone = nil
				p.txnOpEndedLocked()
			}
			resend := p.txnSend
			if !retry {
				resend = nil
			}
			p.mu.Unlock()
			// The coordinator did not settle it and the TxnState sends
			// again: pace the resends.
			if resend != nil && !p.txnBackoff(resend) {
				return
			}
			if p.ctx.Err() != nil {
				return
			}
		}
	}
}

// txnBackoff sleeps the retry backoff before resend, the request the
// TxnState handed out to be sent again, and reports false if the producer
// stopped meanwhile. It ends early once resend is no longer the request to
// send (an abort dropped an AddPartitionsToTxn waiting here): the backoff
// paces resends of the request the coordinator refused, and what replaces
// it (EndTxn) is another request, which Java's client does not hold back
// either (it sleeps the backoff only before a retried request). An EndTxn
// refused for the same reason as the add (CONCURRENT_TRANSACTIONS,
// COORDINATOR_LOAD_IN_PROGRESS: the coordinator is busy with the
// transactional ID) is then paced by its own backoff: one request more,
// while waiting out the add's delayed every such abort by up to the
// backoff, whatever the add's refusal was about (a partition refused or
// left out concerns no EndTxn).
func (p *Producer) txnBackoff(resend TxnRequest) bool {
	timer := time.NewTimer(p.cfg.retryBackoff)
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-p.txnWake:
			// The token may be the one that handed resend out:
			// only a different request ends the wait.
			p.mu.Lock()
			same := p.txnSend == resend
			p.mu.Unlock()
			if !same {
				return true
			}
		}
	}
}

// lookupRefusal returns the code of a request error that is the refusal
// of the lookup of the request's coordinator: kgo returns the error of the
// FindCoordinator answer that was to locate the coordinator as the
// request's own (a coordinator request's own answer comes back as a
// response, never as a *kerr.Error). The request was not sent, so it was
// not applied: it is judged as answered with that code, as final as the
// coordinator's own answer would be.
//
//	TRANSACTIONAL_ID_AUTHORIZATION_FAILED,  not authorized: fatal, as Java's FindCoordinator handler
//	  GROUP_AUTHORIZATION_FAILED, CLUSTER_    makes it (taken for a lost answer, the request was sent
//	  AUTHORIZATION_FAILED                    again for ever, InitTransactions and CommitTransaction
//	                                          never returned)
//	COORDINATOR_NOT_AVAILABLE, NOT_         the coordinator is not known yet: sent again after a
//	  COORDINATOR, COORDINATOR_LOAD_IN_       lookup (taken for a lost answer, an EndTxn was judged
//	  PROGRESS                                perhaps applied, the commit ended with a bump, and an
//	                                          offsets request failed SendOffsetsToTransaction)
func lookupRefusal(err error) (int16, bool) {
	ke, ok := errors.AsType[*kerr.Error](err)
	if !ok {
		return 0, false
	}
	switch ke.Code {
	case kerr.TransactionalIDAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Code,
		kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code:
		return ke.Code, true
	}
	return 0, false
}

// retriedAnswered reports whether a coordinator request the transport
// returned with err had an attempt answered before the one whose answer
// it returned, given answers, the attempts answered while it ran: the
// transport sends the request again by itself after an answer of
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
// COORDINATOR_LOAD_IN_PROGRESS (it looks the coordinator up again), and
// returns only the last attempt's answer, or the error that ended it (a
// refused lookup, a lost connection): every answer counted but the one
// returned is such an answer, which may come after the attempt was
// applied (answeredAfterAppend).
func retriedAnswered(answers uint64, err error) bool {
	if err != nil {
		return answers > 0
	}
	return answers > 1
}

// attempts counts the attempts of one kind of coordinator request that the
// transport wrote: those whose answer never came (a connection lost after
// the write) and those answered. The transport sends such a request again
// by itself after either, so a sender learns only from these counts that
// an earlier attempt may have been applied.
type attempts struct{ lost, answered atomic.Uint64 }

// attemptMark is what attempts had counted when a request was sent.
type attemptMark struct{ lost, answered uint64 }

// note counts an attempt written: lost, or answered.
func (a *attempts) note(lost bool) {
	if lost {
		a.lost.Add(1)
	} else {
		a.answered.Add(1)
	}
}

// mark takes the counts before a request is sent.
func (a *attempts) mark() attemptMark { return attemptMark{a.lost.Load(), a.answered.Load()} }

// since reports, for a request sent at m that the transport returned with
// err, whether an attempt of it was written and its answer lost, and
// whether one was answered before the answer returned (retriedAnswered).
func (a *attempts) since(m attemptMark, err error) (lost, retried bool) {
	return a.lost.Load() != m.lost, retriedAnswered(a.answered.Load()-m.answered, err)
}

// addPartitionsResults reads the per-partition codes of resp, the answer to
// req, from the field its version carries them in: Topics up to v3, the
// entry of req's transactional ID in Transactions (or the top-level code,
// for every partition of req) from v4 (batched, KIP-890). kgo fills both
// fields whatever the version (it converts one into the other), so reading
// both counted every partition twice. A partition the answer leaves out is
// added again (HandleAddPartitions), after the retry backoff (sendTxn).
func addPartitionsResults(resp *kmsg.AddPartitionsToTxnResponse, req *AddPartitionsRequest) []AddPartitionResult {
	var results []AddPartitionResult
	if resp.Version <= 3 {
		for _, t := range resp.Topics {
			for _, pp := range t.Partitions {
				results = append(results, AddPartitionResult{TP: TopicPartition{t.Topic, pp.Partition}, Code: pp.ErrorCode})
			}
		}
		return results
	}
	if resp.ErrorCode != 0 {
		for _, tp := range req.Partitions {
			results = append(results, AddPartitionResult{TP: tp, Code: resp.ErrorCode})
		}
		return results
	}
	for _, txn := range resp.Transactions {
		if txn.TransactionalID != req.TransactionalID {
			continue
		}
		for _, t := range txn.Topics {
			for _, pp := range t.Partitions {
				results = append(results, AddPartitionResult{TP: TopicPartition{t.Topic, pp.Partition}, Code: pp.ErrorCode})
			}
		}
		break
	}
	return results
}

func (p *Producer) delivery(err error) Delivery {
	if errors.ProduceNotApplied(err) {
		return NotSent
	}
	return NoResponse
}

// sendTxn sends one coordinator request and returns the TxnState's next
// step for its answer, and whether the request failed in a way that makes
// the TxnState send it again.
func (p *Producer) sendTxn(r TxnRequest) (TxnStep, bool, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.requestTO)
	defer cancel()
	var step TxnStep
	var herr error
	var retry bool
	switch r := r.(type) {
	case *InitProducerIDRequest:
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(r.TransactionalID)
		req.TransactionTimeoutMillis = int32(p.cfg.txnTimeout / time.Millisecond)
		req.ProducerID, req.ProducerEpoch = r.Producer.ID, r.Producer.Epoch
		resp, err := req.RequestWith(ctx, p.cl)
		res := InitProducerIDResult{Producer: NoProducerID}
		if code, ok := lookupRefusal(err); ok {
			res.Code = code
		} else if err != nil {
			res.Delivery = p.delivery(err)
		} else {
			res.Code, res.Producer = resp.ErrorCode, ProducerID{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}
		}
		// A failure is kept for the error of a caller that stops
		// waiting (txnOp); the answer's identity is checked here only
		// to say so: HandleInitProducerID decides.
		var failed error
		switch {
		case res.Delivery != Answered:
			failed = err
		case res.Code != 0:
			failed = errors.FromCode(res.Code)
		case !res.Producer.Valid():
			failed = fmt.Errorf("%w (producer ID %d, epoch %d)", ErrNoProducerIdentity, res.Producer.ID, res.Producer.Epoch)
		}
		retry = failed != nil
		p.mu.Lock()
		step, herr = p.txn.HandleInitProducerID(res)
		p.pidErr = failed
		if step.Done || herr != nil {
			p.pidErr = nil // settled: the operation ends with its own error
		}
		p.mu.Unlock()
	case *AddPartitionsRequest:
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID = r.TransactionalID
		req.ProducerID, req.ProducerEpoch = r.Producer.ID, r.Producer.Epoch
		idx := map[string]int{}
		for _, tp := range r.Partitions {
			i, ok := idx[tp.Topic]
			if !ok {
				t := kmsg.NewAddPartitionsToTxnRequestTopic()
				t.Topic = tp.Topic
				req.Topics = append(req.Topics, t)
				i = len(req.Topics) - 1
				idx[tp.Topic] = i
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, tp.Partition)
		}
		mark := p.addAttempts.mark()
		resp, err := req.RequestWith(ctx, p.cl)
		// The transport wrote an attempt whose answer was lost, or that
		// was answered with a code it retries, and sent it again: that
		// attempt may have started the transaction, whatever the resend
		// met (a refused lookup, a refusal).
		lost, retried := p.addAttempts.since(mark, err)
		resent := lost || retried
		var results []AddPartitionResult
		d := Answered
		if code, ok := lookupRefusal(err); ok {
			for _, tp := range r.Partitions {
				results = append(results, AddPartitionResult{TP: tp, Code: code, Lookup: true})
			}
		} else if err != nil {
			d = p.delivery(err)
		} else {
			results = addPartitionsResults(resp, r)
		}
		// Sent again after the backoff unless every partition was
		// added: one the answer refused or left out (a broker's
		// mistake, HandleAddPartitions adds it again) waits as a
		// retriable refusal does, or the loop would send at once, as
		// often as such answers come.
		retry = d != Answered
		added := make(map[TopicPartition]bool, len(results))
		for _, r := range results {
			retry = retry || r.Code != 0
			added[r.TP] = added[r.TP] || r.Code == 0
		}
		for _, tp := range r.Partitions {
			retry = retry || !added[tp]
		}
		p.mu.Lock()
		step, herr = p.txn.HandleAddPartitions(d, results, resent)
		p.mu.Unlock()
	case *EndTxnRequest:
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = r.TransactionalID
		req.ProducerID, req.ProducerEpoch = r.Producer.ID, r.Producer.Epoch
		req.Commit = r.Commit
		mark := p.endTxnAttempts.mark()
		resp, err := req.RequestWith(ctx, p.cl)
		lost, retried := p.endTxnAttempts.since(mark, err)
		res := EndTxnResult{Producer: NoProducerID, Resent: lost, RetriedAnswered: retried}
		if code, ok := lookupRefusal(err); ok {
			res.Code, res.Lookup = code, true
		} else if err != nil {
			res.Delivery = p.delivery(err)
		} else {
			res.Code = resp.ErrorCode
			if req.GetVersion() >= 5 && resp.ProducerID >= 0 {
				res.Producer = ProducerID{ID: resp.ProducerID, Epoch: resp.ProducerEpoch}
			}
		}
		retry = res.Delivery != Answered || res.Code != 0
		p.mu.Lock()
		step, herr = p.txn.HandleEndTxn(res)
		p.mu.Unlock()
	default:
		return TxnStep{}, false, fmt.Errorf("producer: unknown transaction request %T", r)
	}
	if herr != nil {
		return TxnStep{}, false, herr
	}
	return step, retry, nil
}
