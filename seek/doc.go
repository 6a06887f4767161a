// Package seek is the pure, I/O-free per-partition position and
// epoch-lineage state machine of the kepoch consumer, and the SeekToNearest
// resolution of KIP-320.
//
// It has no network, no goroutines and no clock reads: the same state and the
// same event always give the same actions. The consumer turns broker answers
// into events, steps the machine, and turns the actions it returns into
// requests.
package seek
