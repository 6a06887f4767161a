package seek

import (
	"strconv"

	"github.com/kepoch/kepoch/errors"
)

// Code is a Kafka error code as it appears on the wire (an int16). The
// consumer copies partition error codes from Fetch, OffsetForLeaderEpoch and
// ListOffsets answers into events unchanged, and maps a request that failed
// as a whole (timeout, broken connection) to CodeRequestTimedOut or
// CodeNetworkException. The constants name the codes the machine treats
// specially; any other Kafka code is retried after a metadata refresh, and
// a code this client does not know (errors.Info) halts the partition.
type Code int16

// Kafka error codes the machine distinguishes (values from the protocol's
// Errors table).
const (
	CodeUnknownServerError       Code = -1
	CodeNone                     Code = 0
	CodeOffsetOutOfRange         Code = 1
	CodeCorruptMessage           Code = 2
	CodeUnknownTopicOrPartition  Code = 3
	CodeLeaderNotAvailable       Code = 5
	CodeNotLeaderOrFollower      Code = 6
	CodeRequestTimedOut          Code = 7
	CodeReplicaNotAvailable      Code = 9
	CodeNetworkException         Code = 13
	CodeTopicAuthorizationFailed Code = 29
	CodeUnsupportedVersion       Code = 35
	CodeKafkaStorageError        Code = 56
	CodeFencedLeaderEpoch        Code = 74
	CodeUnknownLeaderEpoch       Code = 75
	CodeOffsetNotAvailable       Code = 78
	CodeUnknownTopicID           Code = 100
	CodeInconsistentTopicID      Code = 103
)

var codeNames = map[Code]string{
	CodeUnknownServerError:       "UNKNOWN_SERVER_ERROR",
	CodeNone:                     "NONE",
	CodeOffsetOutOfRange:         "OFFSET_OUT_OF_RANGE",
	CodeCorruptMessage:           "CORRUPT_MESSAGE",
	CodeUnknownTopicOrPartition:  "UNKNOWN_TOPIC_OR_PARTITION",
	CodeLeaderNotAvailable:       "LEADER_NOT_AVAILABLE",
	CodeNotLeaderOrFollower:      "NOT_LEADER_OR_FOLLOWER",
	CodeRequestTimedOut:          "REQUEST_TIMED_OUT",
	CodeReplicaNotAvailable:      "REPLICA_NOT_AVAILABLE",
	CodeNetworkException:         "NETWORK_EXCEPTION",
	CodeTopicAuthorizationFailed: "TOPIC_AUTHORIZATION_FAILED",
	CodeUnsupportedVersion:       "UNSUPPORTED_VERSION",
	CodeKafkaStorageError:        "KAFKA_STORAGE_ERROR",
	CodeFencedLeaderEpoch:        "FENCED_LEADER_EPOCH",
	CodeUnknownLeaderEpoch:       "UNKNOWN_LEADER_EPOCH",
	CodeOffsetNotAvailable:       "OFFSET_NOT_AVAILABLE",
	CodeUnknownTopicID:           "UNKNOWN_TOPIC_ID",
	CodeInconsistentTopicID:      "INCONSISTENT_TOPIC_ID",
}

// String returns the Kafka name of the code, or "CODE(n)".
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// ParseCode returns the code with the given Kafka name (as String prints it).
func ParseCode(name string) (Code, bool) {
	for c, s := range codeNames {
		if s == name {
			return c, true
		}
	}
	return 0, false
}

// class is what the machine does with a partition error code.
type class uint8

const (
	// clsRetry: refresh metadata and resend after the retry backoff
	// (NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, storage errors,
	// timeouts, OFFSET_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, and any
	// other Kafka code the machine does not name).
	clsRetry class = iota
	clsNone
	// clsOutOfRange: the fetch offset is outside the log; classify it.
	clsOutOfRange
	// clsFenced: the request's CurrentLeaderEpoch is older than the
	// broker's: we are behind. Refresh metadata; resend once it is newer.
	clsFenced
	// clsUnknownEpoch: the request's CurrentLeaderEpoch is newer than the
	// broker's: the broker is behind. Resend to it after the backoff; no
	// reset, no truncation check, no metadata refresh.
	clsUnknownEpoch
	// clsTopicID: the topic id is unknown or inconsistent: the topic may
	// have been recreated. Refresh metadata (which carries the new id).
	clsTopicID
	// clsUnsupported: the broker does not support the request version.
	clsUnsupported
	// clsFatal: not retriable (authorization, corrupt data), or a code
	// this client does not know: whether asking again can ever succeed
	// is unknown, and retried it would be retried forever without a word
	// (Java's consumer throws on an unexpected code). Halt: the
	// application hears of it, and seeks to go on.
	clsFatal
)

// classify says what the machine does with a partition error code.
func classify(c Code) class {
	switch c {
	case CodeNone:
		return clsNone
	case CodeOffsetOutOfRange:
		return clsOutOfRange
	case CodeFencedLeaderEpoch:
		return clsFenced
	case CodeUnknownLeaderEpoch:
		return clsUnknownEpoch
	case CodeUnknownTopicID, CodeInconsistentTopicID:
		return clsTopicID
	case CodeUnsupportedVersion:
		return clsUnsupported
	case CodeTopicAuthorizationFailed, CodeCorruptMessage:
		return clsFatal
	}
	if _, known := errors.Info(int16(c)); !known {
		return clsFatal
	}
	return clsRetry
}
