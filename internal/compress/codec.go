package compress

import "strconv"

// Codec is a compression codec as numbered in the low three bits of a
// record batch's attributes.
type Codec int8

// The codecs Kafka defines. Values 5 to 7 are unassigned.
const (
	None   Codec = 0
	Gzip   Codec = 1
	Snappy Codec = 2
	LZ4    Codec = 3
	Zstd   Codec = 4
)

// Codecs lists every codec, None first.
var Codecs = [...]Codec{None, Gzip, Snappy, LZ4, Zstd}

// Valid reports whether c is one of the codecs Kafka defines.
func (c Codec) Valid() bool { return c >= None && c <= Zstd }

// String returns the Kafka name of the codec ("none", "gzip", "snappy",
// "lz4", "zstd"), or "codec(N)" for an unassigned value.
func (c Codec) String() string {
	switch c {
	case None:
		return "none"
	case Gzip:
		return "gzip"
	case Snappy:
		return "snappy"
	case LZ4:
		return "lz4"
	case Zstd:
		return "zstd"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}
