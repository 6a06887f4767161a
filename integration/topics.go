package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/wire"
)

var topicSeq atomic.Int64

// TopicName returns a fresh topic name for a scenario: every scenario writes
// to topics of its own so that nothing depends on earlier runs.
func TopicName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixMilli()%1_000_000_000, topicSeq.Add(1))
}

// CreateTopic creates topic with one partition per entry of assignment, each
// entry listing the partition's replicas with the preferred leader first, and
// the given topic configs. It waits until every partition has a leader and
// returns the topic ID.
func (c *Cluster) CreateTopic(ctx context.Context, topic string, assignment [][]int32, configs map[string]string) ([16]byte, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = -1
	t.ReplicationFactor = -1
	for p, replicas := range assignment {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition = int32(p)
		a.Replicas = slices.Clone(replicas)
		t.ReplicaAssignment = append(t.ReplicaAssignment, a)
	}
	for k, v := range configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name = k
		cfg.Value = kmsg.StringPtr(v)
		t.Configs = append(t.Configs, cfg)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return [16]byte{}, fmt.Errorf("create topic %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return [16]byte{}, fmt.Errorf("create topic %s: %d topics in the answer", topic, len(resp.Topics))
	}
	id := resp.Topics[0].TopicID
	if err := errCode(resp.Topics[0].ErrorCode); errors.Is(err, kerr.TopicAlreadyExists) {
		// A retry of a create whose first answer was lost: the names are
		// fresh per test, so the topic is ours.
		st, derr := c.Describe(ctx, topic, 0)
		if derr != nil {
			return [16]byte{}, fmt.Errorf("create topic %s: %w", topic, derr)
		}
		id = st.TopicID
	} else if err != nil {
		return [16]byte{}, fmt.Errorf("create topic %s: %w (%s)", topic, err, deref(resp.Topics[0].ErrorMessage))
	}
	// Every broker learns the topic from the controller's metadata log on
	// its own time; a request to a broker that has not yet would fail with
	// UNKNOWN_TOPIC_ID. Wait until each live broker knows it.
	for _, b := range Brokers {
		if err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
			mreq := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			mreq.Topics = append(mreq.Topics, mt)
			mresp, err := mreq.RequestWith(ctx, c.Broker(b))
			if err != nil {
				return true, nil //nolint:nilerr // a broker that is down is not waited for
			}
			for _, t := range mresp.Topics {
				if deref(t.Topic) == topic && t.ErrorCode == 0 && len(t.Partitions) == len(assignment) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return id, fmt.Errorf("create topic %s: broker %d never learned it: %w", topic, b, err)
		}
	}
	for p, replicas := range assignment {
		want := replicas[0]
		if _, err := c.WaitPartition(ctx, topic, int32(p), func(s PartitionState) bool {
			return s.Leader == want && len(s.ISR) == len(replicas)
		}); err != nil {
			return id, fmt.Errorf("create topic %s: partition %d never got leader %d with a full ISR: %w", topic, p, want, err)
		}
	}
	return id, nil
}

// PartitionState is one partition as the cluster reports it.
type PartitionState struct {
	Topic       string
	TopicID     [16]byte
	Partition   int32
	Leader      int32 // -1 when leaderless
	LeaderEpoch int32
	Replicas    []int32
	ISR         []int32
	Offline     []int32
}

func (s PartitionState) String() string {
	return fmt.Sprintf("%s/%d leader=%d epoch=%d replicas=%v isr=%v offline=%v",
		s.Topic, s.Partition, s.Leader, s.LeaderEpoch, s.Replicas, s.ISR, s.Offline)
}

// Describe reads the partition's leader, leader epoch, replicas and ISR from
// a Metadata request.
func (c *Cluster) Describe(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return PartitionState{}, err
	}
	for _, t := range resp.Topics {
		if deref(t.Topic) != topic {
			continue
		}
		if err := errCode(t.ErrorCode); err != nil {
			return PartitionState{}, fmt.Errorf("metadata for %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			if p.Partition != partition {
				continue
			}
			return PartitionState{
				Topic: topic, TopicID: t.TopicID, Partition: partition,
				Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, Offline: p.OfflineReplicas,
			}, nil
		}
	}
	return PartitionState{}, fmt.Errorf("metadata for %s/%d: %w", topic, partition, kerr.UnknownTopicOrPartition)
}

// WaitPartition polls Describe until cond holds.
func (c *Cluster) WaitPartition(ctx context.Context, topic string, partition int32, cond func(PartitionState) bool) (PartitionState, error) {
	var last PartitionState
	var lastErr error
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		s, err := c.Describe(ctx, topic, partition)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, lastErr = s, nil
		return cond(s), nil
	})
	if err != nil {
		if lastErr != nil {
			return last, fmt.Errorf("%w (last error: %v)", err, lastErr)
		}
		return last, fmt.Errorf("%w (last state: %v)", err, last)
	}
	return last, nil
}

// Offsets are a replica's view of a partition's log.
type Offsets struct {
	LogStart  int64 // first offset kept
	LogEnd    int64 // log end offset (next offset to be written)
	HighWater int64 // only meaningful on the leader
}

// ReplicaOffsets asks broker for its own replica's log start and log end
// offsets, and (when broker is the leader) the high watermark. It uses
// ListOffsets with the debugging replica id (-2), which the broker answers
// from any replica with the log end offset, and the consumer replica id (-1)
// for the high watermark.
func (c *Cluster) ReplicaOffsets(ctx context.Context, broker int32, topic string, partition int32) (Offsets, error) {
	var o Offsets
	ask := func(replica int32, ts int64) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = replica
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = partition
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.Reader(broker))
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("list offsets %s/%d on %d: malformed answer", topic, partition, broker)
		}
		p := resp.Topics[0].Partitions[0]
		if err := errCode(p.ErrorCode); err != nil {
			return 0, fmt.Errorf("list offsets %s/%d on broker %d (replica id %d): %w", topic, partition, broker, replica, err)
		}
		return p.Offset, nil
	}
	var err error
	if o.LogStart, err = ask(-2, -2); err != nil {
		return o, err
	}
	if o.LogEnd, err = ask(-2, -1); err != nil {
		return o, err
	}
	o.HighWater, err = ask(-1, -1)
	if err != nil {
		o.HighWater = -1
	}
	return o, nil
}

// EpochEnd is an OffsetForLeaderEpoch answer for one partition.
type EpochEnd struct {
	LeaderEpoch int32
	EndOffset   int64
}

// OffsetForLeaderEpoch sends a raw OffsetForLeaderEpoch for (topic,
// partition, epoch) to broker, unfenced (CurrentLeaderEpoch -1), as a
// consumer (replica id -1). This is the broker's own answer that truncation
// tests compare a client's report with.
func (c *Cluster) OffsetForLeaderEpoch(ctx context.Context, broker int32, topic string, partition, epoch int32) (EpochEnd, error) {
	p, err := wire.OffsetForLeaderEpoch(ctx, c.Reader(broker), topic, partition, -1, epoch)
	if err != nil {
		return EpochEnd{}, err
	}
	if err := errCode(p.ErrorCode); err != nil {
		return EpochEnd{}, fmt.Errorf("offset for leader epoch %s/%d epoch %d on broker %d: %w", topic, partition, epoch, broker, err)
	}
	return EpochEnd{LeaderEpoch: p.LeaderEpoch, EndOffset: p.EndOffset}, nil
}

// ElectUnclean runs ElectLeaders with the UNCLEAN election type for one
// partition: the controller makes the first live replica leader even if it
// is not in the ISR, which truncates what only the old leader had.
func (c *Cluster) ElectUnclean(ctx context.Context, topic string, partition int32) error {
	return c.elect(ctx, 1, topic, partition)
}

// ElectPreferred runs a preferred-replica (clean) election for one partition.
func (c *Cluster) ElectPreferred(ctx context.Context, topic string, partition int32) error {
	return c.elect(ctx, 0, topic, partition)
}

// MoveLeader makes the partition's second replica its leader without
// stopping a broker: it reorders the replicas (a reassignment to the same
// set, which moves no data) and runs a preferred election, so the leader
// epoch goes up by one. It returns the new state. A test that must tell a
// leader epoch from an unset one (0 in many wire fields) moves the leader
// before writing.
func (c *Cluster) MoveLeader(ctx context.Context, topic string, partition int32) (PartitionState, error) {
	st, err := c.Describe(ctx, topic, partition)
	if err != nil {
		return st, err
	}
	if len(st.Replicas) < 2 || len(st.ISR) != len(st.Replicas) {
		return st, fmt.Errorf("move leader of %v: needs two or more replicas, all in sync", st)
	}
	order := append(append([]int32{}, st.Replicas[1:]...), st.Replicas[0])
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
	rp.Partition, rp.Replicas = partition, order
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return st, fmt.Errorf("reassign %s/%d: %w", topic, partition, err)
	}
	if err := errCode(resp.ErrorCode); err != nil {
		return st, fmt.Errorf("reassign %s/%d: %w (%s)", topic, partition, err, deref(resp.ErrorMessage))
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := errCode(p.ErrorCode); err != nil {
				return st, fmt.Errorf("reassign %s/%d: %w (%s)", topic, partition, err, deref(p.ErrorMessage))
			}
		}
	}
	if _, err := c.WaitPartition(ctx, topic, partition, func(s PartitionState) bool { return slices.Equal(s.Replicas, order) }); err != nil {
		return st, fmt.Errorf("reassign %s/%d to %v: %w", topic, partition, order, err)
	}
	if err := c.ElectPreferred(ctx, topic, partition); err != nil {
		return st, err
	}
	return c.WaitPartition(ctx, topic, partition, func(s PartitionState) bool {
		return s.Leader == order[0] && s.LeaderEpoch > st.LeaderEpoch
	})
}

func (c *Cluster) elect(ctx context.Context, how int8, topic string, partition int32) error {
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = how
	req.TimeoutMillis = 30_000
	rt := kmsg.NewElectLeadersRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{partition}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return fmt.Errorf("elect leaders %s/%d: %w", topic, partition, err)
	}
	if err := errCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("elect leaders %s/%d: %w", topic, partition, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := errCode(p.ErrorCode); err != nil {
				return fmt.Errorf("elect leaders %s/%d: %w (%s)", topic, partition, err, deref(p.ErrorMessage))
			}
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DeleteTopic deletes topic (benchmarks delete what they wrote: a run can
// leave gigabytes per broker).
func (c *Cluster) DeleteTopic(ctx context.Context, topic string) error {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	for _, r := range resp.Topics {
		if err := errCode(r.ErrorCode); err != nil {
			return fmt.Errorf("delete topic %s: %w", topic, err)
		}
	}
	return nil
}

// RecreateTopic deletes topic, waits until metadata no longer has it, and
// creates it again with assignment (and no configs): a new incarnation
// under the same name. It returns the new topic ID.
func (c *Cluster) RecreateTopic(ctx context.Context, topic string, assignment [][]int32) ([16]byte, error) {
	if err := c.DeleteTopic(ctx, topic); err != nil {
		return [16]byte{}, err
	}
	if err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		_, err := c.Describe(ctx, topic, 0)
		return errors.Is(err, kerr.UnknownTopicOrPartition), nil
	}); err != nil {
		return [16]byte{}, fmt.Errorf("topic %s never went away: %w", topic, err)
	}
	return c.CreateTopic(ctx, topic, assignment, nil)
}
