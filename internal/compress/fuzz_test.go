package compress

import (
	"bytes"
	"testing"

	"github.com/kepoch/kepoch/errors"
)

// FuzzDecompress feeds arbitrary payloads to every codec and checks: no
// panic; an error is a *Error matching errors.ErrCompression, leaves dst
// untouched and appends nothing; success appends at most the limit, keeps
// dst's prefix, is deterministic, and the output survives a compress /
// decompress round trip.
func FuzzDecompress(f *testing.F) {
	c, err := NewCompressor()
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range [][]byte{{}, []byte("hello, hello, hello kafka"), bytes.Repeat([]byte("ab"), 3000), benchPayload(5000)} {
		for _, codec := range Codecs {
			comp, err := c.Compress(nil, p, codec)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(codec), comp)
		}
		f.Add(uint8(Snappy), xerial(p, 700))
	}
	f.Add(uint8(Zstd), []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58, 0x00, 0x00})
	f.Add(uint8(7), []byte{1, 2, 3})
	const limit = 256 << 10
	d, err := NewDecompressor(limit)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, codecByte uint8, src []byte) {
		codec := Codec(codecByte % 8)
		prefix := []byte("prefix")
		out, err := d.Decompress(bytes.Clone(prefix), src, codec)
		if err != nil {
			var ce *Error
			if !errors.Is(err, errors.ErrCompression) || !errors.As(err, &ce) || ce.Codec != codec || ce.Op != "decompress" {
				t.Fatalf("error %v (%T) is not a decompress *Error for %s", err, err, codec)
			}
			if !bytes.Equal(out, prefix) {
				t.Fatalf("failed call returned %d bytes, want the untouched prefix", len(out))
			}
			if errors.Is(err, ErrTooLarge) != (ce.Limit == limit) {
				t.Fatalf("limit %d on %v", ce.Limit, err)
			}
			return
		}
		if !codec.Valid() {
			t.Fatalf("codec %d decoded", codec)
		}
		if !bytes.HasPrefix(out, prefix) || len(out)-len(prefix) > limit {
			t.Fatalf("output of %d bytes (prefix kept %v)", len(out)-len(prefix), bytes.HasPrefix(out, prefix))
		}
		plain := out[len(prefix):]
		again, err := d.Decompress(nil, src, codec)
		if err != nil || !bytes.Equal(again, plain) {
			t.Fatalf("second decompression differs: %v", err)
		}
		comp, err := c.Compress(nil, plain, codec)
		if err != nil {
			t.Fatal(err)
		}
		back, err := d.Decompress(nil, comp, codec)
		if err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("round trip of the output fails: %v", err)
		}
	})
}
