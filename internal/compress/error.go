package compress

import (
	"strconv"

	"github.com/kepoch/kepoch/errors"
)

// ErrTooLarge is the cause of a *Error whose output would exceed the
// Decompressor's maximum size: a batch bigger than allowed, or a
// decompression bomb.
var ErrTooLarge = errors.New("kepoch: decompressed size exceeds the limit")

// ErrUnknownCodec is the cause of a *Error for a codec number Kafka does not
// define.
var ErrUnknownCodec = errors.New("kepoch: unknown compression codec")

// Error is the error every Compressor and Decompressor method returns. It
// matches errors.ErrCompression and its cause under errors.Is.
type Error struct {
	// Op is "compress" or "decompress".
	Op string
	// Codec is the codec that failed.
	Codec Codec
	// Limit is the maximum decompressed size when Err is ErrTooLarge, and 0
	// otherwise.
	Limit int
	// Err is the cause: ErrTooLarge, ErrUnknownCodec or the codec
	// library's error.
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	s := "kepoch: " + e.Codec.String() + " " + e.Op + ": " + e.Err.Error()
	if e.Limit > 0 {
		s += " (limit " + strconv.Itoa(e.Limit) + " bytes)"
	}
	return s
}

// Unwrap returns errors.ErrCompression and the cause, so that errors.Is
// matches either.
func (e *Error) Unwrap() []error { return []error{errors.ErrCompression, e.Err} }

func newError(op string, c Codec, err error) *Error {
	return &Error{Op: op, Codec: c, Err: err}
}
