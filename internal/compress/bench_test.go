package compress

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchPayload is log-like text of about n bytes.
func benchPayload(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"user", "event", "click", "view", "purchase", "session", "\"ts\":", "{", "}", "amount", "region", "eu-west-1"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		if rng.IntN(4) == 0 {
			b = fmt.Appendf(b, "%d", rng.IntN(1_000_000))
		} else {
			b = append(b, words[rng.IntN(len(words))]...)
		}
		b = append(b, ' ')
	}
	return b[:n]
}

func BenchmarkDecompress(b *testing.B) {
	c, _ := NewCompressor()
	d, _ := NewDecompressor(DefaultMaxDecompressedSize)
	for _, codec := range Codecs[1:] {
		for _, size := range []int{16 << 10, 128 << 10, 1 << 20} {
			p := benchPayload(size)
			comp, _ := c.Compress(nil, p, codec)
			b.Run(fmt.Sprintf("%s/%dKiB", codec, size>>10), func(b *testing.B) {
				var buf []byte
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if buf, err = d.Decompress(buf[:0], comp, codec); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkCompress(b *testing.B) {
	c, _ := NewCompressor()
	for _, codec := range Codecs[1:] {
		for _, size := range []int{16 << 10, 128 << 10} {
			p := benchPayload(size)
			b.Run(fmt.Sprintf("%s/%dKiB", codec, size>>10), func(b *testing.B) {
				var buf []byte
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if buf, err = c.Compress(buf[:0], p, codec); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
