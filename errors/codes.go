package errors

import (
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Kafka error codes are the franz-go kerr values themselves: FromCode returns
// the *kerr.Error for a code, and the Err* variables below are those same
// pointers. So errors.Is(err, ErrFencedLeaderEpoch) and
// errors.Is(err, kerr.FencedLeaderEpoch) are the same test, and
// errors.As(err, &ke) with ke a *kerr.Error yields the code, its Kafka name
// (ke.Message) and description.
//
// Only the codes kepoch's consumer, producer and metadata packages name are
// re-exported; every other code is reachable through FromCode, Info and
// Codes.
var (
	// Consumer position and leader epochs (KIP-320).

	ErrOffsetOutOfRange    = kerr.OffsetOutOfRange      // 1: offset below log start or above the log end
	ErrFencedLeaderEpoch   = kerr.FencedLeaderEpoch     // 74: our leader epoch is older than the broker's; refresh metadata
	ErrUnknownLeaderEpoch  = kerr.UnknownLeaderEpoch    // 75: our leader epoch is newer than the broker's; retry the same broker
	ErrOffsetNotAvailable  = kerr.OffsetNotAvailable    // 78: new leader's high watermark not caught up yet; retry
	ErrNotLeader           = kerr.NotLeaderForPartition // 6: NOT_LEADER_OR_FOLLOWER; refresh metadata
	ErrLeaderNotAvailable  = kerr.LeaderNotAvailable    // 5: partition has no leader right now
	ErrReplicaNotAvailable = kerr.ReplicaNotAvailable   // 9: a replica is not available
	ErrKafkaStorageError   = kerr.KafkaStorageError     // 56: the log directory of the replica is offline

	// Topics.

	ErrUnknownTopicOrPartition = kerr.UnknownTopicOrPartition  // 3: the broker does not host this topic-partition
	ErrUnknownTopicID          = kerr.UnknownTopicID           // 100: the broker does not know this topic ID
	ErrInconsistentTopicID     = kerr.InconsistentTopicID      // 103: the log's topic ID differs from the request's
	ErrInvalidTopic            = kerr.InvalidTopicException    // 17: invalid topic name, or a write to an internal topic
	ErrTopicAuthorization      = kerr.TopicAuthorizationFailed // 29: not authorized for the topic

	// Produce, idempotence and transactions (KIP-360).

	ErrProducerFenced           = kerr.ProducerFenced                     // 90: a newer producer owns the transactional ID; fatal
	ErrUnknownProducerID        = kerr.UnknownProducerID                  // 59: the broker has no state for the producer ID
	ErrOutOfOrderSequence       = kerr.OutOfOrderSequenceNumber           // 45: sequence gap for (producer ID, epoch, partition)
	ErrDuplicateSequence        = kerr.DuplicateSequenceNumber            // 46: duplicate sequence (current brokers answer NONE instead)
	ErrInvalidProducerEpoch     = kerr.InvalidProducerEpoch               // 47: producer epoch older than the broker's
	ErrInvalidProducerIDMapping = kerr.InvalidProducerIDMapping           // 49: transactional ID unknown, expired or remapped
	ErrInvalidTxnState          = kerr.InvalidTxnState                    // 48: transactional operation in the wrong state
	ErrConcurrentTransactions   = kerr.ConcurrentTransactions             // 51: previous transaction still completing; retry
	ErrTransactionAbortable     = kerr.TransactionAbortable               // 120: abort the transaction, then continue (KIP-890)
	ErrTransactionalIDAuth      = kerr.TransactionalIDAuthorizationFailed // 53: not authorized for the transactional ID
	ErrNotEnoughReplicas        = kerr.NotEnoughReplicas                  // 19: ISR below min.insync.replicas; rejected before append
	ErrNotEnoughReplicasAfter   = kerr.NotEnoughReplicasAfterAppend       // 20: appended, but the ISR shrank below the minimum
	ErrRequestTimedOut          = kerr.RequestTimedOut                    // 7: the broker timed out; a produce may have been appended
	ErrMessageTooLarge          = kerr.MessageTooLarge                    // 10: a record batch exceeds the size limit
	ErrRecordListTooLarge       = kerr.RecordListTooLarge                 // 18: the batch exceeds the segment size
	ErrCorruptMessage           = kerr.CorruptMessage                     // 2: CRC or size check failed on the broker
	ErrInvalidRecord            = kerr.InvalidRecord                      // 87: the broker's record validation failed
	ErrInvalidRequiredAcks      = kerr.InvalidRequiredAcks                // 21: acks is not -1, 0 or 1

	// Groups and offsets.

	ErrCoordinatorNotAvailable   = kerr.CoordinatorNotAvailable   // 15
	ErrNotCoordinator            = kerr.NotCoordinator            // 16
	ErrCoordinatorLoadInProgress = kerr.CoordinatorLoadInProgress // 14
	ErrIllegalGeneration         = kerr.IllegalGeneration         // 22
	ErrUnknownMemberID           = kerr.UnknownMemberID           // 25
	ErrRebalanceInProgress       = kerr.RebalanceInProgress       // 27
	ErrFencedInstanceID          = kerr.FencedInstanceID          // 82
	ErrUnstableOffsetCommit      = kerr.UnstableOffsetCommit      // 88
	ErrOffsetMetadataTooLarge    = kerr.OffsetMetadataTooLarge    // 12
	ErrGroupAuthorization        = kerr.GroupAuthorizationFailed  // 30

	// Transport and cluster.

	ErrUnknownServerError   = kerr.UnknownServerError         // -1: unexpected server error
	ErrNetworkException     = kerr.NetworkException           // 13: the server disconnected before answering
	ErrBrokerNotAvailable   = kerr.BrokerNotAvailable         // 8
	ErrUnsupportedVersion   = kerr.UnsupportedVersion         // 35
	ErrClusterAuthorization = kerr.ClusterAuthorizationFailed // 31
	ErrThrottlingQuota      = kerr.ThrottlingQuotaExceeded    // 89
	ErrRebootstrapRequired  = kerr.RebootstrapRequired        // 129
)

// UnknownCodeError is returned by FromCode for an error code that franz-go's
// kerr table does not know (a code newer than the pinned franz-go). It keeps
// the code; it does not match ErrUnknownServerError, because the broker did
// not send -1. It is not retriable.
type UnknownCodeError struct {
	Code int16
}

func (e *UnknownCodeError) Error() string {
	return fmt.Sprintf("UNKNOWN_ERROR_CODE_%d: error code unknown to this client", e.Code)
}

// FromCode returns the error for a Kafka error code: nil for 0, the
// *kerr.Error value for a known code, and an *UnknownCodeError otherwise.
// Unlike kerr.ErrorForCode it never turns an unknown code into
// UNKNOWN_SERVER_ERROR.
func FromCode(code int16) error {
	if code == 0 {
		return nil
	}
	if e, ok := known[code]; ok {
		return e
	}
	return &UnknownCodeError{Code: code}
}

// CodeOf returns the Kafka error code carried by err: the code of the first
// *kerr.Error or *UnknownCodeError in its tree. It returns 0, true for nil
// and 0, false for an error that carries no Kafka code (a transport error, a
// kepoch sentinel without a code).
func CodeOf(err error) (int16, bool) {
	if err == nil {
		return 0, true
	}
	if ke, ok := AsType[*kerr.Error](err); ok {
		return ke.Code, true
	}
	if ue, ok := AsType[*UnknownCodeError](err); ok {
		return ue.Code, true
	}
	return 0, false
}

// CodeInfo describes one Kafka error code.
type CodeInfo struct {
	Code      int16  // the wire code
	Name      string // Kafka's name, e.g. "FENCED_LEADER_EPOCH"
	Retriable bool   // kepoch's classification, the same as IsRetriable(Err)
	Meaning   string // one line
	Err       error  // the value FromCode returns (a *kerr.Error)
}

// Info describes a known Kafka error code; false for 0 and unknown codes.
func Info(code int16) (CodeInfo, bool) {
	e, ok := known[code]
	if !ok {
		return CodeInfo{}, false
	}
	return infoOf(e), true
}

// Codes describes every Kafka error code this build knows, in ascending code
// order. The table is franz-go's kerr table; Retriable is kepoch's
// classification (see IsRetriable for where it departs from kerr).
func Codes() []CodeInfo {
	out := make([]CodeInfo, 0, len(known))
	for _, e := range known {
		out = append(out, infoOf(e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
}

func infoOf(e *kerr.Error) CodeInfo {
	return CodeInfo{Code: e.Code, Name: e.Message, Retriable: codeRetriable(e), Meaning: e.Description, Err: e}
}

// known maps every code kerr knows to its value. kerr's own map is
// unexported; kerr.ErrorForCode answers UNKNOWN_SERVER_ERROR (-1) for a code
// it does not know, so a code is known when the answer carries that code.
var known = func() map[int16]*kerr.Error {
	m := make(map[int16]*kerr.Error)
	for c := int32(-1); c <= 1<<12; c++ {
		if c == 0 {
			continue
		}
		if ke, ok := kerr.ErrorForCode(int16(c)).(*kerr.Error); ok && ke.Code == int16(c) {
			m[int16(c)] = ke
		}
	}
	return m
}()
