// Package batch owns the bytes of Kafka v2 record batches (magic 2): their
// encoding for the producer and their decoding for the consumer, including
// CRC-32C validation, compression through internal/compress, control
// (transaction marker) batches and read_committed filtering.
//
// # Encoding
//
// A Builder collects records for one batch and compresses them when the
// batch is finished; its buffers are reused from one batch to the next:
//
//	b := batch.NewBuilder(compressor)
//	b.Reset(spec) // producer id/epoch, base sequence, codec, ...
//	for _, r := range pending {
//		if err := b.Append(r.Timestamp, r.Key, r.Value, r.Headers); err != nil { ... }
//	}
//	wire, err := b.Finish() // valid until the next Reset
//
// AppendBatch writes a batch from a complete Header and records (tests,
// re-encoding), AppendControlBatch a commit or abort marker.
//
// # Decoding
//
// An Iterator walks the RecordBatches bytes of one fetched partition. It
// yields every complete batch, including control batches and batches of
// aborted transactions (flagged, with no records), so that the consumer can
// advance its position and its leader epoch (KIP-320) past them. Keys, values
// and header fields are sub-slices of the input or of the iterator's
// decompression buffer, never copies:
//
//	var it batch.Iterator // reuse across fetches
//	it.Reset(rp.RecordBatches, batch.Options{Topic: t, Partition: p, StartOffset: pos})
//	for it.Next() {
//		b := it.Batch()
//		for i := range b.Records { deliver(&b.Records[i]) }
//		pos, epoch = b.Header.NextOffset(), b.Header.PartitionLeaderEpoch
//	}
//	if err := it.Err(); err != nil { ... } // a *DecodeError naming topic, partition, offset
//	_ = it.Consumed() // bytes of complete batches; a trailing partial batch is left
//
// A batch is either yielded whole or not at all: a CRC mismatch, a length
// past the buffer, a record count or record length that does not add up, a
// negative length, an overflowing varint or an undecodable compressed payload
// stops the iteration with a *DecodeError, and no record of that batch is
// returned. Magic 0 and 1 message sets are rejected, never misread.
package batch
