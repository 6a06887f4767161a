package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/internal/gcreserve"
	"github.com/kepoch/kepoch/internal/wire"
)

// The bound benchmarks measure what no client can beat on this machine and
// cluster: the same work as BenchmarkConsume and BenchmarkProduce with
// everything a client does beyond the wire and the codec left out. They
// are the ceiling against which the clients' figures are read: when the
// ceiling is itself close to kgo, no client can be much faster here.
//
//	KEPOCH_KAFKA=1 go test -run '^$' -bench 'Bound' ./integration/

// BenchmarkConsumeBound reads the topics of BenchmarkConsume with raw Fetch
// requests (one loop per partition, each to its leader, the same fetch
// sizes), checks each batch's CRC-32C and decompresses its records into a
// reused buffer, and parses nothing else: no records, no allocation per
// batch, no positions. It holds the GC reserve kepoch's consumer holds by
// default (consumer.GCReserve). Reported like BenchmarkConsume.
func BenchmarkConsumeBound(b *testing.B) {
	c := Require(b)
	b.Cleanup(func() { deleteBenchTopics(b, c) })
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			n := consumeRecords(size)
			b.Run(fmt.Sprintf("%s/%dB/bound", codec, size), func(b *testing.B) {
				topic := benchTopic(b, c, codec, size, n)
				id := topicID(b, c, topic)
				benchConsume(b, n, size, func() func() { return consumeBound(b, topic, id, n) })
			})
		}
	}
}

// consumeBound reads the n records of topic (whose ID is id) from offset 0
// the bound's way, one raw fetch loop per partition, and returns what
// closes its connections.
func consumeBound(b *testing.B, topic string, id [16]byte, n int) (closeFn func()) {
	// The ceiling holds the GC reserve kepoch's consumer holds by default
	// (an eighth of its default MaxBufferedBytes): it measures the same
	// garbage collection pace, not a slower one.
	reserve := gcreserve.Take(64 << 20 / 8)
	read := false
	defer func() {
		if !read { // b.Fatal: the next benchmark runs without it
			reserve.Release()
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds...))
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchPartitions)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for p := int32(0); p < benchPartitions; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// benchTopic puts partition p on broker p+1.
			if err := fetchBound(ctx, cl.Broker(int(p+1)), topic, id, p, &got, int64(n)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if got.Load() != int64(n) {
		b.Fatalf("read %d records of %d", got.Load(), n)
	}
	read = true
	return func() { cl.Close(); reserve.Release() }
}

// fetchBound reads partition p from offset 0 until the records read by all
// partitions reach n: raw Fetches of BenchmarkConsume's sizes, each
// batch's CRC checked and payload decompressed into one reused buffer.
func fetchBound(ctx context.Context, br *kgo.Broker, topic string, id [16]byte, p int32, got *atomic.Int64, n int64) error {
	dec, err := compress.NewDecompressor(compress.DefaultMaxDecompressedSize)
	if err != nil {
		return err
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var buf []byte
	offset := int64(0)
	for got.Load() < n {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.SessionEpoch = -1, -1
		req.MaxWaitMillis = int32(benchFetchMaxWait / time.Millisecond)
		req.MaxBytes = benchFetchMaxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, benchFetchMaxPartBytes
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("fetch %s/%d: malformed answer", topic, p)
		}
		part := &resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			return fmt.Errorf("fetch %s/%d at %d: %w", topic, p, offset, err)
		}
		data := part.RecordBatches
		for len(data) >= batch.HeaderSize {
			size := batch.LogOverhead + int(binary.BigEndian.Uint32(data[8:12]))
			if size > len(data) {
				break // a partial batch: asked again from its offset
			}
			raw := data[:size]
			data = data[size:]
			if crc32.Checksum(raw[21:], castagnoli) != binary.BigEndian.Uint32(raw[17:21]) {
				return fmt.Errorf("fetch %s/%d: CRC mismatch at %d", topic, p, offset)
			}
			codec := compress.Codec(binary.BigEndian.Uint16(raw[21:23]) & 7)
			if buf, err = dec.Decompress(buf[:0], raw[batch.HeaderSize:], codec); err != nil {
				return err
			}
			base := int64(binary.BigEndian.Uint64(raw[0:8]))
			last := base + int64(binary.BigEndian.Uint32(raw[23:27]))
			if last < offset {
				continue
			}
			got.Add(last + 1 - max(base, offset))
			offset = last + 1
		}
	}
	return nil
}

// topicID returns topic's ID from a Metadata request.
func topicID(b *testing.B, c *Cluster, topic string) [16]byte {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c.Client)
	if err != nil {
		b.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		b.Fatalf("metadata of %s: %+v", topic, resp.Topics)
	}
	return resp.Topics[0].TopicID
}

// BenchmarkProduceBound writes BenchmarkProduce's records as one batch
// encoded once up front (about 1 MiB, the broker's default batch limit, of
// the same keys and values), resent by raw Produce requests, acks=all, up
// to five in flight per partition's leader, with no producer ID: the
// brokers do all the work of a produce and replication, the client none
// of the encoding, accounting or sequencing. Reported like
// BenchmarkProduce.
func BenchmarkProduceBound(b *testing.B) {
	c := Require(b)
	for _, codec := range []compress.Codec{compress.None, compress.Zstd} {
		for _, size := range []int{100, 1024} {
			n := benchRecords(size)
			topic, id, value := produceBenchTopic(b, c, "bound", codec, size)
			warmTopic(b, topic, n, value)
			b.Run(fmt.Sprintf("%s/%dB/bound", codec, size), func(b *testing.B) {
				run, records, closeFn := produceBoundRun(b, codec, topic, id, value, n)
				defer closeFn()
				benchProduce(b, records, size, nil, run)
			})
		}
	}
}

// produceBoundRun returns the bound's way of writing about n records of
// value to topic (whose ID is id): one batch encoded up front, resent by raw
// Produce requests in whole batches, the same number to each partition. It
// returns the function that writes them, how many records that is, and
// what closes its connections.
func produceBoundRun(b *testing.B, codec compress.Codec, topic string, id [16]byte, value []byte, n int) (run func(), records int, closeFn func()) {
	// One batch of as many records as fit in 1000012 bytes
	// uncompressed (kgo's and the broker's default limit).
	spec := batch.DefaultSpec()
	spec.Codec = codec
	bld := batch.NewBuilder(nil)
	bld.Reset(spec)
	for i := 0; bld.Size()+batch.RecordSize([]byte("key-00"), value, nil) <= 1_000_012; i++ {
		if err := bld.Append(time.Now().UnixMilli(), fmt.Appendf(nil, "key-%d", i%64), value, nil); err != nil {
			b.Fatal(err)
		}
	}
	per := bld.Len()
	enc, err := bld.Finish()
	if err != nil {
		b.Fatal(err)
	}
	enc = append([]byte(nil), enc...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds...))
	if err != nil {
		b.Fatal(err)
	}
	// Whole batches: each partition gets requests/3 of them.
	requests := (n + per - 1) / per
	requests += (benchPartitions - requests%benchPartitions) % benchPartitions
	run = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, benchPartitions*5)
		for p := int32(0); p < benchPartitions; p++ {
			var left atomic.Int64
			left.Store(int64(requests / benchPartitions))
			for range 5 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						// Partition p is led by broker p+1.
						r, err := wire.Produce(ctx, cl.Broker(int(p+1)), topic, id, p, enc, 30*time.Second)
						if err == nil {
							err = errCode(r.ErrorCode)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	return run, requests * per, cl.Close
}
