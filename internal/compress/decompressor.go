package compress

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/kepoch/kepoch/errors"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// DefaultMaxDecompressedSize is the bound NewDecompressor callers use unless
// they have a reason to choose another: 256 MiB, far above any batch a broker
// accepts with default settings (message.max.bytes is 1 MiB compressed) and
// small enough that a hostile payload cannot exhaust memory.
const DefaultMaxDecompressedSize = 256 << 20

// Decompressor decompresses record payloads, never producing more than its
// maximum size per call. It is safe for concurrent use; each call borrows
// pooled codec state.
type Decompressor struct {
	max      int
	gzipPool sync.Pool // *gzipReader
	lz4Pool  sync.Pool // *lz4Reader
	zstdPool sync.Pool // *zstdReader
	// zstdWide decodes frames whose window exceeds max (a window bounds
	// back-references, not the content: the Java producer streams frames
	// with a 2 MiB window whatever their size). DecodeAll allocates no
	// window, so its bound is only the output's, checked after.
	zstdWide sync.Pool // *zstdReader
}

type gzipReader struct {
	r   gzip.Reader
	src bytes.Reader
}

type lz4Reader struct {
	r   *lz4.Reader
	src bytes.Reader
}

type zstdReader struct{ dec *zstd.Decoder }

// NewDecompressor returns a Decompressor that fails any call whose output
// would exceed maxSize bytes. maxSize must be positive.
func NewDecompressor(maxSize int) (*Decompressor, error) {
	if maxSize <= 0 {
		return nil, fmt.Errorf("compress: max decompressed size %d is not positive", maxSize)
	}
	d := &Decompressor{max: maxSize}
	d.gzipPool.New = func() any { return new(gzipReader) }
	d.lz4Pool.New = func() any { return &lz4Reader{r: lz4.NewReader(nil)} }
	zstdOpts := []zstd.DOption{
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(false),
		// The record batch's CRC-32C covers the compressed payload and is
		// checked before decompression; the frame checksum (which the
		// Java producer does not write) would only cost a second pass.
		zstd.IgnoreChecksum(true),
		zstd.WithDecoderMaxMemory(uint64(maxSize)),
	}
	probe, err := zstd.NewReader(nil, zstdOpts...)
	if err != nil {
		return nil, fmt.Errorf("compress: zstd options: %w", err)
	}
	probe.Close()
	d.zstdPool.New = func() any {
		dec, _ := zstd.NewReader(nil, zstdOpts...) // validated above
		r := &zstdReader{dec: dec}
		runtime.AddCleanup(r, func(dec *zstd.Decoder) { dec.Close() }, dec)
		return r
	}
	wideOpts := append(zstdOpts[:len(zstdOpts):len(zstdOpts)], zstd.WithDecoderMaxMemory(zstdMaxWindow))
	d.zstdWide.New = func() any {
		dec, _ := zstd.NewReader(nil, wideOpts...)
		r := &zstdReader{dec: dec}
		runtime.AddCleanup(r, func(dec *zstd.Decoder) { dec.Close() }, dec)
		return r
	}
	return d, nil
}

// MaxSize returns the most bytes one Decompress call may append.
func (d *Decompressor) MaxSize() int { return d.max }

// Decompress appends the decompressed form of src to dst and returns the
// extended slice; for None it appends src unchanged. At most MaxSize bytes
// are appended: a larger output fails with a *Error matching ErrTooLarge.
// dst may be nil; passing a reused buffer (buf[:0]) avoids allocation once
// it has grown. On error the returned slice is dst, unextended, and the
// error is a *Error.
func (d *Decompressor) Decompress(dst, src []byte, codec Codec) ([]byte, error) {
	at := len(dst)
	out, err := d.decompress(dst, src, codec)
	if err != nil {
		e := newError("decompress", codec, err)
		if errors.Is(err, ErrTooLarge) {
			e.Err, e.Limit = ErrTooLarge, d.max
		}
		return dst[:at], e
	}
	return out, nil
}

func (d *Decompressor) decompress(dst, src []byte, codec Codec) ([]byte, error) {
	if len(src) == 0 && codec != None && codec.Valid() {
		return dst, errEmpty // every codec writes at least a header
	}
	switch codec {
	case None:
		if len(src) > d.max {
			return dst, ErrTooLarge
		}
		return append(dst, src...), nil
	case Gzip:
		r := d.gzipPool.Get().(*gzipReader)
		defer d.gzipPool.Put(r)
		r.src.Reset(src)
		if err := r.r.Reset(&r.src); err != nil {
			return dst, err
		}
		out, err := readBounded(dst, &r.r, d.max, len(src))
		r.src.Reset(nil)
		return out, err
	case Snappy:
		if isXerial(src) {
			return xerialDecode(dst, src, d.max)
		}
		return snappyDecode(dst, src, d.max)
	case LZ4:
		r := d.lz4Pool.Get().(*lz4Reader)
		defer d.lz4Pool.Put(r)
		r.src.Reset(src)
		r.r.Reset(&r.src)
		out, err := readBounded(dst, r.r, d.max, len(src))
		r.r.Reset(nil)
		r.src.Reset(nil)
		return out, err
	case Zstd:
		pool := &d.zstdPool
		var zh zstd.Header
		if zh.Decode(src) == nil && zh.WindowSize > uint64(d.max) && zh.WindowSize <= zstdMaxWindow && d.max < zstdMaxWindow {
			if zh.HasFCS && zh.FrameContentSize > uint64(d.max) {
				return dst, ErrTooLarge
			}
			pool = &d.zstdWide
		}
		r := pool.Get().(*zstdReader)
		defer pool.Put(r)
		// Room past the frame's declared size lets the decoder use its
		// fast copy loops (which overrun by up to 32 bytes) to the end.
		if n := d.DecodedCap(src, Zstd); n > 0 {
			dst = growBy(dst, n)
		}
		out, err := r.dec.DecodeAll(src, dst)
		// A frame whose window is larger than the bound cannot be decoded
		// within it either.
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return dst, ErrTooLarge
		}
		if err != nil {
			return dst, err
		}
		if len(out)-len(dst) > d.max {
			return dst, ErrTooLarge
		}
		return out, nil
	}
	return dst, ErrUnknownCodec
}

// GrowsOnce reports whether decompressing src with codec sizes its output
// up front (snappy always, zstd when the frame declares its content size),
// so that Decompress into a nil buffer allocates once, about the size of
// the output. gzip and lz4 outputs grow as they are read.
func GrowsOnce(src []byte, codec Codec) bool {
	switch codec {
	case Snappy:
		return true
	case Zstd:
		var zh zstd.Header
		return zh.Decode(src) == nil && zh.HasFCS
	}
	return false
}

// DecodedCap returns the spare capacity a buffer needs for Decompress to
// write src's output into it without growing it, when src says so up
// front: raw snappy, and zstd frames that declare their content size
// within d's bound (with room past it for the decoder's fast copy loops).
// It is 0 when the output grows as it is read (gzip, lz4, xerial snappy)
// or src's header does not tell.
func (d *Decompressor) DecodedCap(src []byte, codec Codec) int {
	switch codec {
	case Snappy:
		if isXerial(src) {
			return 0
		}
		if n, err := s2.DecodedLen(src); err == nil && n <= d.max && snappyCanHold(src, n) {
			return n
		}
	case Zstd:
		var zh zstd.Header
		if zh.Decode(src) == nil && zh.HasFCS && zh.FrameContentSize <= uint64(d.max) &&
			zh.FrameContentSize <= uint64(len(src))*zstdMaxRatio {
			return int(zh.FrameContentSize) + zstdSlack
		}
	}
	return 0
}

// zstdMaxWindow is the largest zstd window decoded when it exceeds the
// Decompressor's bound: 128 MiB, the window zstd's level 22 (Kafka's
// highest) uses for a stream of unknown size.
const zstdMaxWindow = 128 << 20

// zstdSlack is the spare capacity kept past a zstd frame's content size.
const zstdSlack = 1024

// zstdMaxRatio bounds what a zstd input can decode to per byte: a block
// of at least 4 bytes (an RLE block) yields at most 128 KiB. A frame
// declaring more content than its input can hold is corrupt; it must not
// size an allocation (the zstd library applies the same bound).
const zstdMaxRatio = (128 << 10) / 4

// snappyCanHold reports whether a raw snappy block src can decode to n
// bytes: each snappy element of k bytes yields at most 64*k/3 bytes (a
// 3-byte copy of 64), so a block declaring more is corrupt and must not
// size an allocation.
func snappyCanHold(src []byte, n int) bool {
	return uint64(n) <= uint64(len(src))*64/3+64
}

// readBounded appends everything r yields to dst, failing with ErrTooLarge
// past max bytes. srcLen sizes the first growth.
func readBounded(dst []byte, r io.Reader, max, srcLen int) ([]byte, error) {
	start := len(dst)
	limit := start + max // the output may hold up to limit bytes
	if spare := cap(dst) - len(dst); spare < 4*srcLen+512 {
		dst = growBy(dst, min(4*srcLen+512, max+1))
	}
	for zeroReads := 0; ; {
		if len(dst) == cap(dst) {
			dst = growBy(dst, min(cap(dst)-start+512, limit+1-len(dst)))
		}
		// Never read more than one byte past the limit.
		room := dst[len(dst):min(cap(dst), limit+1)]
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst[:start], ErrTooLarge
		}
		switch {
		case err == io.EOF:
			return dst, nil
		case err != nil:
			return dst[:start], err
		case n == 0:
			if zeroReads++; zeroReads > 100 {
				return dst[:start], io.ErrNoProgress
			}
		default:
			zeroReads = 0
		}
	}
}

// xerialMagic starts a snappy payload framed the way the Java client's
// xerial snappy-java library writes it.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// errEmpty is the cause for an empty compressed payload.
var errEmpty = errors.New("empty compressed payload")

// errXerial is the cause for a malformed xerial framing.
var errXerial = errors.New("malformed xerial snappy framing")

// isXerial reports whether src is xerial framed: the 8-byte magic followed
// by two 4-byte version numbers.
func isXerial(src []byte) bool {
	return len(src) >= 16 && bytes.Equal(src[:8], xerialMagic)
}

func snappyDecode(dst, src []byte, max int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return dst, err
	}
	if n > max {
		return dst, ErrTooLarge
	}
	if !snappyCanHold(src, n) {
		return dst, s2.ErrCorrupt
	}
	at := len(dst)
	dst = growBy(dst, n)
	if _, err := s2.Decode(dst[at:at+n], src); err != nil {
		return dst[:at], err
	}
	return dst[:at+n], nil
}

// xerialDecode decodes the blocks following the 16-byte header. It sums the
// blocks' declared lengths first, so that the bound is checked before any
// output is written and dst grows once.
func xerialDecode(dst, src []byte, max int) ([]byte, error) {
	body := src[16:]
	total := 0
	for rest := body; len(rest) > 0; {
		if len(rest) < 4 {
			return dst, errXerial
		}
		size := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(size) > uint64(len(rest)) {
			return dst, errXerial
		}
		n, err := s2.DecodedLen(rest[:size])
		if err != nil {
			return dst, err
		}
		if !snappyCanHold(rest[:size], n) {
			return dst, s2.ErrCorrupt
		}
		if total += n; total > max {
			return dst, ErrTooLarge
		}
		rest = rest[size:]
	}
	at := len(dst)
	dst = growBy(dst, total)
	out := dst[at : at+total]
	for len(body) > 0 {
		size := binary.BigEndian.Uint32(body)
		block := body[4 : 4+size]
		n, _ := s2.DecodedLen(block) // checked above
		if _, err := s2.Decode(out[:n], block); err != nil {
			return dst[:at], err
		}
		out = out[n:]
		body = body[4+size:]
	}
	return dst[:at+total], nil
}
