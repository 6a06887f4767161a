package producer

import (
	"bytes"
	"testing"

	recbatch "github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
)

// A compressed batch keeps bytes of its compressed size until it is
// acknowledged, not a buffer sized for the uncompressed worst case (which
// held 1-2 MiB per batch of about 1 MiB of records that zstd wrote in a few
// KiB); the scratch buffer goes back to the pool for the next batch.
func TestCompressedBatchKeepsItsSize(t *testing.T) {
	value := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 40)
	for _, codec := range []compress.Codec{compress.None, compress.Gzip, compress.Snappy, compress.LZ4, compress.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			comp, err := compress.NewCompressor()
			if err != nil {
				t.Fatal(err)
			}
			p := &Producer{comp: comp}
			p.cfg.codec = codec
			s := &sink{p: p}
			for round := range 2 {
				b := &pbatch{tp: TopicPartition{"t", 0}, size: recbatch.HeaderSize}
				for range 900 {
					pr := pending{rec: &Record{Topic: "t", Value: value}}
					pr.size = int32(recbatch.RecordSize(nil, value, nil))
					b.recs = append(b.recs, pr)
					b.size += int(pr.size)
				}
				if err := s.encode(&sent{b: b}); err != nil {
					t.Fatal(err)
				}
				var it recbatch.Iterator
				it.Reset(b.encoded, recbatch.Options{})
				n := 0
				for it.Next() {
					for _, r := range it.Batch().Records {
						if !bytes.Equal(r.Value, value) {
							t.Fatalf("record %d: value of %d bytes", n, len(r.Value))
						}
						n++
					}
				}
				if err := it.Err(); err != nil || n != 900 {
					t.Fatalf("round %d: %d records decoded, %v", round, n, err)
				}
				want := len(b.encoded) + len(b.encoded)/2 // a pooled buffer's power of two at most
				if codec == compress.None {
					want = 2 * b.size
				}
				if cap(b.encoded) > max(want, 16<<10) {
					t.Errorf("round %d: %d bytes of batch held in a buffer of %d (uncompressed %d)", round, len(b.encoded), cap(b.encoded), b.size)
				}
			}
		})
	}
}
