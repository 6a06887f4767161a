package batch

import (
	"encoding/binary"
	"math"
	"testing"
)

// readVarint's in-line paths agree with the general reader on every
// encoding of one and two bytes, on samples of longer ones, and on every
// truncation and offset of them.
func TestReadVarintFastPaths(t *testing.T) {
	check := func(b []byte, p int) {
		t.Helper()
		v, q := readVarint(b, p)
		wv, wq := readVarintSlow(b, p)
		if v != wv || q != wq {
			t.Fatalf("readVarint(% x, %d) = %d, %d; want %d, %d", b, p, v, q, wv, wq)
		}
	}
	var vals []int64
	for v := int64(-20000); v <= 20000; v++ { // every 1-, 2- and some 3-byte encodings
		vals = append(vals, v)
	}
	vals = append(vals, math.MaxInt32, math.MinInt32, math.MaxInt32+1, math.MinInt64)
	for _, v := range vals {
		enc := binary.AppendVarint([]byte{0xff}, v) // behind a byte, read at 1
		for end := 1; end <= len(enc); end++ {
			check(enc[:end], 1)
		}
		check(append(enc, 0x01, 0x80), 1)
	}
	// Continuation bytes throughout, and a second byte that continues.
	check([]byte{0x80, 0x80}, 0)
	check([]byte{0x81, 0x81, 0x01}, 0)
	check([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0)
	check([]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 0)
}
