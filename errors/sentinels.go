package errors

import "github.com/twmb/franz-go/pkg/kerr"

// kepoch's own identities: conditions that no single Kafka error code names.
// Where a condition refines a Kafka code, its sentinel wraps that code, so
// matching the general code still works:
//
//	errors.Is(ErrOffsetBelowLogStart, ErrOffsetOutOfRange) == true
//	errors.Is(ErrOffsetOutOfRange, ErrOffsetBelowLogStart) == false
var (
	// ErrLogTruncation: the partition's log was rewritten below the
	// consumer's position (KIP-320). *LogTruncationError matches it and
	// carries the divergence points; it also matches ErrOffsetOutOfRange,
	// as Java's LogTruncationException extends OffsetOutOfRangeException.
	ErrLogTruncation = New("kepoch: log truncation detected")

	// ErrOffsetBelowLogStart: the position is below the partition's log
	// start offset; retention or DeleteRecords removed the records, the
	// log was not truncated. Wraps ErrOffsetOutOfRange.
	ErrOffsetBelowLogStart error = &refinement{"kepoch: offset below the log start offset (records deleted by retention)", kerr.OffsetOutOfRange}

	// ErrLeaderUnreachable: a partition's leader has not answered its
	// fetches for a while (a connection refused, reset or never answered,
	// again and again). The client keeps trying, and fetches as soon as
	// the leader answers or metadata names another; the error only says
	// that nothing is read meanwhile. Wraps ErrNetworkException, so it is
	// retriable.
	ErrLeaderUnreachable error = &refinement{"kepoch: partition leader unreachable", kerr.NetworkException}

	// ErrTopicIDChanged: the topic was deleted and recreated under the
	// same name (its topic ID changed). Positions, leader epochs and
	// producer sequences of the old incarnation mean nothing in the new
	// one.
	ErrTopicIDChanged = New("kepoch: topic ID changed (topic recreated)")

	// ErrMetadataTimeout: a topic's metadata (its partitions) did not
	// arrive within the wait its caller allows (the producer's
	// MetadataWait): the topic does not exist and is not created, or no
	// broker answers for it. The error that carries it also wraps the
	// topic's last error, such as ErrUnknownTopicOrPartition.
	ErrMetadataTimeout = New("kepoch: topic metadata not available in time")

	// ErrClosed: the object was closed; the call did nothing.
	ErrClosed = New("kepoch: closed")

	// ErrUnknownOutcome: a produce request may or may not have been
	// applied (a timeout or a broken connection after the request was
	// written). It is never resent as a new write; see ProduceNotApplied.
	// A consumer's offset commit that fails the same way matches it too:
	// the offsets may have been stored.
	ErrUnknownOutcome = New("kepoch: produce outcome unknown")

	// ErrUnvalidated: a stored position could not be validated against the
	// log because the leader epoch of the record before it is not known
	// (a consumer start from an offset and an epoch history that does not
	// cover that record). The partition does not fetch from it until the
	// application seeks.
	ErrUnvalidated = New("kepoch: position cannot be validated (epoch of the record before it unknown)")

	// ErrNotSent: the request was never written to a connection, so the
	// broker cannot have acted on it. Wrap it to tell callers (and
	// ProduceNotApplied) so.
	ErrNotSent = New("kepoch: request not sent")

	// ErrInvalidOption: a constructor (a package's New or NewPartition,
	// a Config's Validate) refused one of its options. The error that
	// carries it names the option and the refused value:
	//
	//	consumer: option FetchMaxBytes: -1 is not positive: kepoch: invalid option
	//
	// Nothing was created; the same options are refused again.
	ErrInvalidOption = New("kepoch: invalid option")

	// ErrInvalidArgument: a call refused one of its arguments (an empty
	// topic, a negative offset or partition, a nil context, a nil record
	// or callback where one is needed, a partitioner's answer outside the
	// topic's partitions). The error that carries it names the argument
	// and the refused value; the call did nothing. The same call is
	// refused again.
	ErrInvalidArgument = New("kepoch: invalid argument")
)

// refinement is a kepoch sentinel that narrows a Kafka code.
type refinement struct {
	msg  string
	code *kerr.Error
}

func (r *refinement) Error() string { return r.msg }
func (r *refinement) Unwrap() error { return r.code }
