// Package internal groups kepoch's private building blocks: the record-batch
// codec (internal/batch), compression (internal/compress) and wire helpers.
// Nothing here is part of the public API.
package internal
