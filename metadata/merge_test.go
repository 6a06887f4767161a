package metadata

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// Builders for answers.

func id(b byte) TopicID { return TopicID{b} }

func p(partition, leader, epoch int32) respPartition {
	return respPartition{partition: partition, leader: leader, epoch: epoch, replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}}
}

func withErr(rp respPartition, err error) respPartition {
	rp.err = err
	if !errors.Is(err, errors.ErrReplicaNotAvailable) {
		rp.leader = -1 // what decode does
	}
	return rp
}

func tp(name string, tid TopicID, parts ...respPartition) respTopic {
	return respTopic{name: name, id: tid, partitions: parts}
}

func terr(name string, err error) respTopic { return respTopic{name: name, err: err} }

func answer(topics ...respTopic) *response {
	return &response{broker: -1, controller: 1, brokers: []Broker{{NodeID: 2, Host: "b", Port: 2}, {NodeID: 1, Host: "a", Port: 1}}, topics: topics}
}

// from is an answer given by broker.
func from(broker int32, r *response) *response {
	r.broker = broker
	return r
}

func allAnswer(topics ...respTopic) *response {
	r := answer(topics...)
	r.all = true
	return r
}

// ev is the short form of an event used in the tables.
type ev struct {
	kind          EventKind
	topic         string
	partition     int32
	prevLeader    int32
	prevEpoch     int32
	leader, epoch int32
}

func short(es []Event) []ev {
	out := []ev{}
	for _, e := range es {
		out = append(out, ev{e.Kind, e.Topic, e.Partition, e.PrevLeader, e.PrevLeaderEpoch, e.Leader, e.LeaderEpoch})
	}
	return out
}

// le is the expected (leader, epoch) of a partition after a step.
type le struct {
	topic         string
	partition     int32
	leader, epoch int32
}

type step struct {
	in     *response
	hint   *le     // instead of in: a KIP-951 hint
	hintID TopicID // the topic ID the hinted request named (zero: by name)
	events []ev
	after  []le
}

func TestMerge(t *testing.T) {
	const N = 3
	A, B, C := id(0xA), id(0xB), id(0xC)
	unknownTopic := errors.ErrUnknownTopicOrPartition
	tests := []struct {
		name  string
		n     int
		steps []step
	}{
		{
			name: "first answer adds every partition",
			steps: []step{{
				in:     answer(tp("t", A, p(1, 2, 0), p(0, 1, 0))),
				events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 0}, {PartitionAdded, "t", 1, -1, -1, 2, 0}},
				after:  []le{{"t", 0, 1, 0}, {"t", 1, 2, 0}},
			}},
		},
		{
			name: "higher epoch is adopted, with or without a leader change",
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 4), p(1, 1, 4))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 4}, {PartitionAdded, "t", 1, -1, -1, 1, 4}}},
				{
					in:     answer(tp("t", A, p(0, 2, 5), p(1, 1, 5))),
					events: []ev{{LeaderChanged, "t", 0, 1, 4, 2, 5}, {LeaderChanged, "t", 1, 1, 4, 1, 5}},
					after:  []le{{"t", 0, 2, 5}, {"t", 1, 1, 5}},
				},
			},
		},
		{
			name: "same epoch is adopted silently",
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 4))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 4}}},
				{in: answer(tp("t", A, p(0, 1, 4))), events: []ev{}, after: []le{{"t", 0, 1, 4}}},
			},
		},
		{
			name: "epoch -1 never replaces a known epoch (leaderless window, franz-go #1331)",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 4))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 4}}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}, after: []le{{"t", 0, 1, 4}}},
				{in: answer(tp("t", A, withErr(p(0, 3, -1), errors.ErrLeaderNotAvailable))), events: []ev{}, after: []le{{"t", 0, 1, 4}}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}, after: []le{{"t", 0, 1, 4}}},
			},
		},
		{
			name: "epoch -1 is adopted when no epoch is known",
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, -1))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, -1}}},
				{in: answer(tp("t", A, p(0, 2, -1))), events: []ev{{LeaderChanged, "t", 0, 1, -1, 2, -1}}, after: []le{{"t", 0, 2, -1}}},
				{in: answer(tp("t", A, p(0, 2, 0))), events: []ev{{LeaderChanged, "t", 0, 2, -1, 2, 0}}, after: []le{{"t", 0, 2, 0}}},
			},
		},
		{
			name: "lower epoch rejected until confirmed N times (franz-go #119)",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}, after: []le{{"t", 0, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 6))), events: []ev{}, after: []le{{"t", 0, 1, 7}}},
				{in: answer(tp("t", A, p(0, 3, 6))), events: []ev{{EpochRewound, "t", 0, 1, 7, 3, 6}}, after: []le{{"t", 0, 3, 6}}},
				// the count restarts after a rewind
				{in: answer(tp("t", A, p(0, 3, 5))), events: []ev{}, after: []le{{"t", 0, 3, 6}}},
			},
		},
		{
			name: "an answer at or above the cached epoch resets the rewind count",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 1, 7))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}, after: []le{{"t", 0, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{{EpochRewound, "t", 0, 1, 7, 2, 5}}},
			},
		},
		{
			name: "epoch -1 neither counts as nor resets a rewind",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}},
				{in: answer(tp("t", A, p(0, -1, -1))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}, after: []le{{"t", 0, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{{EpochRewound, "t", 0, 1, 7, 2, 5}}},
			},
		},
		{
			name: "confirmations 0: a lower epoch is never adopted (Java's rule)",
			n:    0,
			steps: append([]step{{in: answer(tp("t", A, p(0, 1, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}}},
				repeatStep(step{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}, after: []le{{"t", 0, 1, 7}}}, 20)...),
		},
		{
			name: "topic ID change shown by a broker adopts lower epochs at once",
			n:    N,
			steps: []step{
				{in: from(1, answer(tp("t", A, p(0, 1, 7), p(1, 2, 9), p(2, 3, 3)))), events: []ev{
					{PartitionAdded, "t", 0, -1, -1, 1, 7}, {PartitionAdded, "t", 1, -1, -1, 2, 9}, {PartitionAdded, "t", 2, -1, -1, 3, 3}}},
				{
					in: from(1, answer(tp("t", B, p(0, 3, 0), p(1, 1, 0)))),
					events: []ev{
						{TopicRecreated, "t", 0, 1, 7, 3, 0}, {TopicRecreated, "t", 1, 2, 9, 1, 0},
						{PartitionRemoved, "t", 2, 3, 3, -1, -1},
					},
					after: []le{{"t", 0, 3, 0}, {"t", 1, 1, 0}},
				},
			},
		},
		{
			name: "an ID a broker was seen moving away from is stale forever; the new incarnation moves on",
			n:    N,
			steps: append(append([]step{
				{in: from(1, answer(tp("t", A, p(0, 1, 7)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: from(2, answer(tp("t", A, p(0, 1, 7)))), events: []ev{}},
				{in: from(1, answer(tp("t", B, p(0, 2, 0)))), events: []ev{{TopicRecreated, "t", 0, 1, 7, 2, 0}}},
			}, repeatStep(step{in: from(2, answer(tp("t", A, p(0, 1, 8)))), events: []ev{}, after: []le{{"t", 0, 2, 0}}}, 2*N)...),
				step{in: from(3, answer(tp("t", A, p(0, 1, 8)))), events: []ev{}, after: []le{{"t", 0, 2, 0}}}, // never heard from: stale all the same
				step{in: answer(tp("t", A, p(0, 1, 8))), events: []ev{}, after: []le{{"t", 0, 2, 0}}},
				step{in: from(2, answer(tp("t", B, p(0, 3, 1)))), events: []ev{{LeaderChanged, "t", 0, 2, 0, 3, 1}}},
			),
		},
		{
			name: "a new ID from a broker not seen on the old one is held until a broker moves",
			n:    N,
			steps: []step{
				{in: from(1, answer(tp("t", A, p(0, 1, 5)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}}},
				{in: from(3, answer(tp("t", B, p(0, 2, 0)))), events: []ev{}, after: []le{{"t", 0, 1, 5}}},
				{in: from(1, answer(tp("t", A, p(0, 1, 5)))), events: []ev{}}, // broker 1 still on A
				{in: from(3, answer(tp("t", B, p(0, 2, 0)))), events: []ev{}, after: []le{{"t", 0, 1, 5}}},
				{in: from(1, answer(tp("t", B, p(0, 2, 1)))), events: []ev{{TopicRecreated, "t", 0, 1, 5, 2, 1}}},
			},
		},
		{
			name: "a second recreation is seen; the first new ID is then stale too",
			n:    N,
			steps: []step{
				{in: from(1, answer(tp("t", A, p(0, 1, 9)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 9}}},
				{in: from(1, answer(tp("t", B, p(0, 2, 4)))), events: []ev{{TopicRecreated, "t", 0, 1, 9, 2, 4}}},
				{in: from(2, answer(tp("t", A, p(0, 1, 9)))), events: []ev{}},
				{in: from(1, answer(tp("t", C, p(0, 3, 0)))), events: []ev{{TopicRecreated, "t", 0, 2, 4, 3, 0}}},
				{in: from(2, answer(tp("t", B, p(0, 2, 4)))), events: []ev{}, after: []le{{"t", 0, 3, 0}}},
				{in: from(2, answer(tp("t", A, p(0, 1, 9)))), events: []ev{}, after: []le{{"t", 0, 3, 0}}},
				{in: from(2, answer(tp("t", C, p(0, 3, 0)))), events: []ev{}},
			},
		},
		{
			name: "the order is shown through a chain of moves of different brokers",
			n:    N,
			steps: []step{
				{in: from(1, answer(tp("t", A, p(0, 1, 9)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 9}}},
				{in: from(2, answer(tp("t", B, p(0, 2, 4)))), events: []ev{}},
				{in: from(2, answer(tp("t", C, p(0, 3, 0)))), events: []ev{}}, // B → C, but A → ? unknown
				{in: from(1, answer(tp("t", B, p(0, 2, 4)))), events: []ev{}}, // A → B; B is stale
				{in: from(3, answer(tp("t", C, p(0, 3, 0)))), events: []ev{{TopicRecreated, "t", 0, 1, 9, 3, 0}}},
			},
		},
		{
			name: "without a shown order, N consecutive answers naming the new ID adopt it",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 5))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}}},
				{in: answer(tp("t", B, p(0, 2, 0))), events: []ev{}},
				{in: answer(tp("t", B, p(0, 2, 0))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 1, 5))), events: []ev{}}, // the count starts over
				{in: answer(tp("t", B, p(0, 2, 0))), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}}, // names no ID: does not count
				{in: answer(tp("t", B, p(0, 2, 0))), events: []ev{}},
				{in: answer(tp("t", B, p(0, 2, 1))), events: []ev{{TopicRecreated, "t", 0, 1, 5, 2, 1}}},
				// not shown older either: a stale A needs as many
				{in: answer(tp("t", A, p(0, 1, 5))), events: []ev{}, after: []le{{"t", 0, 2, 1}}},
			},
		},
		{
			name: "confirmations 0: only a shown order adopts a new ID",
			n:    0,
			steps: append(append([]step{
				{in: answer(tp("t", A, p(0, 1, 5))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}}},
			}, repeatStep(step{in: from(2, answer(tp("t", B, p(0, 2, 0)))), events: []ev{}, after: []le{{"t", 0, 1, 5}}}, 10)...),
				step{in: from(1, answer(tp("t", A, p(0, 1, 5)))), events: []ev{}},
				step{in: from(1, answer(tp("t", B, p(0, 2, 0)))), events: []ev{{TopicRecreated, "t", 0, 1, 5, 2, 0}}},
			),
		},
		{
			name: "a topic ID learned for the first time is not a recreation",
			n:    N,
			steps: []step{
				{in: answer(tp("t", TopicID{}, p(0, 1, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{}, after: []le{{"t", 0, 1, 7}}},
			},
		},
		{
			name: "partition errors: no usable leader, except REPLICA_NOT_AVAILABLE",
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 7), p(1, 2, 7))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}, {PartitionAdded, "t", 1, -1, -1, 2, 7}}},
				{
					in:     answer(tp("t", A, withErr(p(0, 1, 8), errors.ErrLeaderNotAvailable), withErr(p(1, 2, 7), errors.ErrReplicaNotAvailable))),
					events: []ev{{LeaderChanged, "t", 0, 1, 7, -1, 8}},
					after:  []le{{"t", 0, -1, 8}, {"t", 1, 2, 7}},
				},
				{in: answer(tp("t", A, p(0, 3, 9))), events: []ev{{LeaderChanged, "t", 0, -1, 8, 3, 9}}, after: []le{{"t", 0, 3, 9}}},
			},
		},
		{
			name: "missing partitions are kept, new ones added",
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 1), p(1, 2, 1))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 1}, {PartitionAdded, "t", 1, -1, -1, 2, 1}}},
				{in: answer(tp("t", A, p(1, 3, 2))), events: []ev{{LeaderChanged, "t", 1, 2, 1, 3, 2}}, after: []le{{"t", 0, 1, 1}, {"t", 1, 3, 2}}},
				{in: answer(tp("t", A, p(0, 1, 1), p(1, 3, 2), p(2, 1, 0))), events: []ev{{PartitionAdded, "t", 2, -1, -1, 1, 0}}, after: []le{{"t", 2, 1, 0}}},
			},
		},
		{
			name: "a topic unknown N times in a row is removed; a clean answer resets the count",
			n:    N,
			steps: []step{
				{in: from(2, answer(tp("t", A, p(0, 1, 1)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 1}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}, after: []le{{"t", 0, 1, 1}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(tp("t", A, p(0, 1, 1))), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(terr("t", errors.ErrUnknownTopicID)), events: []ev{}, after: []le{{"t", 0, 1, 1}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{{PartitionRemoved, "t", 0, 1, 1, -1, -1}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				// it comes back under a new ID, from the broker that
				// named the old one: a new incarnation
				{in: from(2, answer(tp("t", B, p(0, 2, 0)))), events: []ev{{TopicRecreated, "t", 0, -1, -1, 2, 0}}, after: []le{{"t", 0, 2, 0}}},
			},
		},
		{
			// A broker lagging behind (or one that named it unknown
			// wrongly) must not take a topic's epochs back because the
			// cache had dropped its partitions.
			name: "a removed topic comes back under its ID below its epochs only after N answers in a row",
			n:    N,
			steps: []step{
				{in: from(2, answer(tp("t", A, p(0, 1, 5), p(1, 2, 4)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}, {PartitionAdded, "t", 1, -1, -1, 2, 4}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{{PartitionRemoved, "t", 0, 1, 5, -1, -1}, {PartitionRemoved, "t", 1, 2, 4, -1, -1}}},
				{in: answer(tp("t", A, p(0, 3, 3), p(1, 2, 4))), events: []ev{}, after: []le{{"t", 0, -1, -1}}},
				{in: answer(tp("t", A, p(0, 3, 3), p(1, 2, 4))), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}}, // the count starts again
				{in: answer(tp("t", A, p(0, 3, 3), p(1, 2, 4))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 3, 3), p(1, 2, 4))), events: []ev{}},
				{in: answer(tp("t", A, p(0, 3, 3), p(1, 2, 4))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 3, 3}, {PartitionAdded, "t", 1, -1, -1, 2, 4}}, after: []le{{"t", 0, 3, 3}}},
			},
		},
		{
			name: "a removed topic comes back under its ID at or above its epochs at once",
			n:    N,
			steps: []step{
				{in: from(2, answer(tp("t", A, p(0, 1, 5)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 5}}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{}},
				{in: answer(terr("t", unknownTopic)), events: []ev{{PartitionRemoved, "t", 0, 1, 5, -1, -1}}},
				{in: answer(tp("t", A, p(0, 2, 5))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 2, 5}}, after: []le{{"t", 0, 2, 5}}},
			},
		},
		{
			name: "other topic errors keep the partitions",
			n:    1,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 1))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 1}}},
				{in: answer(terr("t", errors.ErrTopicAuthorization)), events: []ev{}, after: []le{{"t", 0, 1, 1}}},
				{in: answer(terr("t", errors.ErrLeaderNotAvailable)), events: []ev{}, after: []le{{"t", 0, 1, 1}}},
			},
		},
		{
			name: "absence from an all-topics answer counts as unknown",
			n:    2,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 1)), tp("u", B, p(0, 2, 1))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 1}, {PartitionAdded, "u", 0, -1, -1, 2, 1}}},
				{in: answer(tp("u", B, p(0, 2, 1))), events: []ev{}, after: []le{{"t", 0, 1, 1}}}, // not all: absence means nothing
				{in: answer(tp("u", B, p(0, 2, 1))), events: []ev{}, after: []le{{"t", 0, 1, 1}}},
				{in: allAnswer(tp("u", B, p(0, 2, 1))), events: []ev{}},
				{in: allAnswer(tp("u", B, p(0, 2, 1))), events: []ev{{PartitionRemoved, "t", 0, 1, 1, -1, -1}}},
			},
		},
		{
			name: "hints: only newer epochs with a leader, only cached partitions",
			n:    N,
			steps: []step{
				{in: answer(tp("t", A, p(0, 1, 4))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 4}}},
				{hint: &le{"t", 0, 2, 5}, events: []ev{{LeaderChanged, "t", 0, 1, 4, 2, 5}}, after: []le{{"t", 0, 2, 5}}},
				{hint: &le{"t", 0, 3, 5}, events: []ev{}, after: []le{{"t", 0, 2, 5}}},
				{hint: &le{"t", 0, 3, 4}, events: []ev{}},
				{hint: &le{"t", 0, -1, 6}, events: []ev{}},
				{hint: &le{"t", 0, 3, -1}, events: []ev{}},
				{hint: &le{"t", 1, 3, 9}, events: []ev{}},
				{hint: &le{"x", 0, 3, 9}, events: []ev{}, after: []le{{"t", 0, 2, 5}}},
				// metadata lagging behind the hint is a (rejected) rewind
				{in: answer(tp("t", A, p(0, 1, 4))), events: []ev{}, after: []le{{"t", 0, 2, 5}}},
			},
		},
		{
			// A request sent to the old incarnation (or answered by a
			// broker still serving it) is answered with the old
			// incarnation's epoch, higher than the new one's: adopted, it
			// held the new topic's partition at that epoch, every fresh
			// answer a rejected rewind until N of them in a row.
			name: "hints about another incarnation are ignored",
			n:    N,
			steps: []step{
				{in: from(2, answer(tp("t", A, p(0, 1, 7)))), events: []ev{{PartitionAdded, "t", 0, -1, -1, 1, 7}}},
				{in: from(2, answer(tp("t", B, p(0, 2, 0)))), events: []ev{{TopicRecreated, "t", 0, 1, 7, 2, 0}}, after: []le{{"t", 0, 2, 0}}},
				{hint: &le{"t", 0, 1, 8}, hintID: A, events: []ev{}, after: []le{{"t", 0, 2, 0}}},
				{in: from(2, answer(tp("t", B, p(0, 3, 1)))), events: []ev{{LeaderChanged, "t", 0, 2, 0, 3, 1}}, after: []le{{"t", 0, 3, 1}}},
				// the cached incarnation's own hints, and those of
				// requests that named the topic by name, still apply
				{hint: &le{"t", 0, 1, 2}, hintID: B, events: []ev{{LeaderChanged, "t", 0, 3, 1, 1, 2}}, after: []le{{"t", 0, 1, 2}}},
				{hint: &le{"t", 0, 2, 3}, events: []ev{{LeaderChanged, "t", 0, 1, 2, 2, 3}}, after: []le{{"t", 0, 2, 3}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := emptyState()
			for i, s := range tt.steps {
				before := deepCopy(st)
				var events []Event
				if s.hint != nil {
					var e *Event
					st, e = applyHint(st, s.hint.topic, s.hintID, s.hint.partition, s.hint.leader, s.hint.epoch)
					if e != nil {
						events = []Event{*e}
						if e.Source != FromHint {
							t.Fatalf("step %d: hint event has source %v", i, e.Source)
						}
					}
				} else {
					var next *state
					next, events = merge(st, s.in, tt.n)
					for _, e := range events {
						if e.Source != FromMetadata {
							t.Fatalf("step %d: metadata event has source %v", i, e.Source)
						}
					}
					st = next
				}
				if !reflect.DeepEqual(deepCopy(before), before) {
					t.Fatalf("step %d modified its input state", i)
				}
				if got := short(events); !reflect.DeepEqual(got, s.events) {
					t.Fatalf("step %d events:\n got %v\nwant %v", i, got, s.events)
				}
				for _, want := range s.after {
					got, _ := st.lookup(want.topic, want.partition)
					if got.Leader != want.leader || got.LeaderEpoch != want.epoch {
						t.Fatalf("step %d: %s[%d] = leader %d epoch %d, want %d %d", i, want.topic, want.partition, got.Leader, got.LeaderEpoch, want.leader, want.epoch)
					}
				}
			}
		})
	}
}

func repeatStep(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// deepCopy copies a state so that a later comparison detects mutation.
func deepCopy(s *state) *state {
	c := *s
	c.brokers = slices.Clone(s.brokers)
	c.topics = map[string]*topicState{}
	for name, t := range s.topics {
		tc := *t
		tc.Partitions = nil
		for _, p := range t.Partitions {
			p.Replicas = slices.Clone(p.Replicas)
			p.ISR = slices.Clone(p.ISR)
			p.OfflineReplicas = slices.Clone(p.OfflineReplicas)
			tc.Partitions = append(tc.Partitions, p)
		}
		tc.rewinds = slices.Clone(t.rewinds)
		tc.reported = maps.Clone(t.reported)
		tc.moves = slices.Clone(t.moves)
		tc.floors = slices.Clone(t.floors)
		c.topics[name] = &tc
	}
	return &c
}

func TestMergeBrokersAndTopicErrors(t *testing.T) {
	st, _ := merge(emptyState(), answer(tp("t", id(1), p(0, 1, 0)), terr("denied", errors.ErrTopicAuthorization)), 5)
	if got := []int32{st.brokers[0].NodeID, st.brokers[1].NodeID}; !reflect.DeepEqual(got, []int32{1, 2}) {
		t.Fatalf("brokers not sorted: %v", got)
	}
	if st.controller != 1 {
		t.Fatalf("controller = %d", st.controller)
	}
	if _, err := st.topic("denied"); !errors.Is(err, errors.ErrTopicAuthorization) {
		t.Fatalf("topic(denied) err = %v", err)
	}
	if _, err := st.lookup("denied", 0); !errors.Is(err, errors.ErrTopicAuthorization) {
		t.Fatalf("lookup(denied) err = %v", err)
	}
	if _, err := st.lookup("t", 1); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("lookup(t, 1) err = %v", err)
	}
	if _, err := st.lookup("nope", 0); !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		t.Fatalf("lookup(nope) err = %v", err)
	}
	tt, err := st.topic("t")
	if err != nil || tt.ID != id(1) || len(tt.Partitions) != 1 {
		t.Fatalf("topic(t) = %+v, %v", tt, err)
	}
	// An answer without brokers keeps the old ones.
	st2, _ := merge(st, &response{controller: -1}, 5)
	if len(st2.brokers) != 2 || st2.controller != 1 {
		t.Fatalf("brokers or controller lost: %+v", st2)
	}
}

func TestDecode(t *testing.T) {
	build := func(version int16) *kmsg.MetadataResponse {
		r := kmsg.NewPtrMetadataResponse()
		r.Version = version
		r.ControllerID = 2
		r.ClusterID = kmsg.StringPtr("c")
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = 1, "h", 9092, kmsg.StringPtr("r1")
		r.Brokers = append(r.Brokers, b)
		tpc := kmsg.NewMetadataResponseTopic()
		tpc.Topic = kmsg.StringPtr("t")
		tpc.TopicID = [16]byte{7}
		for i, code := range []int16{0, errors.ErrLeaderNotAvailable.Code, errors.ErrReplicaNotAvailable.Code} {
			pp := kmsg.NewMetadataResponseTopicPartition()
			pp.Partition = int32(i)
			pp.Leader = 1
			pp.LeaderEpoch = 4
			pp.ErrorCode = code
			pp.Replicas = []int32{1}
			tpc.Partitions = append(tpc.Partitions, pp)
		}
		r.Topics = append(r.Topics, tpc)
		noName := kmsg.NewMetadataResponseTopic()
		noName.ErrorCode = errors.ErrUnknownTopicID.Code
		r.Topics = append(r.Topics, noName)
		return r
	}
	tests := []struct {
		version    int16
		wantEpochs []int32
	}{
		{8, []int32{-1, -1, -1}}, // epochs before v9 are not trusted
		{9, []int32{4, 4, 4}},
		{13, []int32{4, 4, 4}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.version), func(t *testing.T) {
			d, err := decode(build(tt.version), true, -1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.all || d.controller != 2 || d.clusterID != "c" || len(d.brokers) != 1 || d.brokers[0] != (Broker{1, "h", 9092, "r1"}) {
				t.Fatalf("decoded header %+v", d)
			}
			if len(d.topics) != 1 || d.topics[0].name != "t" || d.topics[0].id != (TopicID{7}) {
				t.Fatalf("topics %+v", d.topics)
			}
			var epochs, leaders []int32
			for _, rp := range d.topics[0].partitions {
				epochs = append(epochs, rp.epoch)
				leaders = append(leaders, rp.leader)
			}
			if !reflect.DeepEqual(epochs, tt.wantEpochs) {
				t.Fatalf("epochs %v, want %v", epochs, tt.wantEpochs)
			}
			if !reflect.DeepEqual(leaders, []int32{1, -1, 1}) {
				t.Fatalf("leaders %v, want [1 -1 1]", leaders)
			}
		})
	}
	top := build(13)
	top.ErrorCode = errors.ErrRebootstrapRequired.Code
	if _, err := decode(top, false, -1); !errors.Is(err, errors.ErrRebootstrapRequired) {
		t.Fatalf("top-level error = %v", err)
	}
}

// TestMergeInvariants runs random answer sequences and checks, after every
// step: epochs never go down without an EpochRewound, TopicRecreated or
// PartitionRemoved event; -1 never replaces a known epoch; and every change
// of (leader, epoch) between two snapshots is reported by exactly one event.
func TestMergeInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 200; run++ {
		st := emptyState()
		n := rng.IntN(4)
		tid := id(1)
		for stepN := 0; stepN < 60; stepN++ {
			var next *state
			var events []Event
			switch k := rng.IntN(20); {
			case k < 4:
				var e *Event
				next, e = applyHint(st, "t", TopicID{}, int32(rng.IntN(3)), int32(rng.IntN(4)-1), int32(rng.IntN(10)-1))
				events = eventsOf(e)
			case k == 4:
				tid = id(byte(rng.IntN(3) + 1))
				next, events = merge(st, from(randomBroker(rng), answer(randomTopic(rng, tid))), n)
			case k == 5:
				next, events = merge(st, from(randomBroker(rng), answer(terr("t", errors.ErrUnknownTopicOrPartition))), n)
			default:
				next, events = merge(st, from(randomBroker(rng), answer(randomTopic(rng, tid))), n)
			}
			checkStep(t, st, next, events)
			st = next
		}
	}
}

// randomBroker is a broker 0-2 or -1 (not known). Its answers need not
// move forward: the invariants hold whatever the brokers do.
func randomBroker(rng *rand.Rand) int32 { return int32(rng.IntN(4)) - 1 }

func eventsOf(e *Event) []Event {
	if e == nil {
		return nil
	}
	return []Event{*e}
}

func randomTopic(rng *rand.Rand, tid TopicID) respTopic {
	var parts []respPartition
	for i := int32(0); i < int32(rng.IntN(3)+1); i++ {
		if rng.IntN(4) == 0 {
			continue
		}
		rp := p(i, int32(rng.IntN(4)-1), int32(rng.IntN(10)-1))
		if rng.IntN(8) == 0 {
			rp = withErr(rp, errors.ErrLeaderNotAvailable)
		}
		parts = append(parts, rp)
	}
	return tp("t", tid, parts...)
}

func checkStep(t *testing.T, before, after *state, events []Event) {
	t.Helper()
	byPart := map[int32][]Event{}
	for _, e := range events {
		byPart[e.Partition] = append(byPart[e.Partition], e)
	}
	parts := func(s *state) []Partition {
		if ts := s.topics["t"]; ts != nil {
			return ts.Partitions
		}
		return nil
	}
	bp, ap := parts(before), parts(after)
	for i := 0; i < max(len(bp), len(ap)); i++ {
		old := placeholder("t", TopicID{}, int32(i))
		if i < len(bp) {
			old = bp[i]
		}
		cur := placeholder("t", TopicID{}, int32(i))
		if i < len(ap) {
			cur = ap[i]
		}
		evs := byPart[int32(i)]
		changed := old.Leader != cur.Leader || old.LeaderEpoch != cur.LeaderEpoch
		if len(evs) > 1 {
			t.Fatalf("partition %d: %d events in one step: %v", i, len(evs), evs)
		}
		if changed && len(evs) == 0 {
			t.Fatalf("partition %d changed %d@%d -> %d@%d without an event", i, old.Leader, old.LeaderEpoch, cur.Leader, cur.LeaderEpoch)
		}
		if len(evs) == 1 {
			e := evs[0]
			if e.Leader != cur.Leader || e.LeaderEpoch != cur.LeaderEpoch || e.PrevLeader != old.Leader || e.PrevLeaderEpoch != old.LeaderEpoch {
				if e.Kind != PartitionAdded { // an added partition's prev is the placeholder
					t.Fatalf("partition %d: event %v does not describe %d@%d -> %d@%d", i, e, old.Leader, old.LeaderEpoch, cur.Leader, cur.LeaderEpoch)
				}
			}
		}
		if old.LeaderEpoch >= 0 && cur.LeaderEpoch < old.LeaderEpoch {
			if len(evs) == 0 || (evs[0].Kind != EpochRewound && evs[0].Kind != TopicRecreated && evs[0].Kind != PartitionRemoved) {
				t.Fatalf("partition %d: epoch went %d -> %d with events %v", i, old.LeaderEpoch, cur.LeaderEpoch, evs)
			}
		}
	}
}

// A lagging broker that still answers with a recreated topic's old ID must
// not take the cache back to the old incarnation once it holds the new one:
// the old incarnation's epochs (higher than the new one's) would replace
// the new ones, every partition would be reported TopicRecreated (consumers
// reset their positions on it, producers send to a deleted topic ID), and
// the next fresh answer would flip it forward again, reporting the
// recreation a second time. Answers name no broker here.
func TestMergeStaleIncarnationNotReadopted(t *testing.T) {
	const n = 3
	A, B := id(0xA), id(0xB)
	st, _ := merge(emptyState(), answer(tp("t", A, p(0, 1, 7))), n)
	for i := 0; st.topics["t"].ID != B; i++ {
		if i > 2*n {
			t.Fatal("the new incarnation was never adopted")
		}
		st, _ = merge(st, answer(tp("t", B, p(0, 2, 0))), n)
	}
	st, evs := merge(st, answer(tp("t", A, p(0, 1, 7))), n)
	if got, _ := st.lookup("t", 0); len(evs) != 0 || got.TopicID != B || got.LeaderEpoch != 0 {
		t.Fatalf("a stale answer naming the old ID: events %v, t[0] %+v", short(evs), got)
	}
	_, evs = merge(st, answer(tp("t", B, p(0, 3, 1))), n)
	if want := []ev{{LeaderChanged, "t", 0, 2, 0, 3, 1}}; !reflect.DeepEqual(short(evs), want) {
		t.Fatalf("the new incarnation moving on: events %v, want %v", short(evs), want)
	}
}

// A partition number no Kafka answer can carry (Kafka numbers a topic's
// partitions from 0 and lists every one) must not size the topic: the cache
// grew to cover it with placeholders, one Partition per number, so a single
// answer naming partition 2147483647 exhausted the process's memory, and a
// smaller bogus number gave the topic a partition count (what producers
// partition over and group leaders assign) it does not have.
func TestMergeBogusPartitionNumber(t *testing.T) {
	const bogus = 100_000
	A := id(0xA)
	check := func(st *state, want int) {
		t.Helper()
		top, err := st.topic("t")
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Partitions) != want {
			t.Fatalf("partition count = %d, want %d", len(top.Partitions), want)
		}
	}

	// A first sighting.
	st, evs := merge(emptyState(), answer(tp("t", A, p(0, 1, 1), p(bogus, 1, 1))), 3)
	check(st, 1)
	if len(evs) != 1 || evs[0].Partition != 0 {
		t.Fatalf("events %v, want one PartitionAdded for partition 0", evs)
	}

	// A cached topic.
	st, _ = merge(st, answer(tp("t", A, p(0, 1, 1), p(1, 2, 1))), 3)
	check(st, 2)
	st, evs = merge(st, answer(tp("t", A, p(1, 2, 1), p(bogus, 1, 1))), 3)
	check(st, 2)
	if len(evs) != 0 {
		t.Fatalf("events %v, want none", evs)
	}
	// Fewer partitions listed than cached (a broker behind an addition)
	// still updates the ones it lists, and a real addition still grows.
	st, evs = merge(st, answer(tp("t", A, p(1, 3, 2))), 3)
	check(st, 2)
	if len(evs) != 1 || evs[0].Kind != LeaderChanged || evs[0].Partition != 1 {
		t.Fatalf("events %v, want partition 1's leader change", evs)
	}
	st, _ = merge(st, answer(tp("t", A, p(0, 1, 1), p(1, 3, 2), p(2, 1, 0))), 3)
	check(st, 3)

	// A new incarnation.
	st, _ = merge(st, from(2, answer(tp("t", A, p(0, 1, 1), p(1, 3, 2), p(2, 1, 0)))), 3)
	st, _ = merge(st, from(2, answer(tp("t", id(0xB), p(0, 1, 0), p(bogus, 2, 0)))), 3)
	check(st, 1)
}
