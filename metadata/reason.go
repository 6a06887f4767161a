package metadata

import (
	"strings"

	"github.com/kepoch/kepoch/errors"
)

// Reason says why a refresh was asked for. Reasons are bits: the reasons
// of coalesced triggers are ORed together into the round trip that serves
// them (see Stats.LastReasons).
type Reason uint16

const (
	// ReasonUnknownLeaderEpoch: a broker answered UNKNOWN_LEADER_EPOCH,
	// it is behind the client's epoch. Usually a backoff and a retry on
	// the same broker are enough; a refresh confirms the epoch.
	ReasonUnknownLeaderEpoch Reason = 1 << iota
	// ReasonFencedLeaderEpoch: a broker answered FENCED_LEADER_EPOCH, the
	// client's epoch is old.
	ReasonFencedLeaderEpoch
	// ReasonNotLeader: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or
	// KAFKA_STORAGE_ERROR, the leader moved or is moving.
	ReasonNotLeader
	// ReasonUnknownTopicOrPartition: UNKNOWN_TOPIC_OR_PARTITION,
	// UNKNOWN_TOPIC_ID or INCONSISTENT_TOPIC_ID.
	ReasonUnknownTopicOrPartition
	// ReasonWatch: a topic was watched that the cache does not hold.
	ReasonWatch
	// ReasonWait: WaitFor is waiting for a leader or an epoch.
	ReasonWait
	// ReasonMaxAge: the periodic refresh.
	ReasonMaxAge
	// ReasonRetry: the previous round trip failed.
	ReasonRetry
	// ReasonManual: anything else; what Refresh and Trigger use for 0.
	ReasonManual
	// ReasonUnsettled: the previous answer named a topic ID that the
	// cache holds back until a broker shows it newer or enough answers
	// name it, or called a cached topic unknown fewer times than remove
	// its partitions (see Confirmations).
	ReasonUnsettled
)

var reasonNames = []struct {
	r    Reason
	name string
}{
	{ReasonUnknownLeaderEpoch, "UNKNOWN_LEADER_EPOCH"},
	{ReasonFencedLeaderEpoch, "FENCED_LEADER_EPOCH"},
	{ReasonNotLeader, "NOT_LEADER_OR_FOLLOWER"},
	{ReasonUnknownTopicOrPartition, "UNKNOWN_TOPIC_OR_PARTITION"},
	{ReasonWatch, "watch"},
	{ReasonWait, "wait"},
	{ReasonMaxAge, "max-age"},
	{ReasonRetry, "retry"},
	{ReasonManual, "manual"},
	{ReasonUnsettled, "unsettled"},
}

func (r Reason) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for _, n := range reasonNames {
		if r&n.r != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "|")
}

// ReasonFor maps an error from a Fetch, Produce, ListOffsets or
// OffsetForLeaderEpoch answer to the refresh reason it calls for. It
// returns false when the error says nothing about metadata.
func ReasonFor(err error) (Reason, bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, errors.ErrUnknownLeaderEpoch):
		return ReasonUnknownLeaderEpoch, true
	case errors.Is(err, errors.ErrFencedLeaderEpoch):
		return ReasonFencedLeaderEpoch, true
	case errors.Is(err, errors.ErrNotLeader), errors.Is(err, errors.ErrLeaderNotAvailable),
		errors.Is(err, errors.ErrKafkaStorageError):
		return ReasonNotLeader, true
	case errors.Is(err, errors.ErrUnknownTopicOrPartition), errors.Is(err, errors.ErrUnknownTopicID),
		errors.Is(err, errors.ErrInconsistentTopicID):
		return ReasonUnknownTopicOrPartition, true
	}
	return 0, false
}
