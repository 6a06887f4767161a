// Package errors holds kepoch's error identities and their classification.
//
// It forwards the standard library's Is, As, AsType, Unwrap, Join and New,
// so a kepoch file (or a user's) imports this package instead of the
// standard one:
//
//	import "github.com/kepoch/kepoch/errors"
//
//	if errors.Is(err, errors.ErrLogTruncation) { … }
//
// # Identities
//
// Kafka error codes are franz-go's *kerr.Error values themselves, not copies:
// ErrFencedLeaderEpoch == kerr.FencedLeaderEpoch, and FromCode(74) returns
// that same pointer. errors.Is(err, kerr.FencedLeaderEpoch) therefore keeps
// working on every error kepoch returns, and errors.As with a *kerr.Error
// target yields the code, its name and description. FromCode keeps codes that
// kerr does not know as *UnknownCodeError instead of folding them into
// UNKNOWN_SERVER_ERROR. Codes and Info list every code with its name, kepoch's
// retriability and a one-line meaning.
//
// Conditions no single code names are kepoch sentinels: ErrLogTruncation,
// ErrTopicIDChanged, ErrClosed, ErrUnknownOutcome, ErrNotSent, ErrInvalidOption
// and ErrInvalidArgument (misuse: an option or a call's argument refused,
// the error naming it and its value), and the codec's
// ErrCorruptBatch, ErrCompression, ErrUnsupportedMagic. A sentinel that
// refines a code wraps it: ErrOffsetBelowLogStart unwraps to
// ErrOffsetOutOfRange.
//
// # Types
//
// *LogTruncationError reports KIP-320 truncation: per partition, the consumed
// position and the divergence point (or Unknown when the leader answered
// -1/-1). It matches both ErrLogTruncation and ErrOffsetOutOfRange.
// *PartitionError{Op, Topic, Partition, Offset, LeaderEpoch, Err} adds the
// partition context to any of the above, like io/fs.PathError.
//
// # Classification
//
// IsRetriable answers "can the same operation succeed if tried again", with
// its table in its doc. ProduceNotApplied answers "did the broker certainly
// not append this produce", which is what decides whether a failed write may
// be resent: a write the broker may already have applied is resent only
// unchanged (same producer ID, epoch and sequence, so the broker deduplicates
// it), never rebuilt.
//
// The package imports only the standard library and kerr.
package errors
