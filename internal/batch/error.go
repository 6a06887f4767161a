package batch

import (
	"strconv"

	"github.com/kepoch/kepoch/errors"
)

// DecodeError reports bytes the Iterator refuses to decode. Err is
// errors.ErrCorruptBatch, errors.ErrUnsupportedMagic or a *compress.Error
// (which matches errors.ErrCompression), so errors.Is classifies it.
type DecodeError struct {
	// Topic and Partition are the Iterator's Options.
	Topic     string
	Partition int32
	// Offset is the base offset of the batch that failed (as read from
	// its header, which may be part of the corruption).
	Offset int64
	// Position is the byte position of the batch in the decoded buffer.
	Position int
	// Reason says what is wrong, for people.
	Reason string
	// Err is the identity of the failure.
	Err error
}

// Error implements error, naming topic, partition and offset.
func (e *DecodeError) Error() string {
	return "kepoch: decode " + e.Topic + "[" + strconv.Itoa(int(e.Partition)) +
		"] at offset " + strconv.FormatInt(e.Offset, 10) +
		" (byte " + strconv.Itoa(e.Position) + "): " + e.Reason + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *DecodeError) Unwrap() error { return e.Err }

var errCorrupt = errors.ErrCorruptBatch
