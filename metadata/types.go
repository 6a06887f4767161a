package metadata

import (
	"encoding/base64"
	"net"
	"strconv"
)

// TopicID is a topic's 16-byte UUID (Metadata v10+). The zero value means
// "not known" (older brokers, or not fetched yet).
type TopicID [16]byte

// IsZero reports whether the ID is unknown.
func (id TopicID) IsZero() bool { return id == TopicID{} }

// String formats the ID as Kafka's tools do (URL-safe base64, no padding).
func (id TopicID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// Broker is a broker as the last Metadata answer described it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   string // "" when the broker has none
}

// Addr is host:port.
func (b Broker) Addr() string { return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))) }

// Partition is the cached state of one partition.
//
// The slices are shared with the cache and must not be modified.
type Partition struct {
	Topic     string
	TopicID   TopicID
	Partition int32
	// Leader is the leader's node ID, -1 when there is no usable leader
	// (none elected, or the answer carried a partition error).
	Leader int32
	// LeaderEpoch is the leader epoch, -1 when unknown.
	LeaderEpoch     int32
	Replicas        []int32
	ISR             []int32
	OfflineReplicas []int32
}

// Topic is the cached state of one topic.
type Topic struct {
	Name     string
	ID       TopicID
	Internal bool
	// Partitions is indexed by partition number; len(Partitions) is the
	// partition count.
	Partitions []Partition
	// Err is the topic-level error of the most recent answer about this
	// topic (nil when it was clean). Partitions keep their last good
	// values while Err is set.
	Err error
}

// EventKind says what happened to a partition.
type EventKind uint8

const (
	// PartitionAdded: the partition was seen for the first time (a newly
	// watched topic, a new topic, or partitions added to a topic).
	PartitionAdded EventKind = iota + 1
	// LeaderChanged: the leader or the leader epoch moved forward (a
	// higher epoch, or a leader change at an unchanged or previously
	// unknown epoch).
	LeaderChanged
	// EpochRewound: a lower leader epoch was accepted after
	// RewindConfirmations consecutive answers reported it.
	EpochRewound
	// TopicRecreated: the topic ID changed, the partition belongs to a new
	// incarnation of the topic; epochs restart.
	TopicRecreated
	// PartitionRemoved: the topic is gone (confirmed by
	// RewindConfirmations consecutive answers); Leader and LeaderEpoch
	// are -1.
	PartitionRemoved
)

func (k EventKind) String() string {
	switch k {
	case PartitionAdded:
		return "partition-added"
	case LeaderChanged:
		return "leader-changed"
	case EpochRewound:
		return "epoch-rewound"
	case TopicRecreated:
		return "topic-recreated"
	case PartitionRemoved:
		return "partition-removed"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Source says where the information behind an event came from.
type Source uint8

const (
	// FromMetadata: a Metadata answer.
	FromMetadata Source = iota + 1
	// FromHint: a KIP-951 CurrentLeader hint passed to ApplyHint.
	FromHint
)

func (s Source) String() string {
	switch s {
	case FromMetadata:
		return "metadata"
	case FromHint:
		return "hint"
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// Event is one change of a partition's leader or leader epoch.
type Event struct {
	Kind      EventKind
	Source    Source
	Topic     string
	TopicID   TopicID // the ID after the change
	Partition int32

	PrevLeader      int32 // -1 when there was none
	PrevLeaderEpoch int32 // -1 when unknown
	Leader          int32 // -1 when there is none
	LeaderEpoch     int32 // -1 when unknown
}

func (e Event) String() string {
	return e.Kind.String() + " " + e.Topic + "[" + strconv.Itoa(int(e.Partition)) + "] leader " +
		strconv.Itoa(int(e.PrevLeader)) + "@" + strconv.Itoa(int(e.PrevLeaderEpoch)) + " -> " +
		strconv.Itoa(int(e.Leader)) + "@" + strconv.Itoa(int(e.LeaderEpoch)) + " (" + e.Source.String() + ")"
}
