package producer

import (
	"context"

	"github.com/kepoch/kepoch/metadata"
)

// TxnWakePending reports whether p's transaction loop has a wake-up
// pending: only while a coordinator request waits to be sent.
func TxnWakePending(p *Producer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.txnWake) > 0
}

// RefreshMetadata asks p's refresher for a round trip and waits for it.
func RefreshMetadata(ctx context.Context, p *Producer) error {
	return p.meta.Refresh(ctx, metadata.ReasonManual)
}

// PartitionTopicID is the topic ID p's partition state names (what its next
// Produce request carries).
func PartitionTopicID(p *Producer, topic string, partition int32) [16]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps := p.parts[TopicPartition{topic, partition}]; ps != nil {
		return ps.topicID
	}
	return [16]byte{}
}

// TxnResendWaiting reports whether p's transaction loop holds a request to
// send again (it is sleeping the retry backoff before sending it).
func TxnResendWaiting(p *Producer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.txnSend != nil
}

// TxnMayHaveStarted reports whether p's TxnState holds that the coordinator
// may know the open transaction (its abort then sends EndTxn).
func TxnMayHaveStarted(p *Producer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.txn.mayHaveStarted()
}

// PartitionLeaderEpoch is the leader epoch p's partition state holds (the
// last metadata event the producer applied for it), -1 if none.
func PartitionLeaderEpoch(p *Producer, topic string, partition int32) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps := p.parts[TopicPartition{topic, partition}]; ps != nil {
		return ps.epoch
	}
	return -1
}
