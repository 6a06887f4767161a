package integration

import (
	"math/bits"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoPools is franz-go's counterpart of kepoch's Fetches.Release for the
// benchmarks: its WithPools hooks (decompression buffers and record
// slices), with records handed back by Record.Recycle, in size classes of
// powers of two like kepoch's recycler. Decompression buffers are sized
// from the codec's own declared output size where it has one (zstd frame
// content size, raw snappy length), as kepoch sizes them.
type kgoPools struct {
	bufs [bits.UintSize]sync.Pool // *[]byte
	recs [bits.UintSize]sync.Pool // *[]kgo.Record
}

var _ interface {
	kgo.PoolDecompressBytes
	kgo.PoolRecords
} = (*kgoPools)(nil)

// sharedKgoPools is shared by every kgo client of the benchmarks, as
// kepoch's recycler is by its consumers.
var sharedKgoPools = new(kgoPools)

func poolClass(n int) (class, alloc int) {
	if n <= 1 {
		return 0, 1
	}
	c := bits.Len(uint(n - 1))
	return c, 1 << c
}

func (p *kgoPools) GetDecompressBytes(compressed []byte, codec kgo.CompressionCodecType) []byte {
	n := 4 * len(compressed)
	switch codec {
	case kgo.CodecZstd:
		var h zstd.Header
		if h.Decode(compressed) == nil && h.HasFCS {
			n = int(h.FrameContentSize) + 1024
		}
	case kgo.CodecSnappy:
		if m, err := s2.DecodedLen(compressed); err == nil {
			n = m
		}
	}
	c, alloc := poolClass(n)
	if v, ok := p.bufs[c].Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 0, alloc)
}

func (p *kgoPools) PutDecompressBytes(b []byte) {
	if cap(b) > 0 {
		b = b[:0]
		p.bufs[bits.Len(uint(cap(b)))-1].Put(&b)
	}
}

func (p *kgoPools) GetRecords(n int) []kgo.Record {
	c, alloc := poolClass(n)
	if v, ok := p.recs[c].Get().(*[]kgo.Record); ok {
		return (*v)[:n]
	}
	return make([]kgo.Record, n, alloc)
}

func (p *kgoPools) PutRecords(rs []kgo.Record) {
	if cap(rs) > 0 {
		rs = rs[:0]
		p.recs[bits.Len(uint(cap(rs)))-1].Put(&rs)
	}
}
