// Package compress owns the compression codecs of Kafka record batches: none,
// gzip, snappy, lz4 and zstd, with the codec numbers of the batch attributes
// (0 to 4).
//
// A Compressor appends the compressed form of a byte slice to a caller's
// buffer; a Decompressor appends the decompressed form, never writing more
// than its configured maximum (a bound against decompression bombs). Both are
// safe for concurrent use and pool their codec state (gzip, lz4 and zstd
// readers and writers), so steady-state calls allocate nothing beyond the
// growth of the caller's buffer.
//
// Wire formats: gzip is RFC 1952; snappy is written as one raw snappy block
// and read both raw and in the xerial framing ("\x82SNAPPY\x00" header, then
// big-endian length-prefixed raw blocks) that the Java client and franz-go's
// streaming producer write; lz4 is the LZ4 frame format; zstd is the zstd
// frame format. Our zstd frames carry no content checksum and zstd checksums
// are not verified, like snappy blocks which have none: a record batch's
// CRC-32C covers the compressed bytes and is checked before decompression.
//
// Every error returned is a *Error, which matches errors.ErrCompression under
// errors.Is and names the codec and the direction; an output past the limit
// also matches ErrTooLarge.
//
// The driving loop, as the record batch codec uses it:
//
//	c, _ := compress.NewCompressor(compress.WithLevel(compress.Zstd, 3))
//	payload, err := c.Compress(buf[:0], records, compress.Zstd)
//
//	d, _ := compress.NewDecompressor(compress.DefaultMaxDecompressedSize)
//	scratch, err = d.Decompress(scratch[:0], payload, compress.Zstd)
package compress
