package batch

import (
	"encoding/binary"
	"math/bits"
)

// Kafka's varints are zigzag-encoded base-128 varints: at most 5 bytes for
// an int32 ("varint") and 10 for an int64 ("varlong"). The readers below
// take a buffer and a position and return the value and the next position,
// or a negative position: errTruncated when the buffer ends inside the
// varint, errOverflow when it is longer than the type allows or its value
// does not fit.

const (
	errTruncated = -1
	errOverflow  = -2
)

// readVarint reads an int32 varint at b[p:]. One- and two-byte varints (a
// record's lengths and deltas, mostly) are read in line.
func readVarint(b []byte, p int) (int32, int) {
	if p+1 < len(b) {
		c, d := b[p], b[p+1]
		if c < 0x80 {
			return int32(c>>1) ^ -int32(c&1), p + 1
		}
		if d < 0x80 {
			u := uint32(c&0x7f) | uint32(d)<<7
			return int32(u>>1) ^ -int32(u&1), p + 2
		}
	}
	return readVarintSlow(b, p)
}

func readVarintSlow(b []byte, p int) (int32, int) {
	var x uint64
	for i := 0; i < 5; i++ {
		if p+i >= len(b) {
			return 0, errTruncated
		}
		c := b[p+i]
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if x > 0xffffffff {
				return 0, errOverflow
			}
			u := uint32(x)
			return int32(u>>1) ^ -int32(u&1), p + i + 1
		}
	}
	return 0, errOverflow
}

// readVarlong reads an int64 varint at b[p:].
func readVarlong(b []byte, p int) (int64, int) {
	if p < len(b) {
		if c := b[p]; c < 0x80 {
			return int64(c>>1) ^ -int64(c&1), p + 1
		}
	}
	return readVarlongSlow(b, p)
}

func readVarlongSlow(b []byte, p int) (int64, int) {
	if p >= len(b) {
		return 0, errTruncated
	}
	u, n := binary.Uvarint(b[p:])
	switch {
	case n == 0:
		return 0, errTruncated
	case n < 0:
		return 0, errOverflow
	}
	return int64(u>>1) ^ -int64(u&1), p + n
}

// varintSize returns the encoded size of v as a zigzag varint.
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}

// bytesFieldSize returns the encoded size of a nullable byte field.
func bytesFieldSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}

// appendBytesField appends a nullable byte field: its length (-1 for nil)
// and its bytes.
func appendBytesField(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 1) // zigzag(-1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
