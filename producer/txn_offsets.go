package producer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
// fatal (fenced).
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, g GroupMetadata, offsets map[string]map[int32]OffsetAndEpoch) error {
	if p.txn == nil {
		return fmt.Errorf("producer: %w: not a transactional producer", ErrTxnState)
	}
	if g.GroupID == "" {
		return fmt.Errorf("producer: SendOffsetsToTransaction needs a group ID")
	}
	p.mu.Lock()
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

	// 1. AddOffsetsToTxn: the transaction coordinator learns the group.
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID = p.cfg.transactionalID
	add.ProducerID, add.ProducerEpoch = id.ID, id.Epoch
	add.Group = g.GroupID
	code, err := p.coordinatorRetry(ctx, func(ctx context.Context) (int16, error) {
		resp, err := add.RequestWith(ctx, p.cl)
		if err != nil {
			return 0, err
		}
		return resp.ErrorCode, nil
	})
	p.mu.Lock()
	switch {
	case err != nil:
		p.txn.OffsetsAdded(false)
		p.mu.Unlock()
		return p.txnFailed(err, false)
	case code != 0:
		p.mu.Unlock()
		return p.txnFailed(kerr.ErrorForCode(code), isFencing(code))
	}
	p.txn.OffsetsAdded(true)
	p.mu.Unlock()

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
		_, topicID, err := p.topic(ctx, topic) // TxnOffsetCommit v6+ names topics by ID
		if err != nil {
			return p.txnFailed(err, false)
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
	code, err = p.coordinatorRetry(ctx, func(ctx context.Context) (int16, error) {
		resp, err := commit.RequestWith(ctx, p.cl)
		if err != nil {
			return 0, err
		}
		for _, t := range resp.Topics {
			for _, pp := range t.Partitions {
				if pp.ErrorCode != 0 {
					return pp.ErrorCode, nil
				}
			}
		}
		return 0, nil
	})
	if err != nil {
		return p.txnFailed(err, false)
	}
	if code != 0 {
		return p.txnFailed(kerr.ErrorForCode(code), isFencing(code))
	}
	return nil
}

// coordinatorRetry runs a coordinator request until it answers something
// other than a transient coordinator error (the transport itself retries
// NOT_COORDINATOR and connection errors).
func (p *Producer) coordinatorRetry(ctx context.Context, send func(context.Context) (int16, error)) (int16, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.requestTO)
		code, err := send(rctx)
		cancel()
		if err != nil {
			return 0, err
		}
		switch code {
		case kerr.ConcurrentTransactions.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code,
			kerr.NotCoordinator.Code, kerr.UnknownTopicOrPartition.Code, kerr.RequestTimedOut.Code:
			select {
			case <-ctx.Done():
				return code, ctx.Err()
			case <-time.After(p.cfg.retryBackoff):
			}
			continue
		}
		return code, nil
	}
}

func isFencing(code int16) bool {
	return code == kerr.ProducerFenced.Code || code == kerr.InvalidProducerEpoch.Code ||
		code == kerr.TransactionalIDAuthorizationFailed.Code
}

// txnFailed makes the transaction abortable (or the producer fatal) because
// of a failed offset commit, and returns the error the application sees.
func (p *Producer) txnFailed(cause error, fatal bool) error {
	p.mu.Lock()
	var d Decision
	if fatal {
		d.Fatal = cause
	} else {
		d.Abortable = &AbortableError{Err: cause}
	}
	p.txnStepLocked(p.txn.HandleProduce(d))
	err := p.txn.Err()
	p.mu.Unlock()
	if err == nil {
		err = cause
	}
	if fatal {
		return fmt.Errorf("producer: committing offsets: %w: %w", ErrProducerFatal, err)
	}
	return fmt.Errorf("producer: committing offsets: %w: %w", ErrAbortRequired, err)
}
