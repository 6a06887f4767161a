package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/wire"
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
	err := c.fetchEach(ctx, broker, topic, topicID, partition, from, func(rp *kmsg.FetchResponseTopicPartition, offset int64) (int64, error) {
		// Control records (transaction markers) are decoded so that the
		// offset moves past them, and left out of what is returned: a log
		// that ends with a marker would otherwise never reach the high
		// watermark ("no progress"). Isolation is read_uncommitted: the
		// records of aborted and open transactions are returned too.
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Topic: topic, Partition: partition, KeepControlRecords: true, Offset: offset,
		}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return offset, fp.Err
		}
		for _, r := range fp.Records {
			if !r.Attrs.IsControl() {
				out = append(out, Fetched{Offset: r.Offset, LeaderEpoch: r.LeaderEpoch, Value: string(r.Value)})
			}
			offset = r.Offset + 1
		}
		return offset, nil
	})
	return out, err
}

// fetchEach reads topic/partition from broker with raw Fetch requests, from
// offset from up to the broker's high watermark: read takes each answer and
// the offset it was fetched at, and returns the offset to fetch next; an
// answer that moves it on not at all below the high watermark is an error.
func (c *Cluster) fetchEach(ctx context.Context, broker int32, topic string, topicID [16]byte, partition int32, from int64,
	read func(rp *kmsg.FetchResponseTopicPartition, offset int64) (int64, error),
) error {
	offset := from
	for {
		rp, err := c.fetchRaw(ctx, broker, topic, topicID, partition, offset)
		if err != nil {
			return fmt.Errorf("fetch %s/%d at %d from broker %d: %w", topic, partition, offset, broker, err)
		}
		before := offset
		if offset, err = read(&rp, offset); err != nil {
			return err
		}
		if offset >= rp.HighWatermark {
			return nil
		}
		if offset == before {
			return fmt.Errorf("fetch %s/%d from %d: no progress at %d below high watermark %d", topic, partition, broker, offset, rp.HighWatermark)
		}
	}
}

// produceRaw sends one record batch to broker with a raw Produce request
// (acks=all) and returns the base offset the broker assigned.
func (c *Cluster) produceRaw(ctx context.Context, broker int32, topic string, id [16]byte, partition int32, records []byte) (int64, error) {
	p, err := wire.Produce(ctx, c.Broker(broker), topic, id, partition, records, 10*time.Second)
	if err != nil {
		return 0, err
	}
	if err := errCode(p.ErrorCode); err != nil {
		return 0, fmt.Errorf("produce %s/%d: %w (%s)", topic, partition, err, deref(p.ErrorMessage))
	}
	return p.BaseOffset, nil
}

// fetchRaw sends one raw Fetch for topic/partition at offset to broker and
// returns the partition's answer.
func (c *Cluster) fetchRaw(ctx context.Context, broker int32, topic string, id [16]byte, partition int32, offset int64) (kmsg.FetchResponseTopicPartition, error) {
	return c.fetchRawIn(ctx, broker, topic, id, partition, offset, "")
}

// fetchRawIn is fetchRaw for a consumer in rack (KIP-392: a leader may
// name a replica in it and answer with no records).
func (c *Cluster) fetchRawIn(ctx context.Context, broker int32, topic string, id [16]byte, partition int32, offset int64, rack string) (kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.Rack = rack
	req.ReplicaID = -1
	req.MaxWaitMillis = 100
	req.MaxBytes = 16 << 20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = 16 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.Reader(broker))
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, err
	}
	if err := errCode(resp.ErrorCode); err != nil {
		return kmsg.FetchResponseTopicPartition{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("fetch %s/%d: malformed answer", topic, partition)
	}
	p := resp.Topics[0].Partitions[0]
	return p, errCode(p.ErrorCode)
}

// BatchHeaders reads the record batch headers of topic/partition that
// broker holds from offset from up to its high watermark, with raw Fetch
// requests parsed by kmsg (an oracle independent of kepoch's codec).
func (c *Cluster) BatchHeaders(ctx context.Context, broker int32, topic string, topicID [16]byte, partition int32, from int64) ([]kmsg.RecordBatch, error) {
	var out []kmsg.RecordBatch
	err := c.fetchEach(ctx, broker, topic, topicID, partition, from, func(rp *kmsg.FetchResponseTopicPartition, offset int64) (int64, error) {
		for data := rp.RecordBatches; len(data) >= 12; {
			n := int(binary.BigEndian.Uint32(data[8:])) + 12
			if n > len(data) {
				break // a partial batch at the end of the answer
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(data[:n]); err != nil {
				return offset, fmt.Errorf("batch at %d: %w", offset, err)
			}
			data = data[n:]
			if last := b.FirstOffset + int64(b.LastOffsetDelta); last >= offset {
				out = append(out, b)
				offset = last + 1
			}
		}
		return offset, nil
	})
	return out, err
}
