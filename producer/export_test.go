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

// HoldLock runs fn with p's lock held: the producer's goroutines (its
// metadata loop among them) wait meanwhile.
func HoldLock(p *Producer, fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn()
}

// AdoptTopicIDLocked does what Produce's topic lookup does to a partition
// it finds under another topic ID than its state names (setTopicIDLocked).
// Under HoldLock.
func AdoptTopicIDLocked(p *Producer, topic string, partition int32, id [16]byte) {
	if ps := p.parts[TopicPartition{topic, partition}]; ps != nil {
		p.setTopicIDLocked(ps, id)
	}
}

// LedgerRangesLocked is p's ack ledger's ranges for the partition. Under
// HoldLock.
func LedgerRangesLocked(p *Producer, topic string, partition int32) []AckedRange {
	return p.ledger.Ranges(TopicPartition{topic, partition})
}

// RecordAckLocked records an acknowledged range in p's ack ledger, as an
// acknowledgement does. Under HoldLock.
func RecordAckLocked(p *Producer, topic string, partition int32, r AckedRange) error {
	return p.recordAckLocked(TopicPartition{topic, partition}, r)
}

// LedgerLeaderEpoch is the highest leader epoch p's ack ledger has seen
// for the partition (-1 none).
func LedgerLeaderEpoch(p *Producer, topic string, partition int32) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lp := p.ledger.parts[TopicPartition{topic, partition}]; lp != nil {
		return lp.leaderEpoch
	}
	return -1
}

// MetadataTopicID is the topic ID p's refresher holds for topic.
func MetadataTopicID(p *Producer, topic string) [16]byte {
	t, _ := p.meta.Topic(topic)
	return t.ID
}

// TopicStateSizes is how many entries p keeps per topic or partition: its
// partition states ("parts"), their index by topic ("byTopic"), its watches
// ("watching"), the topics it is to drop ("gone"), the default
// partitioner's sticky choices ("sticky"), the Sequencer's partitions
// ("sequencer") and the ack ledger's ("ledger").
func TopicStateSizes(p *Producer) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{
		"parts": len(p.parts), "byTopic": len(p.byTopic), "watching": len(p.watching), "gone": len(p.gone),
		"ledger": len(p.ledger.parts),
	}
	n := 0
	p.watched.Range(func(any, any) bool { n++; return true })
	out["watched"] = n
	if sp, ok := p.part.(*stickyKeyPartitioner); ok {
		sp.mu.Lock()
		out["sticky"] = len(sp.sticky)
		sp.mu.Unlock()
	}
	if p.seq != nil {
		out["sequencer"] = len(p.seq.parts)
	}
	return out
}

// Flushing returns how many Flush calls wait (CommitTransaction's among them).
func Flushing(p *Producer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushing
}

// WantTyped is wantTyped, for the external tests.
var WantTyped = wantTyped
