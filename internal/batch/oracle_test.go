package batch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/compress"
)

// The oracle tests decode the same bytes with kgo.ProcessFetchPartition and
// with the Iterator and require identical records, for bytes we encode and
// for bytes kmsg and kgo's compressor encode.

func kgoCodec(c compress.Codec) kgo.CompressionCodec {
	switch c {
	case compress.Gzip:
		return kgo.GzipCompression()
	case compress.Snappy:
		return kgo.SnappyCompression()
	case compress.LZ4:
		return kgo.Lz4Compression()
	case compress.Zstd:
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// fromKgo converts kgo's records to ours for comparison.
func fromKgo(rs []*kgo.Record) []Record {
	out := make([]Record, len(rs))
	for i, r := range rs {
		out[i] = Record{Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value, LeaderEpoch: r.LeaderEpoch}
		for _, h := range r.Headers {
			out[i].Headers = append(out[i].Headers, RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
	}
	return out
}

// kgoDecode runs kgo's decoder over a fetch partition.
func kgoDecode(t testing.TB, data []byte, aborted []AbortedTransaction, readCommitted, keepControl bool, start int64) []Record {
	t.Helper()
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.RecordBatches = 3, 1<<40, 1<<40, data
	for _, a := range aborted {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		rp.AbortedTransactions = append(rp.AbortedTransactions, at)
	}
	o := kgo.ProcessFetchPartitionOpts{Topic: "t", Partition: 3, Offset: start, KeepControlRecords: keepControl, IsolationLevel: kgo.ReadUncommitted()}
	if readCommitted {
		o.IsolationLevel = kgo.ReadCommitted()
	}
	fp, _ := kgo.ProcessFetchPartition(o, &rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("kgo: %v", fp.Err)
	}
	for _, r := range fp.Records {
		if r.Topic != "t" || r.Partition != 3 {
			t.Fatalf("kgo record %s/%d", r.Topic, r.Partition)
		}
	}
	return fromKgo(fp.Records)
}

// kmsgBatch encodes records the way kgo's own producer path does: kmsg
// records and batch, kgo's compressor, CRC-32C over bytes [21:].
func kmsgBatch(t testing.TB, base int64, recs []Record, codec compress.Codec, attrs int16, pid int64, xerial bool) []byte {
	t.Helper()
	var raw []byte
	maxTS := recs[0].Timestamp
	for _, r := range recs {
		kr := kmsg.NewRecord()
		kr.Attributes = r.Attributes
		kr.TimestampDelta64 = r.Timestamp - recs[0].Timestamp
		kr.TimestampDelta = int32(kr.TimestampDelta64)
		kr.OffsetDelta = int32(r.Offset - base)
		kr.Key, kr.Value = r.Key, r.Value
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: string(h.Key), Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // the body, after a 1-byte zero length
		raw = kr.AppendTo(raw)
		maxTS = max(maxTS, r.Timestamp)
	}
	payload := raw
	switch {
	case codec == compress.Snappy && xerial:
		payload = xerialFrame(raw, 1000)
	case codec != compress.None:
		c, err := kgo.DefaultCompressor(kgoCodec(codec))
		if err != nil {
			t.Fatal(err)
		}
		out, used := c.Compress(new(bytes.Buffer), raw)
		if int(used) != int(codec) {
			t.Fatalf("kgo compressed with %d, want %d", used, codec)
		}
		payload = bytes.Clone(out)
	}
	b := kmsg.NewRecordBatch()
	b.FirstOffset, b.Length, b.PartitionLeaderEpoch, b.Magic = base, int32(49+len(payload)), 11, 2
	b.Attributes = int16(codec) | attrs
	b.LastOffsetDelta = int32(recs[len(recs)-1].Offset - base)
	b.FirstTimestamp, b.MaxTimestamp = recs[0].Timestamp, maxTS
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = pid, 1, 0
	b.NumRecords, b.Records = int32(len(recs)), payload
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// xerialFrame frames src the way snappy-java does, in blocks of chunk bytes.
func xerialFrame(src []byte, chunk int) []byte {
	out := append([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}, 0, 0, 0, 1, 0, 0, 0, 1)
	for len(src) > 0 {
		n := min(chunk, len(src))
		block := s2.EncodeSnappy(nil, src[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		src = src[n:]
	}
	return out
}

// kmsgControl encodes a control batch with kmsg.
func kmsgControl(t testing.TB, base, pid int64, typ ControlType) []byte {
	key := binary.BigEndian.AppendUint16([]byte{0, 0}, uint16(typ))
	value := binary.BigEndian.AppendUint32([]byte{0, 0}, 9)
	return kmsgBatch(t, base, []Record{{Offset: base, Timestamp: 5, Key: key, Value: value}}, compress.None, int16(AttrControl|AttrTransactional), pid, false)
}

func TestOracleOursToKgo(t *testing.T) {
	for _, codec := range compress.Codecs {
		t.Run(codec.String(), func(t *testing.T) {
			log, aborted, committed, all := txnLog(t, codec)
			rng := rand.New(rand.NewPCG(50, 51))
			// A bigger batch with every record shape after the transactions.
			big := genRecords(rng, 21, 700, 200)
			log = append(log, buildBatch(t, specAt(21, codec), big)...)
			for _, r := range big {
				all = append(all, r.Offset)
				committed = append(committed, r.Offset)
			}
			for _, tc := range []struct {
				name          string
				readCommitted bool
				keepControl   bool
				start         int64
				want          []int64
			}{
				{"read_uncommitted", false, false, 0, all},
				{"read_committed", true, false, 0, committed},
				{"keep control", false, true, 0, nil},
				{"from offset 11", true, false, 11, nil},
				{"from offset 16", true, false, 16, nil},
			} {
				t.Run(tc.name, func(t *testing.T) {
					// As a broker would answer a fetch at tc.start: from the
					// batch holding it, with the aborted transactions that
					// end at or after it.
					log, aborted := fetchFrom(log, aborted, tc.start, map[int64]int64{1: 8, 3: 17})
					theirs := kgoDecode(t, log, aborted, tc.readCommitted, tc.keepControl, tc.start)
					bs, _, err := decodeAll(t, log, Options{Topic: "t", Partition: 3, Aborted: aborted,
						ReadCommitted: tc.readCommitted, KeepControl: tc.keepControl, StartOffset: tc.start})
					if err != nil {
						t.Fatal(err)
					}
					ours := allRecords(bs)
					checkRecords(t, ours, theirs)
					for i := range ours {
						if ours[i].LeaderEpoch != theirs[i].LeaderEpoch {
							t.Fatalf("record %d epoch %d, kgo %d", i, ours[i].LeaderEpoch, theirs[i].LeaderEpoch)
						}
					}
					if tc.want != nil && !equalInt64(offsets(ours), tc.want) {
						t.Fatalf("offsets %v, want %v", offsets(ours), tc.want)
					}
				})
			}
		})
	}
}

// fetchFrom cuts log to start at the batch holding offset start and keeps
// the aborted transactions whose end (the offset of their abort marker, in
// ends) is at or after start.
func fetchFrom(log []byte, aborted []AbortedTransaction, start int64, ends map[int64]int64) ([]byte, []AbortedTransaction) {
	for len(log) > LogOverhead {
		base := int64(binary.BigEndian.Uint64(log))
		size := LogOverhead + int(binary.BigEndian.Uint32(log[offLength:]))
		last := base + int64(binary.BigEndian.Uint32(log[offLastDelta:]))
		if last >= start {
			break
		}
		log = log[size:]
	}
	var kept []AbortedTransaction
	for _, a := range aborted {
		if ends[a.ProducerID] >= start {
			kept = append(kept, a)
		}
	}
	return log, kept
}

func TestOracleKgoToOurs(t *testing.T) {
	rng := rand.New(rand.NewPCG(60, 61))
	type part struct {
		recs    []Record
		codec   compress.Codec
		attrs   int16
		pid     int64
		xerial  bool
		control ControlType
	}
	var parts []part
	base := int64(0)
	add := func(n, size int, codec compress.Codec, attrs int16, pid int64, xerial bool) {
		recs := genRecords(rng, base, n, size)
		parts = append(parts, part{recs: recs, codec: codec, attrs: attrs, pid: pid, xerial: xerial, control: ControlNone})
		base += int64(n)
	}
	for _, codec := range compress.Codecs {
		add(50, 100, codec, 0, -1, false)
		add(5, 3000, codec, 0, -1, false)
	}
	add(40, 100, compress.Snappy, 0, -1, true) // xerial framed, several blocks
	add(3, 10, compress.Zstd, int16(AttrTransactional), 8, false)
	parts = append(parts, part{pid: 8, control: ControlAbort})
	base++
	add(4, 10, compress.LZ4, int16(AttrTransactional), 9, false)
	parts = append(parts, part{pid: 9, control: ControlCommit})
	base++
	add(2, 10, compress.Gzip, int16(AttrLogAppendTime), -1, false)
	aborted := []AbortedTransaction{{ProducerID: 8, FirstOffset: parts[len(parts)-5].recs[0].Offset}}

	var log []byte
	var wantAll, wantCommitted []Record
	b := int64(0)
	for _, p := range parts {
		if p.control != ControlNone {
			log = append(log, kmsgControl(t, b, p.pid, p.control)...)
			b++
			continue
		}
		log = append(log, kmsgBatch(t, b, p.recs, p.codec, p.attrs, p.pid, p.xerial)...)
		recs := p.recs
		if p.attrs&int16(AttrLogAppendTime) != 0 {
			recs = append([]Record(nil), recs...)
			maxTS := recs[0].Timestamp
			for _, r := range recs {
				maxTS = max(maxTS, r.Timestamp)
			}
			for i := range recs {
				recs[i].Timestamp = maxTS
			}
		}
		wantAll = append(wantAll, recs...)
		if p.pid != 8 {
			wantCommitted = append(wantCommitted, recs...)
		}
		b += int64(len(p.recs))
	}
	for _, readCommitted := range []bool{false, true} {
		want := wantAll
		if readCommitted {
			want = wantCommitted
		}
		theirs := kgoDecode(t, log, aborted, readCommitted, false, 0)
		checkRecords(t, theirs, want)
		var it Iterator
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.RecordBatches = 3, log
		for _, a := range aborted {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
			rp.AbortedTransactions = append(rp.AbortedTransactions, at)
		}
		it.ResetFetch(&rp, Options{Topic: "t", ReadCommitted: readCommitted, Retain: true})
		var ours []Record
		var batches, controls int
		for it.Next() {
			batches++
			if it.Batch().Header.Attributes.Control() {
				controls++
				if it.Batch().Marker.CoordinatorEpoch != 9 {
					t.Fatalf("marker %+v", it.Batch().Marker)
				}
			}
			ours = append(ours, it.Batch().Records...)
		}
		if it.Err() != nil || it.Consumed() != len(log) || batches != len(parts) || controls != 2 {
			t.Fatalf("err %v, consumed %d/%d, %d batches, %d controls", it.Err(), it.Consumed(), len(log), batches, controls)
		}
		checkRecords(t, ours, want)
		for i := range ours {
			if ours[i].LeaderEpoch != 11 {
				t.Fatalf("record %d epoch %d", i, ours[i].LeaderEpoch)
			}
		}
	}
}
