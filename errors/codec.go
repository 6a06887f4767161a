package errors

// Identities for bytes that kepoch refuses to decode. The record-batch codec
// wraps them in an error naming topic, partition and offset.
var (
	// ErrCorruptBatch: a record batch whose bytes are inconsistent (CRC
	// mismatch, a length past the buffer, a negative length, a varint
	// overflow, a record count that does not match the records).
	ErrCorruptBatch = New("kepoch: corrupt record batch")
	// ErrCompression: a compressed payload that does not decompress, or an
	// unknown compression codec.
	ErrCompression = New("kepoch: bad compressed payload")
	// ErrUnsupportedMagic: a message set whose magic byte kepoch does not
	// decode (magic 0 and 1 are rejected, never misread).
	ErrUnsupportedMagic = New("kepoch: unsupported record batch magic")
)
