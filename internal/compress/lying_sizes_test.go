package compress

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A streamed zstd frame (no content size, as the Java producer's
// ZstdOutputStream writes: window log 21 at level 3) holding 100 bytes must
// decode under a 1 MiB bound.
func TestZstdWindowAboveLimit(t *testing.T) {
	p := bytes.Repeat([]byte("kafka "), 17)[:100]
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 11 << 3} // no FCS, window 2 MiB
	bh := uint32(len(p))<<3 | 1                            // last raw block
	frame = append(frame, byte(bh), byte(bh>>8), byte(bh>>16))
	frame = append(frame, p...)
	lib, _ := zstd.NewReader(nil)
	if o, err := lib.DecodeAll(frame, nil); err != nil || !bytes.Equal(o, p) {
		t.Fatalf("library with default limits: %v", err)
	}
	d, _ := NewDecompressor(1 << 20)
	out, err := d.Decompress(nil, frame, Zstd)
	if err != nil || !bytes.Equal(out, p) {
		t.Fatalf("100 bytes under a 1 MiB limit: %v", err)
	}
}

func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A 22-byte zstd frame declaring a 200 MiB content size (one raw block of
// 10 bytes) must fail without a 200 MiB allocation: the library alone
// allocates ~0.4 MiB for it.
func TestZstdLyingContentSize(t *testing.T) {
	var fcs uint32 = 200 << 20
	src := []byte{0x28, 0xb5, 0x2f, 0xfd, 2<<6 | 1<<5, byte(fcs), byte(fcs >> 8), byte(fcs >> 16), byte(fcs >> 24)}
	bh := uint32(10)<<3 | 1
	src = append(src, byte(bh), byte(bh>>8), byte(bh>>16))
	src = append(src, "0123456789"...)
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	var err error
	n := allocated(func() { _, err = d.Decompress(nil, src, Zstd) })
	if err == nil || n > 16<<20 {
		t.Fatalf("a %d-byte frame that declares 200 MiB made Decompress allocate %d MiB before failing (%v)", len(src), n>>20, err)
	}
}

// A 6-byte raw snappy block declaring 200 MiB must fail without a 200 MiB
// allocation (snappy decodes at most 64 bytes per 3 input bytes).
func TestSnappyLyingLength(t *testing.T) {
	src := []byte{0x80, 0x80, 0x80, 0x64, 0x00, 'x'}
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	var err error
	n := allocated(func() { _, err = d.Decompress(nil, src, Snappy) })
	if err == nil || n > 16<<20 {
		t.Fatalf("a %d-byte snappy block that declares 200 MiB made Decompress allocate %d MiB before failing (%v)", len(src), n>>20, err)
	}
}
