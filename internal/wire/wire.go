// Package wire sends raw single-partition requests to one broker, through
// a franz-go client used as transport: the broker's own answers that the
// integration tests, the kepochtest harness and the ops CLI read directly,
// and the log start the producer's ack ledger asks for.
// Each returns the partition's answer as the broker gave it, error code
// included (its meaning is the caller's), or the error that kept it from
// arriving whole. An answer that does not hold exactly the partition asked
// for (another topic or partition, an extra or missing entry) is refused
// with an error matching ErrMalformedAnswer: a broker's mistake, never read
// as the asked partition's answer.
package wire

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// ErrMalformedAnswer is matched by the error of an answer that does not
// hold exactly the one partition its request asked about. Callers treat it
// as a failed request (the broker's answer is unusable), not as an answer.
var ErrMalformedAnswer = errors.New("kepoch: malformed answer (not the partition asked for)")

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
	return ListOffsetsAnswer(resp, topic, partition)
}

// ListOffsetsAnswer returns resp's entry for topic/partition, the one
// partition its request asked about; any other shape is malformed.
func ListOffsetsAnswer(resp *kmsg.ListOffsetsResponse, topic string, partition int32) (kmsg.ListOffsetsResponseTopicPartition, error) {
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 ||
		resp.Topics[0].Topic != topic || resp.Topics[0].Partitions[0].Partition != partition {
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
	return OffsetForLeaderEpochAnswer(resp, topic, partition)
}

// OffsetForLeaderEpochAnswer returns resp's entry for topic/partition, the
// one partition its request asked about; any other shape is malformed.
func OffsetForLeaderEpochAnswer(resp *kmsg.OffsetForLeaderEpochResponse, topic string, partition int32) (kmsg.OffsetForLeaderEpochResponseTopicPartition, error) {
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 ||
		resp.Topics[0].Topic != topic || resp.Topics[0].Partitions[0].Partition != partition {
		return kmsg.OffsetForLeaderEpochResponseTopicPartition{}, malformed("OffsetForLeaderEpoch", topic, partition)
	}
	return resp.Topics[0].Partitions[0], nil
}

// Produce sends records, encoded record batches, to partition with
// acks=all, the broker waiting up to timeout for the replicas. topicID is
// the topic's ID (Produce v13+ names topics by ID).
func Produce(ctx context.Context, br kmsg.Requestor, topic string, topicID [16]byte, partition int32, records []byte, timeout time.Duration) (kmsg.ProduceResponseTopicPartition, error) {
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
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 ||
		!SameTopic(resp.Topics[0].Topic, resp.Topics[0].TopicID, topic, topicID) || resp.Topics[0].Partitions[0].Partition != partition {
		return kmsg.ProduceResponseTopicPartition{}, malformed("Produce", topic, partition)
	}
	return resp.Topics[0].Partitions[0], nil
}

// FetchAnswer returns resp's entry for topic/partition (topicID: the
// topic's ID the request named, zero if none), the one partition its
// request asked about; any other shape is malformed.
func FetchAnswer(resp *kmsg.FetchResponse, topic string, topicID [16]byte, partition int32) (*kmsg.FetchResponseTopicPartition, error) {
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 ||
		!SameTopic(resp.Topics[0].Topic, resp.Topics[0].TopicID, topic, topicID) || resp.Topics[0].Partitions[0].Partition != partition {
		return nil, malformed("Fetch", topic, partition)
	}
	return &resp.Topics[0].Partitions[0], nil
}

// SameTopic reports whether an answer's topic (name, ID) is the one asked
// about: by ID when both sides carry one (versions that name topics by ID
// may leave the name empty), by name otherwise.
func SameTopic(name string, id [16]byte, askedName string, askedID [16]byte) bool {
	if id != ([16]byte{}) && askedID != ([16]byte{}) {
		return id == askedID
	}
	return name == askedName
}

func malformed(api, topic string, partition int32) error {
	return fmt.Errorf("%s %s/%d: %w", api, topic, partition, ErrMalformedAnswer)
}
