package kepochtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/wire"
)

// TopicID is a topic's 16-byte ID; it changes when a topic is deleted and
// created again.
type TopicID [16]byte

// TopicState is a topic as the brokers' metadata shows it.
type TopicState struct {
	Topic string
	ID    TopicID
	// Partitions is indexed by partition: Partitions[i].Partition == i
	// (a metadata answer lists them in no promised order).
	Partitions []PartitionState
}

// PartitionState is one partition as its leader reports it.
type PartitionState struct {
	Topic     string
	Partition int32
	TopicID   TopicID
	// Leader is the leader's node ID; LeaderEpoch its leader epoch.
	Leader      int32
	LeaderEpoch int32
	// LogStart is the first offset still in the log; LogEnd the offset
	// the next record gets (the high watermark: kfake has no lagging
	// replicas).
	LogStart, LogEnd int64
}

// EpochEnd is a leader's OffsetForLeaderEpoch answer: the largest epoch
// at most the one asked that the log holds, and the offset where it ends
// (the first offset of the next epoch, or the log end). Both are -1 when
// the leader cannot locate the epoch.
type EpochEnd struct {
	LeaderEpoch int32
	EndOffset   int64
}

// Record is a record as the broker holds it.
type Record struct {
	Offset      int64
	LeaderEpoch int32 // the partition leader epoch of the batch that holds it
	Key, Value  []byte
	// ProducerID, ProducerEpoch and Sequence are the writer's idempotent
	// identity and the record's sequence (-1 when not idempotent).
	ProducerID    int64
	ProducerEpoch int16
	Sequence      int32
}

// retry runs fn until it succeeds, returns a non-retriable error, or ctx
// ends; the harness's requests span restarts and leader moves.
func (c *Cluster) retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !retriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-c.closing:
			return ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// listOffset asks leader ListOffsets for the partition at timestamp ts
// (-2: the log start, -1: the log end), with the leader epoch the caller
// knows (-1: none).
func listOffset(ctx context.Context, leader *kgo.Broker, topic string, partition, leaderEpoch int32, ts int64) (int64, error) {
	p, err := wire.ListOffset(ctx, leader, topic, partition, leaderEpoch, ts)
	if err != nil {
		return 0, err
	}
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// atLeader runs do with the partition's current leader, again (the leader
// looked up anew) while it fails with a retriable error.
func (c *Cluster) atLeader(ctx context.Context, topic string, partition int32, do func(s PartitionState, leader *kgo.Broker) error) error {
	return c.retry(ctx, func() error {
		s, err := c.partitionState(ctx, topic, partition)
		if err != nil {
			return err
		}
		return do(s, c.admin.Broker(int(s.Leader)))
	})
}

// retriable: a Kafka error marked retriable, or a transport error (the
// cluster restarting); never a missing topic or an ended context.
func retriable(err error) bool {
	if errors.Is(err, ErrUnknownPartition) || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return true
}

// Topic returns the topic's metadata: its ID and each partition's leader
// and epoch (LogStart and LogEnd are not filled in; see Partition).
func (c *Cluster) Topic(ctx context.Context, topic string) (TopicState, error) {
	s, err := c.topicState(ctx, topic)
	return s, opErr("metadata", topic, -1, err)
}

func (c *Cluster) topicState(ctx context.Context, topic string) (TopicState, error) {
	var s TopicState
	err := c.retry(ctx, func() error {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.admin)
		if err != nil {
			return err
		}
		if len(resp.Topics) != 1 {
			return fmt.Errorf("metadata answered %d topics", len(resp.Topics))
		}
		mt := resp.Topics[0]
		if mt.ErrorCode == kerr.UnknownTopicOrPartition.Code {
			return fmt.Errorf("%w: no topic %q", ErrUnknownPartition, topic)
		}
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			return err
		}
		s = TopicState{Topic: topic, ID: mt.TopicID}
		for _, mp := range mt.Partitions {
			if err := kerr.ErrorForCode(mp.ErrorCode); err != nil {
				return err
			}
			s.Partitions = append(s.Partitions, PartitionState{
				Topic: topic, Partition: mp.Partition, TopicID: mt.TopicID,
				Leader: mp.Leader, LeaderEpoch: mp.LeaderEpoch, LogStart: -1, LogEnd: -1,
			})
		}
		slices.SortFunc(s.Partitions, func(a, b PartitionState) int { return cmp.Compare(a.Partition, b.Partition) })
		for i, p := range s.Partitions {
			if p.Partition != int32(i) {
				return fmt.Errorf("metadata of %q lists partition %d at index %d: partitions are missing", topic, p.Partition, i)
			}
		}
		return nil
	})
	return s, err
}

// waitTopic polls metadata until ok holds or ctx ends.
func (c *Cluster) waitTopic(ctx context.Context, topic string, ok func(TopicState) bool) error {
	for {
		s, err := c.topicState(ctx, topic)
		if err == nil && ok(s) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("metadata of %q not yet as expected: %+v", topic, s)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-c.closing:
			return ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Partition returns the partition's leader, leader epoch, topic ID, log
// start and log end, as the leader answers them.
func (c *Cluster) Partition(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	s, err := c.partitionState(ctx, topic, partition)
	return s, opErr("partition state", topic, partition, err)
}

func (c *Cluster) partitionState(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	var s PartitionState
	err := c.retry(ctx, func() error {
		ts, err := c.topicState(ctx, topic)
		if err != nil {
			return err
		}
		if partition < 0 || int(partition) >= len(ts.Partitions) {
			return fmt.Errorf("%w: partition %d of %d", ErrUnknownPartition, partition, len(ts.Partitions))
		}
		s = ts.Partitions[partition]
		if s.LogStart, err = listOffset(ctx, c.admin.Broker(int(s.Leader)), topic, partition, s.LeaderEpoch, -2); err != nil {
			return err
		}
		s.LogEnd, err = listOffset(ctx, c.admin.Broker(int(s.Leader)), topic, partition, s.LeaderEpoch, -1)
		return err
	})
	return s, err
}

// EpochEnd asks the partition's leader OffsetForLeaderEpoch for epoch, as
// a consumer validating a position does (replica -1, current leader epoch
// unset): the broker's own answer, to compare with what a client reports.
//
// After an election the harness holds answers about older epochs until
// the new epoch holds a record (see the package doc), so call it after
// the new leader has been written to.
func (c *Cluster) EpochEnd(ctx context.Context, topic string, partition, epoch int32) (EpochEnd, error) {
	var e EpochEnd
	err := c.atLeader(ctx, topic, partition, func(_ PartitionState, leader *kgo.Broker) error {
		p, err := wire.OffsetForLeaderEpoch(ctx, leader, topic, partition, -1, epoch)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return err
		}
		e = EpochEnd{LeaderEpoch: p.LeaderEpoch, EndOffset: p.EndOffset}
		return nil
	})
	return e, opErr("OffsetForLeaderEpoch", topic, partition, err)
}

// Produce writes values to the partition as one record batch, with an
// idempotent producer identity of its own (a raw InitProducerId, then raw
// Produce requests, acks=all, resent unchanged until answered: the broker
// deduplicates a resend) and returns the offset of each. Every call writes
// exactly one batch, so the batch boundaries an UncleanElection cuts at
// are the calls' boundaries; a call takes at most 10000 values whose batch
// is at most 1 MiB (the values and about ten bytes of framing a record;
// ErrInvalidArgument otherwise), which the broker's default
// max.message.bytes accepts.
func (c *Cluster) Produce(ctx context.Context, topic string, partition int32, values ...string) ([]int64, error) {
	if len(values) == 0 {
		return nil, nil
	}
	size := 0
	for _, v := range values {
		size += len(v)
	}
	if len(values) > 10000 || size > 1<<20 {
		return nil, opErr("produce", topic, partition, fmt.Errorf("%w: %d values, %d bytes: more than one batch holds", ErrInvalidArgument, len(values), size))
	}
	if err := c.alive(); err != nil {
		return nil, err
	}
	base, err := c.produce(ctx, topic, partition, values)
	if err != nil {
		return nil, opErr("produce", topic, partition, err)
	}
	offs := make([]int64, len(values))
	for i := range offs {
		offs[i] = base + int64(i)
	}
	return offs, nil
}

func (c *Cluster) produce(ctx context.Context, topic string, partition int32, values []string) (int64, error) {
	var id, epoch = int64(-1), int16(-1)
	err := c.retry(ctx, func() error {
		resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, c.admin)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		id, epoch = resp.ProducerID, resp.ProducerEpoch
		return nil
	})
	if err != nil {
		return 0, err
	}
	spec := batch.DefaultSpec()
	spec.ProducerID, spec.ProducerEpoch, spec.BaseSequence = id, epoch, 0
	b := batch.NewBuilder(nil)
	b.Reset(spec)
	now := time.Now().UnixMilli()
	for _, v := range values {
		if err := b.Append(now, nil, []byte(v), nil); err != nil {
			return 0, err
		}
	}
	records, err := b.Finish()
	if err != nil {
		return 0, err
	}
	if len(records) > 1<<20 {
		return 0, fmt.Errorf("%w: %d values make a batch of %d bytes, more than 1 MiB", ErrInvalidArgument, len(values), len(records))
	}
	var base int64
	err = c.atLeader(ctx, topic, partition, func(s PartitionState, leader *kgo.Broker) error {
		p, err := wire.Produce(ctx, leader, topic, s.TopicID, partition, records, 10*time.Second)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return err
		}
		base = p.BaseOffset
		return nil
	})
	return base, err
}

// Records reads the partition from its log start to its log end with raw
// Fetch requests to the leader: every record as the broker holds it, with
// the leader epoch of its batch (control records are left out).
func (c *Cluster) Records(ctx context.Context, topic string, partition int32) ([]Record, error) {
	s, err := c.partitionState(ctx, topic, partition)
	if err != nil {
		return nil, opErr("fetch", topic, partition, err)
	}
	var out []Record
	for next := s.LogStart; next < s.LogEnd; {
		var batches []kmsg.RecordBatch
		err := c.retry(ctx, func() error {
			var err error
			batches, err = c.fetch(ctx, s, next, 1<<20)
			return err
		})
		if err != nil {
			return out, opErr("fetch", topic, partition, err)
		}
		if len(batches) == 0 {
			return out, opErr("fetch", topic, partition, fmt.Errorf("no batch at offset %d (log end %d)", next, s.LogEnd))
		}
		for _, b := range batches {
			end := b.FirstOffset + int64(b.LastOffsetDelta) + 1
			if end <= next {
				continue
			}
			if b.Attributes&0x20 == 0 { // not a control batch
				recs, err := kfake.BatchRecords(b)
				if err != nil {
					return out, opErr("fetch", topic, partition, err)
				}
				for _, r := range recs {
					o := b.FirstOffset + int64(r.OffsetDelta)
					if o < next || o >= s.LogEnd {
						continue
					}
					seq := int32(-1)
					if b.ProducerID >= 0 {
						seq = b.FirstSequence + r.OffsetDelta
					}
					out = append(out, Record{
						Offset: o, LeaderEpoch: b.PartitionLeaderEpoch, Key: r.Key, Value: r.Value,
						ProducerID: b.ProducerID, ProducerEpoch: b.ProducerEpoch, Sequence: seq,
					})
				}
			}
			next = end
		}
	}
	return out, nil
}

// Values returns the values of records, in order (a convenience for
// assertions).
func Values(records []Record) []string {
	vs := make([]string, len(records))
	for i, r := range records {
		vs[i] = string(r.Value)
	}
	return vs
}

// fetch sends one Fetch for the partition at offset to the leader named by
// s and returns the whole batches of the answer.
func (c *Cluster) fetch(ctx context.Context, s PartitionState, offset int64, maxBytes int32) ([]kmsg.RecordBatch, error) {
	return fetchWith(ctx, c.admin, s, offset, maxBytes)
}

func fetchWith(ctx context.Context, cl *kgo.Client, s PartitionState, offset int64, maxBytes int32) ([]kmsg.RecordBatch, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1 // no fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = s.Topic
	rt.TopicID = s.TopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = s.Partition
	rp.CurrentLeaderEpoch = -1
	rp.FetchOffset = offset
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(s.Leader)))
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch answered no partition")
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return nil, err
	}
	var out []kmsg.RecordBatch
	for raw := p.RecordBatches; len(raw) >= 12; {
		n := int(int32(uint32(raw[8])<<24|uint32(raw[9])<<16|uint32(raw[10])<<8|uint32(raw[11]))) + 12
		if n < 12 || n > len(raw) {
			break // a partial trailing batch
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw[:n]); err != nil {
			return out, fmt.Errorf("decoding batch: %w", err)
		}
		out = append(out, b)
		raw = raw[n:]
	}
	return out, nil
}

func (c *Cluster) alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}
