package integration

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Acks is a produce acknowledgement level for the test producer.
type Acks int

// The acknowledgement levels of the test producer.
const (
	AcksLeader Acks = 1
	AcksAll    Acks = -1
)

// ProduceValues writes one record per value to topic/partition with franz-go's
// own producer (a test oracle, never the code under test), one record at a
// time and in order, and returns the offset the broker acknowledged for each.
// With AcksLeader idempotence is off, so an acknowledged record may exist on
// the leader alone.
func ProduceValues(ctx context.Context, acks Acks, topic string, partition int32, values ...string) ([]int64, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(Seeds...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(30 * time.Second),
	}
	if acks == AcksLeader {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	offsets := make([]int64, 0, len(values))
	for _, v := range values {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return offsets, fmt.Errorf("produce %q to %s/%d: %w", v, topic, partition, err)
		}
		offsets = append(offsets, r.Offset)
	}
	return offsets, nil
}

// Fetched is a record read back with a raw Fetch.
type Fetched struct {
	Offset      int64
	LeaderEpoch int32
	Value       string
}

// FetchAll reads topic/partition from broker with raw Fetch requests, from
// offset from up to the broker's high watermark, and decodes the batches
// with franz-go's decoder (an oracle independent of kepoch's codec).
func (c *Cluster) FetchAll(ctx context.Context, broker int32, topic string, topicID [16]byte, partition int32, from int64) ([]Fetched, error) {
	var out []Fetched
	offset := from
	for {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 100
		req.MaxBytes = 8 << 20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rt.TopicID = topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = partition
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = 4 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, c.Broker(broker))
		if err != nil {
			return out, err
		}
		if err := errCode(resp.ErrorCode); err != nil {
			return out, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return out, fmt.Errorf("fetch %s/%d from %d: malformed answer", topic, partition, broker)
		}
		rp2 := resp.Topics[0].Partitions[0]
		if err := errCode(rp2.ErrorCode); err != nil {
			return out, fmt.Errorf("fetch %s/%d at %d from broker %d: %w", topic, partition, offset, broker, err)
		}
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Topic: topic, Partition: partition, KeepControlRecords: false, Offset: offset,
		}, &rp2, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return out, fp.Err
		}
		for _, r := range fp.Records {
			out = append(out, Fetched{Offset: r.Offset, LeaderEpoch: r.LeaderEpoch, Value: string(r.Value)})
			offset = r.Offset + 1
		}
		if offset >= rp2.HighWatermark || len(fp.Records) == 0 {
			if offset < rp2.HighWatermark {
				return out, fmt.Errorf("fetch %s/%d from %d: no progress at %d below high watermark %d", topic, partition, broker, offset, rp2.HighWatermark)
			}
			return out, nil
		}
	}
}
