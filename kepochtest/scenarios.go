package kepochtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Range is a half-open offset range [From, To).
type Range struct{ From, To int64 }

// Len is the number of offsets in the range.
func (r Range) Len() int64 { return r.To - r.From }

// String formats the range as [From,To).
func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.From, r.To) }

// Election is a leader change: who led before and after, in which epochs.
type Election struct {
	Topic                string
	Partition            int32
	OldLeader, NewLeader int32
	OldEpoch, NewEpoch   int32
}

// Truncation is what an UncleanElection did to a partition's log.
type Truncation struct {
	Election
	// LogEnd is the log end before the election; Divergence is the new
	// log end, the first offset the new leader does not hold: records
	// [Divergence, LogEnd) are gone, and the new leader's next record
	// takes offset Divergence. It is where a correct client locates the
	// divergence (the leader's OffsetForLeaderEpoch answer for the epoch
	// of the last surviving record).
	LogEnd, Divergence int64
	// Lost is [Divergence, LogEnd); LostBatches the batches that held it,
	// oldest first.
	Lost        Range
	LostBatches []Batch
}

// UncleanElection makes the partition go through an unclean leader
// election: a broker whose log ends at keep becomes leader in a new leader
// epoch, and every acknowledged record from keep on is gone.
//
// The log is cut the way a replica's log is truncated: at a batch
// boundary, so the batch holding offset keep goes too and the new log end
// (Truncation.Divergence) may be below keep. keep must be below the log
// end (ErrNothingLost otherwise) and the cut at or above the log start
// (ErrBelowLogStart).
//
// How: the cluster is closed (kfake persists its state), the partition's
// persisted log is cut and its producer state rebuilt from what remains
// (as a Kafka leader rebuilds it from its own log), the cluster restarts on
// the same ports, and leadership moves to the next broker with the epoch
// bumped, all before any client can connect. Every broker restarts; other
// partitions keep their logs, leaders and epochs. Clients see dropped
// connections, then the new leader.
//
// A cut between a transaction's records and its marker leaves a hanging
// transaction in real Kafka (the last stable offset held at its first
// record until an operator aborts it). kfake cannot hold one: the kept
// records of an aborted transaction stay aborted, and those of a committed
// one are read as committed.
//
// Until the new epoch holds a record, the harness holds OffsetForLeaderEpoch
// requests about older epochs of this partition (kfake cannot answer them
// before, see the package doc): write to the partition after the election
// so that consumers validating their position get the broker's answer.
func (c *Cluster) UncleanElection(ctx context.Context, topic string, partition int32, keep int64) (Truncation, error) {
	tr, err := c.uncleanElection(ctx, topic, partition, keep)
	return tr, opErr("unclean election", topic, partition, err)
}

func (c *Cluster) uncleanElection(ctx context.Context, topic string, partition int32, keep int64) (Truncation, error) {
	if keep < 0 {
		return Truncation{}, fmt.Errorf("%w: keep %d < 0", ErrInvalidArgument, keep)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Truncation{}, ErrClosed
	}
	before, err := c.partitionState(ctx, topic, partition)
	if err != nil {
		return Truncation{}, err
	}
	switch {
	case keep >= before.LogEnd:
		return Truncation{}, fmt.Errorf("%w: keep %d, log end %d", ErrNothingLost, keep, before.LogEnd)
	case keep < before.LogStart:
		return Truncation{}, fmt.Errorf("%w: keep %d, log start %d", ErrBelowLogStart, keep, before.LogStart)
	}
	tr := Truncation{Election: Election{Topic: topic, Partition: partition, OldLeader: before.Leader, OldEpoch: before.LeaderEpoch}, LogEnd: before.LogEnd}
	err = c.restart(func(dir string) error {
		var err error
		tr.Divergence, tr.LostBatches, err = cutLog(dir, topic, partition, keep)
		return err
	}, func(kc *kfake.Cluster, life <-chan struct{}) error {
		var err error
		tr.NewLeader, tr.NewEpoch, err = c.elect(kc, life, topic, partition, tr.Divergence, before)
		return err
	})
	if err != nil {
		return Truncation{}, err
	}
	tr.Lost = Range{tr.Divergence, tr.LogEnd}
	return tr, c.waitEpoch(ctx, topic, partition, tr.NewEpoch)
}

// CleanElection moves the partition's leadership to the next broker in a
// new leader epoch, losing nothing (a controlled shutdown or a preferred
// leader election). Consumers must validate their position and find that
// nothing diverged.
//
// As after UncleanElection, OffsetForLeaderEpoch requests about older
// epochs of this partition are held until the new epoch holds a record.
func (c *Cluster) CleanElection(ctx context.Context, topic string, partition int32) (Election, error) {
	el, err := c.cleanElection(ctx, topic, partition)
	return el, opErr("clean election", topic, partition, err)
}

func (c *Cluster) cleanElection(ctx context.Context, topic string, partition int32) (Election, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Election{}, ErrClosed
	}
	before, err := c.partitionState(ctx, topic, partition)
	if err != nil {
		return Election{}, err
	}
	el := Election{Topic: topic, Partition: partition, OldLeader: before.Leader, OldEpoch: before.LeaderEpoch}
	if el.NewLeader, el.NewEpoch, err = c.elect(c.kc, c.life, topic, partition, before.LogEnd, before); err != nil {
		return Election{}, err
	}
	return el, c.waitEpoch(ctx, topic, partition, el.NewEpoch)
}

// elect installs the epoch gate and moves leadership to the broker after
// the current leader, bumping the epoch.
func (c *Cluster) elect(kc *kfake.Cluster, life <-chan struct{}, topic string, partition int32, logEnd int64, before PartitionState) (int32, int32, error) {
	newEpoch := before.LeaderEpoch + 1
	c.gateOlderEpochs(kc, life, topic, partition, newEpoch, before.TopicID)
	next := (before.Leader + 1) % int32(c.cfg.brokers)
	if err := kc.MoveTopicPartition(topic, partition, next); err != nil {
		return 0, 0, err
	}
	return next, newEpoch, nil
}

// waitEpoch polls metadata until the partition's leader epoch is at least
// epoch (the harness's clients then agree with the brokers).
func (c *Cluster) waitEpoch(ctx context.Context, topic string, partition, epoch int32) error {
	return c.waitTopic(ctx, topic, func(s TopicState) bool {
		return int(partition) < len(s.Partitions) && s.Partitions[partition].LeaderEpoch >= epoch
	})
}

// gateOlderEpochs holds OffsetForLeaderEpoch requests that ask about an
// epoch below newEpoch of the partition until the log holds a batch of
// epoch newEpoch or later, then lets the broker answer them.
//
// Why: kfake locates the end of an epoch only by finding a batch of a
// later epoch, so until the new leader has written it answers -1/-1 (a
// Kafka broker answers from its leader epoch cache at once). Holding the
// request until then gives the client the broker's own, correct, answer.
// The request stays on the broker; nothing is answered for it.
func (c *Cluster) gateOlderEpochs(kc *kfake.Cluster, life <-chan struct{}, topic string, partition, newEpoch int32, id TopicID) {
	c.installGate(kc, life, &gate{topic: topic, partition: partition, epoch: newEpoch, id: id, written: newLatch()})
}

// gate is one election's hold on OffsetForLeaderEpoch requests.
type gate struct {
	topic            string
	partition, epoch int32
	id               TopicID
	// written is closed once a batch of epoch exists. Each held request
	// polls in a goroutine of its own, and the first to see the batch
	// closes it.
	written *latch
}

// installGate installs g on kc (a new one, or one a restart carries over).
// All of kc's gates share one control, which holds a request for every gate
// it falls under in a single sleep: kfake's sleep queue races when one
// request sleeps twice (two controls each holding it).
func (c *Cluster) installGate(kc *kfake.Cluster, life <-chan struct{}, g *gate) {
	c.gateMu.Lock()
	if c.gates == nil {
		c.gates = map[string][]*gate{}
	}
	c.gates[g.topic] = append(c.gates[g.topic], g)
	first := c.gateKC != kc
	c.gateKC = kc
	c.gateMu.Unlock()
	if !first {
		return
	}
	kc.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		holding := c.gatesHolding(kr.(*kmsg.OffsetForLeaderEpochRequest))
		if len(holding) > 0 {
			kc.SleepControl(func() {
				for _, g := range holding {
					c.awaitEpochWritten(life, g.topic, g.partition, g.epoch, g.id, g.written)
				}
			})
		}
		return nil, nil, false
	})
}

// gatesHolding returns the open gates that hold req: it asks about an epoch
// of their partition below their new epoch.
func (c *Cluster) gatesHolding(req *kmsg.OffsetForLeaderEpochRequest) []*gate {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	var out []*gate
	for _, rt := range req.Topics {
		for _, g := range c.gates[rt.Topic] {
			if g.written.done() {
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == g.partition && rp.LeaderEpoch < g.epoch {
					out = append(out, g)
					break
				}
			}
		}
	}
	return out
}

// awaitEpochWritten polls the partition's last batch (with the probe
// client, never held behind a held request) until its leader epoch is at
// least epoch, then closes written; it returns early when another closed
// written or the cluster incarnation ends.
func (c *Cluster) awaitEpochWritten(life <-chan struct{}, topic string, partition, epoch int32, id TopicID, written *latch) {
	for {
		select {
		case <-written.c:
			return
		case <-life:
			return
		default:
		}
		if c.lastBatchEpoch(life, topic, partition, id) >= epoch {
			written.close()
			return
		}
		select {
		case <-life:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// lastBatchEpoch returns the leader epoch of the partition's last batch, or
// -1 if it cannot tell.
func (c *Cluster) lastBatchEpoch(life <-chan struct{}, topic string, partition int32, id TopicID) int32 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go func() { // the request must not outlive the cluster incarnation
		select {
		case <-life:
			cancel()
		case <-ctx.Done():
		}
	}()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.probe)
	if err != nil || len(resp.Topics) != 1 {
		return -1
	}
	// Found by number: a metadata answer lists partitions in no promised
	// order.
	at := slices.IndexFunc(resp.Topics[0].Partitions, func(mp kmsg.MetadataResponseTopicPartition) bool { return mp.Partition == partition })
	if at < 0 {
		return -1
	}
	s := PartitionState{Topic: topic, Partition: partition, TopicID: id, Leader: resp.Topics[0].Partitions[at].Leader}
	end, err := listOffset(ctx, c.probe.Broker(int(s.Leader)), topic, partition, -1, -1)
	if err != nil {
		return -1
	}
	if end <= 0 {
		return -1
	}
	batches, err := fetchWith(ctx, c.probe, s, end-1, 1<<20)
	if err != nil || len(batches) == 0 {
		return -1
	}
	return batches[len(batches)-1].PartitionLeaderEpoch
}

// DeleteRecords deletes the partition's records below offset, as retention
// or an administrator's DeleteRecords does: the log start offset moves to
// offset, and a consumer positioned below it finds its next records gone.
// It returns the new log start offset.
func (c *Cluster) DeleteRecords(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	if offset < 0 {
		return 0, opErr("delete records", topic, partition, fmt.Errorf("%w: offset %d < 0", ErrInvalidArgument, offset))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	if _, err := c.partitionState(ctx, topic, partition); err != nil {
		return 0, opErr("delete records", topic, partition, err) // ErrUnknownPartition as elsewhere
	}
	if err := c.kc.DeleteRecords(topic, partition, offset); err != nil {
		return 0, opErr("delete records", topic, partition, err)
	}
	s, err := c.partitionState(ctx, topic, partition)
	return s.LogStart, opErr("delete records", topic, partition, err)
}

// Recreation is what RecreateTopic did.
type Recreation struct {
	Topic        string
	OldID, NewID TopicID
}

// RecreateTopic deletes the topic and creates it again under the same name
// with the given number of partitions: a new topic ID, empty logs, leader
// epochs starting over. It returns once the brokers' metadata shows the new
// topic.
func (c *Cluster) RecreateTopic(ctx context.Context, topic string, partitions int32) (Recreation, error) {
	r, err := c.recreateTopic(ctx, topic, partitions)
	return r, opErr("recreate topic", topic, -1, err)
}

func (c *Cluster) recreateTopic(ctx context.Context, topic string, partitions int32) (Recreation, error) {
	if partitions < 1 {
		return Recreation{}, fmt.Errorf("%w: %d partitions", ErrInvalidArgument, partitions)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Recreation{}, ErrClosed
	}
	before, err := c.topicState(ctx, topic)
	if err != nil {
		return Recreation{}, err
	}
	if err := c.kc.DeleteTopic(topic); err != nil {
		return Recreation{}, err
	}
	// The gates of the deleted topic's elections are about its epochs,
	// not the new topic's: release what they hold and retire them.
	c.gateMu.Lock()
	for _, g := range c.gates[topic] {
		g.written.close()
	}
	delete(c.gates, topic)
	c.gateMu.Unlock()
	if err := c.kc.CreateTopic(topic, partitions, nil); err != nil {
		return Recreation{}, err
	}
	var after TopicState
	err = c.waitTopic(ctx, topic, func(s TopicState) bool {
		after = s
		return s.ID != before.ID && len(s.Partitions) == int(partitions)
	})
	return Recreation{Topic: topic, OldID: before.ID, NewID: after.ID}, err
}

// LoseProducerState makes the partition's leader forget every producer's
// sequence state for the partition, as when producer state expires
// (producer.id.expiration.ms) or a leader rebuilds it from a log that no
// longer holds the producers' batches. The log and the leader epoch do not
// change; the cluster restarts as for UncleanElection.
//
// What the next Produce gets is the broker's own answer: kfake, like Kafka
// 2.5 and later, accepts the next batch of a producer it has no state for
// whatever its sequence (KIP-360), so the loss shows as the broker no
// longer recognizing a retried batch as a duplicate. kfake answers
// UNKNOWN_PRODUCER_ID only when emulating brokers before 2.5, which the
// harness does not offer.
func (c *Cluster) LoseProducerState(ctx context.Context, topic string, partition int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if _, err := c.partitionState(ctx, topic, partition); err != nil {
		return opErr("lose producer state", topic, partition, err)
	}
	err := c.restart(func(dir string) error {
		return rebuildProducerState(dir, topic, partition, nil)
	}, nil)
	return opErr("lose producer state", topic, partition, err)
}

// latch is a channel that any of several goroutines may close, and only
// the first does.
type latch struct {
	c    chan struct{}
	once sync.Once
}

func newLatch() *latch { return &latch{c: make(chan struct{})} }

func (l *latch) close() { l.once.Do(func() { close(l.c) }) }

func (l *latch) done() bool {
	select {
	case <-l.c:
		return true
	default:
		return false
	}
}
