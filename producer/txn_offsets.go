package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupMetadata identifies the consumer group member whose consumed
// offsets a transaction commits. With a generation and member ID the group
// coordinator fences commits from a member that was rebalanced away
// (KIP-447); GenerationID -1 and an empty MemberID skip that check.
type GroupMetadata struct {
	GroupID      string
	GenerationID int32
	MemberID     string
	InstanceID   *string
}

// OffsetAndEpoch is a consumed position to commit: the next offset to read
// and the leader epoch of the last record read (KIP-320), so that a consumer
// restarting from it can validate it against the log.
type OffsetAndEpoch struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// SendOffsetsToTransaction commits consumed offsets as part of the open
// transaction, for exactly-once consume-transform-produce: they become
// visible to the group exactly when the transaction commits, and vanish if
// it aborts. Each offset carries its leader epoch. An error leaves the
// transaction abortable (errors matching ErrAbortRequired) or the producer
// fatal (fenced); TxnState.HandleOffsets lists which answer does what.
// After Close, or interrupted by it, it returns an error wrapping the
// producer's stop error: errors.ErrClosed, or one matching it that says
// the refresher shared with WithMetadata was closed under the producer
// (which stops it as Close does). While
// CommitTransaction runs it is refused with an error matching ErrTxnState,
// as Produce is (and as Java refuses it once a commit began).
// An empty group ID, or an offset with an empty topic or a negative
// partition or offset, is refused with an error matching
// errors.ErrInvalidArgument that names it; nothing is sent.
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, g GroupMetadata, offsets map[string]map[int32]OffsetAndEpoch) error {
	if ctx == nil {
		return nilContext("SendOffsetsToTransaction")
	}
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	if g.GroupID == "" {
		return invalidArgument("SendOffsetsToTransaction", "g.GroupID", `"" is empty`)
	}
	for topic, ps := range offsets {
		if topic == "" {
			return invalidArgument("SendOffsetsToTransaction", "offsets", `topic "" is empty`)
		}
		for part, o := range ps {
			switch {
			case part < 0:
				return invalidArgument("SendOffsetsToTransaction", "offsets", fmt.Sprintf("%s: partition %d is negative", topic, part))
			case o.Offset < 0:
				return invalidArgument("SendOffsetsToTransaction", "offsets", fmt.Sprintf("%s[%d]: offset %d is negative", topic, part, o.Offset))
			}
		}
	}
	p.mu.Lock()
	if p.closed {
		// Its requests would fail on the closed transport, and the
		// failure would be reported as the transaction's (abortable).
		err := p.offsetsClosedErrLocked()
		p.mu.Unlock()
		return err
	}
	if p.committing > 0 {
		// As Produce: the commit under way flushed the transaction it
		// reports; offsets staged meanwhile would join it by timing.
		p.mu.Unlock()
		return fmt.Errorf("producer: committing offsets: %w: CommitTransaction is under way", ErrTxnState)
	}
	if st := p.txn.State(); st != TxnInTransaction {
		err := p.txn.stateErr() // ErrAbortRequired, ErrProducerFatal or ErrTxnState
		p.mu.Unlock()
		return fmt.Errorf("producer: committing offsets: %w", err)
	}
	id := p.seq.Producer()
	// Commit and Abort wait until this call is done: EndTxn must follow the
	// TxnOffsetCommit's answer (as Java orders them).
	if p.offsetsBusy == 0 {
		p.offsetsIdle = make(chan struct{})
	}
	p.offsetsBusy++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.offsetsBusy--; p.offsetsBusy == 0 {
			close(p.offsetsIdle)
		}
		p.mu.Unlock()
	}()
	// Close interrupts the call: the TxnState learns how its request
	// ended, and the call returns ErrClosed (offsetsErr).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.closing, cancel)()

	// 1. AddOffsetsToTxn: the transaction coordinator learns the group.
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID = p.cfg.transactionalID
	add.ProducerID, add.ProducerEpoch = id.ID, id.Epoch
	add.Group = g.GroupID
	if err := p.offsetsRequest(ctx, OffsetsAdd, func(ctx context.Context) ([]int16, error) {
		resp, err := add.RequestWith(ctx, p.cl)
		if err != nil {
			return nil, err
		}
		return []int16{resp.ErrorCode}, nil
	}); err != nil {
		return err
	}

	// 2. TxnOffsetCommit: the group coordinator stages the offsets.
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID = p.cfg.transactionalID
	commit.Group = g.GroupID
	commit.ProducerID, commit.ProducerEpoch = id.ID, id.Epoch
	commit.Generation, commit.MemberID, commit.InstanceID = g.GenerationID, g.MemberID, g.InstanceID
	if commit.MemberID == "" {
		commit.Generation = -1
	}
	for topic, ps := range offsets {
		_, topicID, err := p.topic(ctx, topic, 1) // TxnOffsetCommit v6+ names topics by ID
		if err != nil {
			return p.offsetsErr(p.offsetsFailed(OffsetsResult{Request: OffsetsCommit, Delivery: NotSent, Err: err}))
		}
		t := kmsg.NewTxnOffsetCommitRequestTopic()
		t.Topic, t.TopicID = topic, topicID
		for part, o := range ps {
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tp.Partition, tp.Offset, tp.LeaderEpoch = part, o.Offset, o.LeaderEpoch
			tp.Metadata = kmsg.StringPtr(o.Metadata)
			t.Partitions = append(t.Partitions, tp)
		}
		commit.Topics = append(commit.Topics, t)
	}
	return p.offsetsRequest(ctx, OffsetsCommit, func(ctx context.Context) ([]int16, error) {
		resp, err := commit.RequestWith(ctx, p.cl)
		if err != nil {
			return nil, err
		}
		var codes []int16
		for _, t := range resp.Topics {
			for _, pp := range t.Partitions {
				codes = append(codes, pp.ErrorCode)
			}
		}
		return codes, nil
	})
}

// offsetsRequest sends an offsets request until the TxnState no longer
// wants it sent again (each attempt bounded by the request timeout, the
// whole by ctx), and returns the call's error, nil once it succeeded.
func (p *Producer) offsetsRequest(ctx context.Context, kind OffsetsRequestKind, send func(context.Context) ([]int16, error)) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.requestTO)
		mark := p.offsetsAttempts.mark()
		codes, err := send(rctx)
		cancel()
		// The transport resends by itself a request whose connection was
		// lost after the write, or that was answered with a code it
		// retries: the write hook counts those.
		lost, retried := p.offsetsAttempts.since(mark, err)
		resent := lost || retried
		lookup := false
		if code, ok := lookupRefusal(err); ok {
			// The coordinator's lookup refused: as final as its answer,
			// but no coordinator's answer (the request was not sent).
			codes, err, lookup = []int16{code}, nil, true
		}
		res := OffsetsResult{Request: kind, Codes: codes, Err: err, Resent: resent, Lookup: lookup}
		if err != nil {
			res.Delivery = p.delivery(err)
		}
		p.mu.Lock()
		step := p.txn.HandleOffsets(res)
		p.txnStepLocked(step.Txn)
		p.mu.Unlock()
		if !step.Retry {
			if step.Err != nil {
				return p.offsetsErr(fmt.Errorf("producer: committing offsets: %w", step.Err))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			// The last attempt was answered (and refused): nothing of it
			// was applied.
			return p.offsetsErr(p.offsetsFailed(OffsetsResult{Request: kind, Delivery: NotSent, Err: ctx.Err()}))
		case <-time.After(p.cfg.retryBackoff):
		}
	}
}

// offsetsClosedErrLocked is SendOffsetsToTransaction's error once the
// producer stopped: the stop's own (ErrClosed, or one matching it that
// says a shared refresher was closed under the producer). p.mu is held.
func (p *Producer) offsetsClosedErrLocked() error {
	return fmt.Errorf("producer: committing offsets: %w", p.closeErr)
}

// offsetsErr is err, the failure of a SendOffsetsToTransaction call, unless
// the producer began to stop (Close, or its shared refresher closed): the
// call then returns the stop's error (its request failed because the stop
// interrupted it; the TxnState has judged how it ended).
func (p *Producer) offsetsErr(err error) error {
	if p.closing.Err() != nil {
		// closing ends under p.mu, once closeErr is set.
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.offsetsClosedErrLocked()
	}
	return err
}

// offsetsFailed ends a SendOffsetsToTransaction call that failed before
// its request could be sent (again): the transaction is abortable.
func (p *Producer) offsetsFailed(res OffsetsResult) error {
	p.mu.Lock()
	step := p.txn.HandleOffsets(res)
	p.txnStepLocked(step.Txn)
	p.mu.Unlock()
	return fmt.Errorf("producer: committing offsets: %w", step.Err)
}
