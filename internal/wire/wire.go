// Package wire sends raw single-partition requests to one broker, through
// a franz-go client used as transport: the broker's own answers that the
// integration tests, the kepochtest harness and the ops CLI read directly,
// and the log start the producer's ack ledger asks for.
// Each returns the partition's answer as the broker gave it, error code
// included (its meaning is the caller's), or the error that kept it from
// arriving whole.
package wire

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffset asks ListOffsets, as a consumer, for the offset of partition at
// timestamp ts (-2: the log start, -1: the log end), fenced by
// currentLeaderEpoch (-1: not fenced).
func ListOffset(ctx context.Context, br kmsg.Requestor, topic string, partition, currentLeaderEpoch int32, ts int64) (kmsg.ListOffsetsResponseTopicPartition, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.CurrentLeaderEpoch = currentLeaderEpoch
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, br)
	if err != nil {
		return kmsg.ListOffsetsResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ListOffsetsResponseTopicPartition{}, malformed("ListOffsets", topic, partition)
	}
	return resp.Topics[0].Partitions[0], nil
}

// OffsetForLeaderEpoch asks, as a consumer, where epoch ends in the
// partition's log, fenced by currentLeaderEpoch (-1: not fenced).
func OffsetForLeaderEpoch(ctx context.Context, br kmsg.Requestor, topic string, partition, currentLeaderEpoch, epoch int32) (kmsg.OffsetForLeaderEpochResponseTopicPartition, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition = partition
	rp.CurrentLeaderEpoch = currentLeaderEpoch
	rp.LeaderEpoch = epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, br)
	if err != nil {
		return kmsg.OffsetForLeaderEpochResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.OffsetForLeaderEpochResponseTopicPartition{}, malformed("OffsetForLeaderEpoch", topic, partition)
	}
	return resp.Topics[0].Partitions[0], nil
}

// Produce sends records, encoded record batches, to partition with
// acks=all, the broker waiting up to timeout for the replicas. topicID is
// the topic's ID (Produce v13+ names topics by ID).
func Produce(ctx context.Context, br *kgo.Broker, topic string, topicID [16]byte, partition int32, records []byte, timeout time.Duration) (kmsg.ProduceResponseTopicPartition, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(timeout / time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, br)
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.ProduceResponseTopicPartition{}, malformed("Produce", topic, partition)
	}
	return resp.Topics[0].Partitions[0], nil
}

func malformed(api, topic string, partition int32) error {
	return fmt.Errorf("%s %s/%d: the answer does not hold the partition", api, topic, partition)
}
