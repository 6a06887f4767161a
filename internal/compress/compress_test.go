package compress

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/kepoch/kepoch/errors"
)

func payloads() map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 200<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	text := []byte(strings.Repeat("kafka record batch payload with some repetition 12345 ", 20000))
	return map[string][]byte{
		"empty":  {},
		"one":    {7},
		"text":   text,
		"random": random,
		"zeros":  make([]byte, 3<<20),
	}
}

func TestRoundTrip(t *testing.T) {
	d, err := NewDecompressor(DefaultMaxDecompressedSize)
	if err != nil {
		t.Fatal(err)
	}
	levels := map[Codec][]int{
		None:   {0},
		Gzip:   {-3, -2, -1, 0, 1, 9},
		Snappy: {0, 1, 2, 3},
		LZ4:    {0, 1, 9, 17},
		Zstd:   {-5, 1, 3, 7, 22},
	}
	for _, codec := range Codecs {
		for _, level := range levels[codec] {
			var opts []CompressorOption
			if codec != None {
				opts = append(opts, WithLevel(codec, level))
			}
			c, err := NewCompressor(opts...)
			if err != nil {
				t.Fatalf("%s level %d: %v", codec, level, err)
			}
			if c.Level(codec) != level {
				t.Fatalf("%s: Level = %d, want %d", codec, c.Level(codec), level)
			}
			for name, p := range payloads() {
				prefix := []byte("prefix")
				comp, err := c.Compress(bytes.Clone(prefix), p, codec)
				if err != nil {
					t.Fatalf("%s/%d/%s: %v", codec, level, name, err)
				}
				if !bytes.HasPrefix(comp, prefix) {
					t.Fatalf("%s/%d/%s: prefix overwritten", codec, level, name)
				}
				out, err := d.Decompress([]byte("keep"), comp[len(prefix):], codec)
				if err != nil {
					t.Fatalf("%s/%d/%s: %v", codec, level, name, err)
				}
				if !bytes.Equal(out[4:], p) || string(out[:4]) != "keep" {
					t.Fatalf("%s/%d/%s: round trip differs (%d bytes, want %d)", codec, level, name, len(out)-4, len(p))
				}
			}
		}
	}
}

// TestStandardReaders decodes our output with the codec libraries' plain
// readers: what any other Kafka client would do.
func TestStandardReaders(t *testing.T) {
	c, _ := NewCompressor()
	p := payloads()["text"]
	read := map[Codec]func([]byte) ([]byte, error){
		Gzip: func(b []byte) ([]byte, error) {
			r, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, err
			}
			var out bytes.Buffer
			_, err = out.ReadFrom(r)
			return out.Bytes(), err
		},
		Snappy: func(b []byte) ([]byte, error) { return s2.Decode(nil, b) },
		LZ4: func(b []byte) ([]byte, error) {
			var out bytes.Buffer
			_, err := out.ReadFrom(lz4.NewReader(bytes.NewReader(b)))
			return out.Bytes(), err
		},
		Zstd: func(b []byte) ([]byte, error) {
			dec, _ := zstd.NewReader(nil)
			defer dec.Close()
			return dec.DecodeAll(b, nil)
		},
	}
	for codec, fn := range read {
		comp, err := c.Compress(nil, p, codec)
		if err != nil {
			t.Fatal(err)
		}
		out, err := fn(comp)
		if err != nil || !bytes.Equal(out, p) {
			t.Fatalf("%s: standard reader: %v (equal %v)", codec, err, bytes.Equal(out, p))
		}
	}
}

// xerial frames src as snappy-java does.
func xerial(src []byte, chunk int) []byte {
	out := append(bytes.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)
	for len(src) > 0 {
		n := min(chunk, len(src))
		block := s2.EncodeSnappy(nil, src[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		src = src[n:]
	}
	return out
}

func TestXerial(t *testing.T) {
	d, _ := NewDecompressor(1 << 20)
	p := payloads()["text"][:500<<10]
	for _, chunk := range []int{1, 1000, 32 << 10, 1 << 20} {
		out, err := d.Decompress(nil, xerial(p[:min(len(p), chunk*300)], chunk), Snappy)
		if err != nil || !bytes.Equal(out, p[:min(len(p), chunk*300)]) {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
	}
	// Header only: an empty payload.
	if out, err := d.Decompress(nil, xerial(nil, 1), Snappy); err != nil || len(out) != 0 {
		t.Fatalf("empty xerial: %v %d", err, len(out))
	}
	good := xerial(p[:5000], 1000)
	bad := map[string][]byte{
		"cut length":      good[:18],
		"block past end":  good[:len(good)-1],
		"negative length": append(bytes.Clone(good[:16]), 0xff, 0xff, 0xff, 0xff, 0),
		"corrupt block":   append(bytes.Clone(good[:16]), 0, 0, 0, 3, 0x10, 0xff, 0xff),
		"over the limit":  xerial(make([]byte, 2<<20), 64<<10),
	}
	for name, b := range bad {
		_, err := d.Decompress(nil, b, Snappy)
		if !errors.Is(err, errors.ErrCompression) {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "over the limit" && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s: %v is not ErrTooLarge", name, err)
		}
	}
}

// TestBomb checks that every codec stops at the limit, with a typed error,
// for outputs far larger than it.
func TestBomb(t *testing.T) {
	const limit = 1 << 20
	d, _ := NewDecompressor(limit)
	c, _ := NewCompressor()
	for _, size := range []int{limit, limit + 1, 64 << 20} {
		p := make([]byte, size)
		for _, codec := range Codecs {
			comp, err := c.Compress(nil, p, codec)
			if err != nil {
				t.Fatal(err)
			}
			out, err := d.Decompress(nil, comp, codec)
			if size <= limit {
				if err != nil || len(out) != size {
					t.Fatalf("%s %d: %v", codec, size, err)
				}
				continue
			}
			var ce *Error
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, errors.ErrCompression) || !errors.As(err, &ce) || ce.Limit != limit || ce.Codec != codec {
				t.Fatalf("%s %d: %v", codec, size, err)
			}
			if len(out) != 0 {
				t.Fatalf("%s %d: %d bytes returned with the error", codec, size, len(out))
			}
			if !strings.Contains(err.Error(), "limit 1048576") {
				t.Fatalf("%s: message %q", codec, err)
			}
		}
	}
}

func TestCorruptInput(t *testing.T) {
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	c, _ := NewCompressor()
	p := payloads()["text"][:10000]
	for _, codec := range Codecs[1:] {
		comp, _ := c.Compress(nil, p, codec)
		cases := map[string][]byte{
			"garbage":   []byte("this is not compressed at all, not even a little"),
			"truncated": comp[:len(comp)/2],
			"empty":     {},
		}
		// gzip and our lz4 frames carry a checksum of the content; snappy
		// blocks and our zstd frames do not (the batch CRC covers them).
		if codec == Gzip || codec == LZ4 {
			flipped := bytes.Clone(comp)
			flipped[len(flipped)/2] ^= 0xff
			cases["flipped"] = flipped
		}
		for name, in := range cases {
			out, err := d.Decompress([]byte("x"), in, codec)
			if !errors.Is(err, errors.ErrCompression) || string(out) != "x" {
				t.Fatalf("%s/%s: err %v, %d bytes out", codec, name, err, len(out))
			}
		}
	}
	if _, err := d.Decompress(nil, []byte{1}, 6); !errors.Is(err, ErrUnknownCodec) || !errors.Is(err, errors.ErrCompression) {
		t.Fatalf("unknown codec: %v", err)
	}
	if _, err := c.Compress(nil, []byte{1}, -1); !errors.Is(err, ErrUnknownCodec) {
		t.Fatalf("unknown codec: %v", err)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		codec Codec
		level int
		ok    bool
	}{
		{Gzip, 10, false}, {Gzip, -4, false}, {Snappy, 4, false}, {Snappy, -1, false},
		{LZ4, 18, false}, {LZ4, -1, false}, {Zstd, 23, false}, {Zstd, -131073, false},
		{None, 1, false}, {Codec(7), 1, false},
		{Gzip, 9, true}, {LZ4, 17, true}, {Zstd, -131072, true}, {Snappy, 3, true},
	} {
		_, err := NewCompressor(WithLevel(tc.codec, tc.level))
		if (err == nil) != tc.ok {
			t.Errorf("%s level %d: err %v", tc.codec, tc.level, err)
		}
	}
	if _, err := NewDecompressor(0); err == nil {
		t.Error("max size 0 accepted")
	}
	for c, want := range map[Codec]string{None: "none", Gzip: "gzip", Snappy: "snappy", LZ4: "lz4", Zstd: "zstd", 5: "codec(5)"} {
		if c.String() != want || c.Valid() != (want != "codec(5)") {
			t.Errorf("%d: %q valid %v", c, c.String(), c.Valid())
		}
	}
}

// TestConcurrent shares one Compressor and Decompressor between goroutines
// (run with -race).
func TestConcurrent(t *testing.T) {
	c, _ := NewCompressor()
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var buf, out []byte
			for i := range 30 {
				p := fmt.Appendf(nil, "goroutine %d iteration %d %s", g, i, strings.Repeat("x", i*100))
				codec := Codecs[(g+i)%len(Codecs)]
				var err error
				if buf, err = c.Compress(buf[:0], p, codec); err != nil {
					errs <- err
					return
				}
				if out, err = d.Decompress(out[:0], buf, codec); err != nil || !bytes.Equal(out, p) {
					errs <- fmt.Errorf("%s: %v", codec, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestDecompressAllocs checks the pooled steady state: decompressing into a
// reused buffer allocates nothing.
func TestDecompressAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	c, _ := NewCompressor()
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	p := payloads()["text"][:100<<10]
	for _, codec := range Codecs {
		comp, _ := c.Compress(nil, p, codec)
		buf, _ := d.Decompress(nil, comp, codec)
		allocs := testing.AllocsPerRun(50, func() {
			buf, _ = d.Decompress(buf[:0], comp, codec)
		})
		if allocs > 0 {
			t.Errorf("%s: %.1f allocations per decompress", codec, allocs)
		}
	}
}

// A zstd frame of a batch-sized input declares ZstdWindow, and encoding it
// with a fresh Compressor allocates about the window's history (the
// library's 8 MiB default window costs a 16 MiB history per encoder).
func TestZstdFrameWindow(t *testing.T) {
	src := benchPayload(1 << 20)
	var c *Compressor
	var out []byte
	alloc := allocated(func() {
		c, _ = NewCompressor()
		var err error
		if out, err = c.Compress(nil, src, Zstd); err != nil {
			t.Fatal(err)
		}
	})
	var h zstd.Header
	if err := h.Decode(out); err != nil {
		t.Fatal(err)
	}
	if h.WindowSize != ZstdWindow || h.SingleSegment {
		t.Errorf("frame window %d (single segment %v), want %d", h.WindowSize, h.SingleSegment, ZstdWindow)
	}
	// The history (1 MiB at least), the encoder's tables and the output.
	if alloc > 6<<20 {
		t.Errorf("compressing 1 MiB with a new Compressor allocated %d MiB", alloc>>20)
	}
	d, _ := NewDecompressor(2 << 20)
	back, err := d.Decompress(nil, out, Zstd)
	if err != nil || !bytes.Equal(back, src) {
		t.Fatalf("round trip: %v", err)
	}
}
