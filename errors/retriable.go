package errors

import (
	"context"
	"io"
	"net"
	"os"

	"github.com/twmb/franz-go/pkg/kerr"
)

// IsRetriable reports whether the operation that failed with err can succeed
// if it is attempted again unchanged, possibly after a metadata refresh and a
// backoff. It never consults message text. Retriable does NOT mean "safe to
// resend a produce": see ProduceNotApplied.
//
// The table, checked at each level of err's tree from the outside in (the
// first level that decides wins):
//
//	error                                           retriable  why
//	nil                                             no         nothing failed
//	context.Canceled, context.DeadlineExceeded      no         the caller gave up
//	ErrClosed, ErrLogTruncation,                    no         need a decision by the application
//	  *LogTruncationError, ErrTopicIDChanged,
//	  ErrOffsetBelowLogStart, ErrUnknownOutcome,
//	  ErrCorruptBatch, ErrCompression,
//	  ErrUnsupportedMagic
//	ErrInvalidOption, ErrInvalidArgument            no         the same call is refused again
//	a value with a Retriable() bool method          its answer lets other kepoch packages classify their own errors
//	*kerr.Error (a Kafka code)                      kerr's flag, except the overrides below
//	*UnknownCodeError                               no         unknown meaning
//	io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,     yes        broken connection; reconnect and retry
//	  *os.SyscallError (reset, refused, broken
//	  pipe, unreachable…), a net.Error whose
//	  Timeout() is true (I/O deadlines)
//	an error wrapping several (errors.Join)         yes only if every wrapped error is retriable
//	anything else                                   no
//
// Kafka codes where kepoch departs from kerr's Retriable flag:
//
//	CORRUPT_MESSAGE (2)          no   kerr: yes. kepoch encodes batches itself; a resend carries the same bytes
//	CONCURRENT_TRANSACTIONS (51) yes  kerr: no. The previous transaction is still completing; Java retries it
//	ELECTION_NOT_NEEDED (84)     no   kerr: yes. The answer is final: the preferred leader already leads
//
// Codes kepoch's consumer and producer meet, as classified (kerr's flag):
//
//	retriable: UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
//	  REQUEST_TIMED_OUT, REPLICA_NOT_AVAILABLE, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS,
//	  NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH (after a
//	  metadata refresh), UNKNOWN_LEADER_EPOCH (same broker, after a backoff),
//	  OFFSET_NOT_AVAILABLE, UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID, coordinator errors
//	not retriable: OFFSET_OUT_OF_RANGE, OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and
//	  INVALID_PRODUCER_EPOCH (they need a producer epoch bump, KIP-360, not a plain resend),
//	  PRODUCER_FENCED, INVALID_TXN_STATE, TRANSACTION_ABORTABLE, authorization errors,
//	  MESSAGE_TOO_LARGE, INVALID_RECORD, UNKNOWN_SERVER_ERROR
func IsRetriable(err error) bool {
	if err == nil || Is(err, context.Canceled) || Is(err, context.DeadlineExceeded) {
		return false
	}
	for {
		if verdict, decided := retriableAt(err); decided {
			return verdict
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
			if err == nil {
				return false
			}
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			some := false
			for _, e := range errs {
				if e == nil {
					continue
				}
				if !IsRetriable(e) {
					return false
				}
				some = true
			}
			return some
		default:
			return false
		}
	}
}

// retriableAt classifies err itself, without unwrapping.
func retriableAt(err error) (verdict, decided bool) {
	switch err {
	case context.Canceled, context.DeadlineExceeded:
		return false, true
	case ErrClosed, ErrLogTruncation, ErrTopicIDChanged, ErrOffsetBelowLogStart, ErrUnknownOutcome,
		ErrCorruptBatch, ErrCompression, ErrUnsupportedMagic, ErrInvalidOption, ErrInvalidArgument:
		return false, true
	case io.EOF, io.ErrUnexpectedEOF, net.ErrClosed:
		return true, true
	}
	switch e := err.(type) {
	case *LogTruncationError:
		return false, true
	case interface{ Retriable() bool }:
		return e.Retriable(), true
	case *kerr.Error:
		return codeRetriable(e), true
	case *UnknownCodeError:
		return false, true
	case *os.SyscallError:
		return true, true
	case net.Error:
		if e.Timeout() {
			return true, true
		}
	}
	return false, false
}

// codeRetriable is kepoch's classification of a Kafka code.
func codeRetriable(e *kerr.Error) bool {
	switch e.Code {
	case kerr.CorruptMessage.Code, kerr.ElectionNotNeeded.Code:
		return false
	case kerr.ConcurrentTransactions.Code:
		return true
	}
	return e.Retriable
}

// ProduceNotApplied reports whether err proves that the broker did not
// append any record of the produce request that failed with it.
//
// This is the produce counterpart of database/sql/driver.ErrBadConn's rule.
// A write the broker may already have applied is never blindly retried:
//
//   - ProduceNotApplied(err) is true: the batch was rejected before the
//     append (or never sent). It may be resent, or rebuilt, when IsRetriable
//     also holds or after the action its code calls for (refresh metadata,
//     bump the producer epoch and restart sequences, KIP-360).
//   - ProduceNotApplied(err) is false: the records may be in the log (a
//     timeout waiting for replication, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a
//     connection that broke after the request was written, a cancelled
//     context, an unknown error). An idempotent producer may resend the
//     batch only unchanged (same producer ID, epoch, base sequence and
//     records), so the broker deduplicates it; it must not assign those
//     records new sequence numbers or a new epoch while the first attempt
//     is unresolved. Anything else reports ErrUnknownOutcome to the caller.
//
// It is true for ErrNotSent, for a dial error (*net.OpError with Op "dial",
// nothing was written), and for these codes, which a broker returns before
// appending: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
// FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_ENOUGH_REPLICAS,
// CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
// INVALID_RECORD, INVALID_TIMESTAMP, INVALID_REQUIRED_ACKS,
// INVALID_TOPIC_EXCEPTION, UNSUPPORTED_FOR_MESSAGE_FORMAT,
// UNSUPPORTED_COMPRESSION_TYPE, UNSUPPORTED_VERSION,
// OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID,
// INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
// INVALID_TXN_STATE, TRANSACTION_ABORTABLE, TOPIC_AUTHORIZATION_FAILED,
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED.
// DUPLICATE_SEQUENCE_NUMBER is not in the list: it means the batch is
// already in the log. Nor is NOT_LEADER_OR_FOLLOWER: a leader that
// appended the batch and lost its leadership while waiting for the
// replicas (acks=all) answers it, and the new leader may hold the batch
// (KAFKA-13574). For an error wrapping several, it is true only if it
// holds for each.
func ProduceNotApplied(err error) bool {
	if err == nil {
		return false
	}
	for {
		if verdict, decided := notAppliedAt(err); decided {
			return verdict
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
			if err == nil {
				return false
			}
		case interface{ Unwrap() []error }:
			some := false
			for _, e := range u.Unwrap() {
				if e == nil {
					continue
				}
				if !ProduceNotApplied(e) {
					return false
				}
				some = true
			}
			return some
		default:
			return false
		}
	}
}

func notAppliedAt(err error) (verdict, decided bool) {
	if err == ErrNotSent {
		return true, true
	}
	switch e := err.(type) {
	case *kerr.Error:
		_, ok := rejectedBeforeAppend[e.Code]
		return ok, true
	case *UnknownCodeError:
		return false, true
	case *net.OpError:
		if e.Op == "dial" {
			return true, true
		}
	}
	return false, false
}

// rejectedBeforeAppend lists the produce error codes a broker answers
// without appending the batch.
var rejectedBeforeAppend = func() map[int16]struct{} {
	m := make(map[int16]struct{})
	for _, e := range []*kerr.Error{
		kerr.UnknownTopicOrPartition, kerr.UnknownTopicID,
		kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch, kerr.NotEnoughReplicas,
		kerr.CorruptMessage, kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.InvalidTimestamp, kerr.InvalidRequiredAcks, kerr.InvalidTopicException,
		kerr.UnsupportedForMessageFormat, kerr.UnsupportedCompressionType, kerr.UnsupportedVersion,
		kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID, kerr.InvalidProducerEpoch,
		kerr.ProducerFenced, kerr.InvalidProducerIDMapping, kerr.InvalidTxnState,
		kerr.TransactionAbortable, kerr.TopicAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed,
	} {
		m[e.Code] = struct{}{}
	}
	return m
}()
