package seek

import "strconv"

// NoEpoch is the "unknown / none" leader epoch (Kafka's -1). A position with
// NoEpoch is never validated, and a request field set to NoEpoch disables the
// broker-side check it would otherwise enable.
const NoEpoch int32 = -1

// NoOffset is the "unknown / none" offset (Kafka's -1).
const NoOffset int64 = -1

// NoBroker is the broker id of an unknown leader.
const NoBroker int32 = -1

// Position is a consumer position: the next offset to read, and the leader
// epoch of the record batch that held the last consumed record (Offset-1).
//
// The epoch is the one KIP-320 validates and the one a commit must carry: the
// epoch of the data, never the current leader epoch. Epoch is NoEpoch when it
// is not known (after Seek to a bare offset, after a ListOffsets reset before
// the first batch arrives, or for pre-v2 message sets).
type Position struct {
	Offset int64
	Epoch  int32
}

// epochString formats an epoch, with "-" for NoEpoch.
func epochString(e int32) string {
	if e < 0 {
		return "-"
	}
	return strconv.Itoa(int(e))
}

// HasEpoch reports whether the position carries a leader epoch, that is,
// whether it can be validated against a leader.
func (p Position) HasEpoch() bool { return p.Epoch >= 0 }

// String formats the position as offset@epoch, with "-" for NoEpoch.
func (p Position) String() string {
	return strconv.FormatInt(p.Offset, 10) + "@" + epochString(p.Epoch)
}

// Range is the half-open offset interval [From, To). From is NoOffset when
// the start is not known (only the end is). A range with From == To is empty.
type Range struct {
	From, To int64
}

// Empty reports whether the range holds no offset.
func (r Range) Empty() bool { return r.From >= 0 && r.From >= r.To }

// String formats the range as [From,To), with "?" for an unknown start.
func (r Range) String() string {
	if r.Empty() {
		return "[]"
	}
	from := "?"
	if r.From >= 0 {
		from = strconv.FormatInt(r.From, 10)
	}
	return "[" + from + "," + strconv.FormatInt(r.To, 10) + ")"
}

// Leader is a partition leader as metadata reports it: the broker id
// (NoBroker when the partition is leaderless or unknown) and the leader epoch
// (NoEpoch when the metadata carried none).
type Leader struct {
	ID    int32
	Epoch int32
}

// String formats the leader as id@epoch.
func (l Leader) String() string {
	id := "-"
	if l.ID >= 0 {
		id = strconv.Itoa(int(l.ID))
	}
	return id + "@" + epochString(l.Epoch)
}

// TopicID is a Kafka topic id (a UUID). The zero value means "not known",
// for example from a broker that predates topic ids; it is never compared.
type TopicID [16]byte

// EpochEnd is a leader's answer about an epoch: the largest epoch it has
// that is ≤ the one asked for, and the offset where that epoch ends (the
// start of the next epoch, or the log end offset for the leader's current
// epoch). Both are -1 when the leader cannot tell (the epoch asked for is
// newer than any it has, or its epoch cache is empty).
//
// It is the body of an OffsetForLeaderEpoch answer and of a Fetch v12+
// DivergingEpoch field alike.
type EpochEnd struct {
	Epoch     int32
	EndOffset int64
}

// Undefined reports whether the leader could not locate the epoch.
func (e EpochEnd) Undefined() bool { return e.Epoch < 0 || e.EndOffset < 0 }

// Policy decides what happens when the consumed lineage breaks: when a
// truncation is detected, when the position falls out of the log, or when the
// topic is recreated. The zero value is not a policy.
type Policy uint8

const (
	// PolicyEarliest: a located divergence moves the position to the exact
	// divergence point (never to the log start); an unlocatable break moves it
	// to the log start. Every break is reported first.
	PolicyEarliest Policy = iota + 1
	// PolicyLatest: a located divergence moves the position to the exact
	// divergence point, like PolicyEarliest (kepoch never skips records of the
	// new lineage it can locate); an unlocatable break moves it to the log
	// end. Every break is reported first.
	PolicyLatest
	// PolicyNone: every break is reported and the partition halts until the
	// application seeks.
	PolicyNone
)

var policyNames = [...]string{"invalid", "earliest", "latest", "none"}

// String returns the name used in scenario scripts.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return "policy(" + strconv.Itoa(int(p)) + ")"
}

// StartKind says how a start position is given.
type StartKind uint8

const (
	// StartAt: an offset, with an epoch (validated before fetching) or with
	// NoEpoch (not validated).
	StartAt StartKind = iota + 1
	// StartNearest: SeekToNearest, an offset and the epoch it was read in,
	// resolved by the leader to the nearest offset that still exists.
	StartNearest
	// StartEarliest: the log start offset (ListOffsets EARLIEST).
	StartEarliest
	// StartLatest: the log end (ListOffsets LATEST).
	StartLatest
	// StartTimestamp: the first offset whose batch timestamp is ≥ Timestamp
	// (ListOffsets by time); the log end if there is none.
	StartTimestamp
	// StartHistory: an offset and a stored EpochHistory (AtHistory): the
	// epoch of the record before the offset comes from the history, and
	// the position is validated like StartAt with that epoch; without one
	// the partition halts (HaltUnvalidated).
	StartHistory
)

var startNames = [...]string{"invalid", "at", "nearest", "earliest", "latest", "timestamp", "history"}

// String returns the name used in scenario scripts.
func (k StartKind) String() string {
	if int(k) < len(startNames) {
		return startNames[k]
	}
	return "start(" + strconv.Itoa(int(k)) + ")"
}

// Start is where an assignment or a seek puts the position. Build it with
// At, AtEpoch, AtHistory, NearestTo, Earliest, Latest or AtTimestamp.
type Start struct {
	Kind      StartKind
	Offset    int64
	Epoch     int32
	Timestamp int64
	// History is, for StartHistory, the stored history cut at Offset (a
	// copy owned by the Start: do not modify it). Nil is an empty history.
	History *EpochHistory
}

// At starts at offset without an epoch: the position is not validated
// (Kafka's seek(tp, offset)). Use it to continue past a reported truncation.
// A negative offset means the log start.
func At(offset int64) Start { return Start{Kind: StartAt, Offset: offset, Epoch: NoEpoch} }

// AtEpoch starts at offset, claiming that the record before it was read in
// epoch (a committed OffsetAndMetadata with its leader epoch). The claim is
// validated against the leader before anything is fetched. With epoch
// NoEpoch it is At(offset).
func AtEpoch(offset int64, epoch int32) Start {
	return Start{Kind: StartAt, Offset: offset, Epoch: epoch}
}

// AtHistory starts at offset, a position stored with the partition's epoch
// history h (EpochHistory, persisted next to the offset). The epoch of
// record offset-1 is h.EpochOf(offset-1), and the position is validated
// against the leader exactly like AtEpoch(offset, that epoch); the history
// below offset also seeds the lineage, so a divergence is located as
// precisely as if the records had been consumed in this run, and an answer
// about an epoch the leader no longer has is recognized
// (Truncation.EpochPruned).
//
// A history that names a topic ID (EpochHistory.TopicID) is of that
// incarnation of the topic: when metadata names another ID (the topic was
// deleted and created again since), nothing is validated and the break is
// reported as Recreated, every offset below offset replaced, then handled
// by the policy like any recreation.
//
// When the history does not give that epoch (it is nil or empty, it starts
// after offset-1 or ends before it, or offset is 0), the start is
// unvalidated: Unvalidated reports it at once, and the partition takes the
// position without an epoch but halts (HaltUnvalidated) until the
// application seeks, rather than fetching from a position nobody checked.
// The Start holds its own copy of h, cut at offset.
func AtHistory(offset int64, h *EpochHistory) Start {
	s := Start{Kind: StartHistory, Offset: offset, Epoch: NoEpoch, History: h.Clone()}
	s.History.Cut(max(offset, 0))
	if offset > 0 {
		if e, ok := s.History.EpochOf(offset - 1); ok {
			s.Epoch = e
		}
	}
	return s
}

// Unvalidated reports whether the start is an AtHistory whose history does
// not give the epoch of the record before its offset: assigning or seeking
// to it halts the partition with HaltUnvalidated.
func (s Start) Unvalidated() bool { return s.Kind == StartHistory && s.Epoch < 0 }

// NearestTo is SeekToNearest: keep offset if the leader still has it in
// epoch, otherwise move to where epoch ends on the leader (the first offset
// of the next larger epoch). See Nearest. With epoch NoEpoch it is
// At(offset).
func NearestTo(offset int64, epoch int32) Start {
	return Start{Kind: StartNearest, Offset: offset, Epoch: epoch}
}

// Earliest starts at the log start offset.
func Earliest() Start { return Start{Kind: StartEarliest, Offset: NoOffset, Epoch: NoEpoch} }

// Latest starts at the log end.
func Latest() Start { return Start{Kind: StartLatest, Offset: NoOffset, Epoch: NoEpoch} }

// AtTimestamp starts at the first offset whose timestamp is ≥ ms (Unix
// milliseconds), or at the log end if there is none.
func AtTimestamp(ms int64) Start {
	return Start{Kind: StartTimestamp, Offset: NoOffset, Epoch: NoEpoch, Timestamp: ms}
}

// String formats the start the way the scenario scripts write it.
func (s Start) String() string {
	switch s.Kind {
	case StartAt:
		return "at " + Position{s.Offset, s.Epoch}.String()
	case StartNearest:
		return "nearest " + Position{s.Offset, s.Epoch}.String()
	case StartTimestamp:
		return "timestamp " + strconv.FormatInt(s.Timestamp, 10)
	case StartHistory:
		return "history " + Position{s.Offset, s.Epoch}.String() + " " + s.History.String()
	}
	return s.Kind.String()
}

// ListSpec is what a ListOffsets request asks for.
type ListSpec uint8

const (
	// ListEarliest asks for the log start offset (timestamp -2).
	ListEarliest ListSpec = iota + 1
	// ListLatest asks for the log end (timestamp -1): the high watermark, or
	// the last stable offset under read_committed.
	ListLatest
	// ListTimestamp asks for the first offset with a timestamp ≥ Timestamp.
	ListTimestamp
)

var listNames = [...]string{"invalid", "earliest", "latest", "timestamp"}

// String returns the name used in scenario scripts.
func (s ListSpec) String() string {
	if int(s) < len(listNames) {
		return listNames[s]
	}
	return "list(" + strconv.Itoa(int(s)) + ")"
}

// RequestID identifies one request the machine asked for. Every answer event
// carries the id of the request it answers; an answer whose id is not the
// one the machine waits for is stale (a seek, a reassignment or a newer
// leader epoch came in between) and is ignored. Ids are never reused within
// a Partition, or within all partitions sharing one RequestIDs.
type RequestID uint64

// RequestIDs hands out request ids. Partitions of one consumer should share
// one, so that an answer to a partition that was dropped and re-created can
// never match a request of the new one. The zero value is ready to use. It
// is not safe for concurrent use: the partitions sharing it must be stepped
// by one goroutine (or under one lock).
type RequestIDs struct {
	last uint64
}

// next returns a fresh id.
func (r *RequestIDs) next() RequestID {
	r.last++
	return RequestID(r.last)
}
