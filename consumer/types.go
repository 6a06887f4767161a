package consumer

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/seek"
)

// Position is a consumer position: the next offset to read and the leader
// epoch of the batch that held the last consumed record (the epoch KIP-320
// validates and a commit must carry).
type Position = seek.Position

// Start is where an assignment or a seek puts a partition's position.
type Start = seek.Start

// Policy is what happens when a partition's consumed lineage breaks.
type Policy = seek.Policy

// The truncation policies (see TruncationPolicy).
const (
	PolicyEarliest = seek.PolicyEarliest
	PolicyLatest   = seek.PolicyLatest
	PolicyNone     = seek.PolicyNone
)

// NoEpoch is the "unknown" leader epoch.
const NoEpoch = seek.NoEpoch

// Start positions.
var (
	// At starts at an offset without an epoch: not validated (Kafka's
	// seek(tp, offset)).
	At = seek.At
	// AtEpoch starts at an offset read in a leader epoch (a stored
	// OffsetAndMetadata): validated against the leader before fetching.
	AtEpoch = seek.AtEpoch
	// NearestTo is SeekToNearest's start: the offset if it still exists
	// in that epoch, else the first offset of the next larger epoch.
	NearestTo = seek.NearestTo
	// Earliest starts at the log start offset.
	Earliest = seek.Earliest
	// Latest starts at the log end.
	Latest = seek.Latest
	// AtTimestamp starts at the first offset whose timestamp is ≥ ms.
	AtTimestamp = seek.AtTimestamp
	// AtHistory starts at an offset stored with the partition's epoch
	// history (see Consumer.EpochHistory): the epoch of the record before
	// the offset comes from the history, and the position is validated
	// like AtEpoch; a history of another incarnation of the topic (its
	// TopicID is not the one metadata names) is reported as Recreated
	// instead. When the history cannot give that epoch, the start is
	// unvalidated (Start.Unvalidated): the partition does not fetch, Poll
	// reports a *errors.PartitionError matching errors.ErrUnvalidated, and
	// the application decides with a seek (At accepts the offset
	// unvalidated).
	AtHistory = seek.AtHistory
	// NewEpochHistory returns an empty epoch history of a given size
	// (≤ 0: seek.DefaultHistorySize); decode a stored one into it with
	// UnmarshalBinary.
	NewEpochHistory = seek.NewEpochHistory
)

// EpochHistory is a partition's durable epoch history: the leader epochs of
// the batches delivered, as (epoch, first offset) entries, to be stored with
// the application's offsets (MarshalBinary) and given back with AtHistory.
type EpochHistory = seek.EpochHistory

// EpochEntry is one entry of an EpochHistory.
type EpochEntry = seek.EpochEntry

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string {
	return tp.Topic + "[" + strconv.Itoa(int(tp.Partition)) + "]"
}

// Assignment is one partition to consume and where to start.
type Assignment struct {
	Topic     string
	Partition int32
	Start     Start
}

// OffsetAndMetadata is a stored position: an offset, the leader epoch of the
// record before it, and application metadata (as a commit holds them).
type OffsetAndMetadata struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one consumed record. Key and Value are nil for a null key or
// value. The record owns its memory.
type Record struct {
	Topic     string
	Partition int32
	// LeaderEpoch is the partition leader epoch of the batch that held the
	// record: committing Offset+1 with this epoch lets a later consumer
	// validate the position (KIP-320).
	LeaderEpoch int32
	Offset      int64
	Timestamp   time.Time
	Key         []byte
	Value       []byte
	Headers     []Header
	// ProducerID and ProducerEpoch identify the batch's producer (-1 when
	// not idempotent).
	ProducerID    int64
	ProducerEpoch int16
}

// Range is a half-open offset range [From, To); From is -1 when the start is
// unknown.
type Range = seek.Range

// BreakKind classifies a break of the consumed lineage.
type BreakKind = seek.BreakKind

// The kinds of break.
const (
	// Diverged: an unclean election truncated records that were consumed;
	// located exactly by the leader (OffsetForLeaderEpoch or DivergingEpoch).
	Diverged = seek.Diverged
	// Unlocated: the log may have diverged but the leader cannot say where
	// (it answered -1/-1).
	Unlocated = seek.Unlocated
	// BelowLogStart: retention removed records that were never consumed.
	BelowLogStart = seek.BelowLogStart
	// PastLogEnd: the position is past the log end with no epoch to locate
	// a divergence with.
	PastLogEnd = seek.PastLogEnd
	// Recreated: the topic was deleted and created again (topic ID changed).
	Recreated = seek.Recreated
)

// TruncationEvent reports one break of a partition's consumed lineage. It is
// reported exactly once per break, before any record of the new lineage is
// delivered, in Fetches.Truncations and to the OnTruncation callback.
type TruncationEvent struct {
	Topic     string
	Partition int32
	Kind      BreakKind
	// Consumed is the position the application had reached: the next
	// offset and the epoch of the last record Poll returned.
	Consumed Position
	// Divergent is, for Diverged, the first offset no longer in the log,
	// with the leader epoch that ends there — the leader's own
	// OffsetForLeaderEpoch answer. Offset -1 for other kinds.
	Divergent Position
	// Resume is, for Diverged, where reading the new lineage continues: the
	// position a rewind moved to, or the one to seek to (SeekTo with
	// AtEpoch) after a halt. Its offset is Divergent's; its epoch is set only
	// when it is certain.
	Resume Position
	// Exact is true when Divergent is proven to be the first replaced
	// offset; false when it is an upper bound (Kafka's own precision).
	Exact bool
	// Replaced is the delivered offsets that are no longer in the log.
	Replaced Range
	// Skipped is, for BelowLogStart, the offsets never delivered that can
	// no longer be read.
	Skipped Range
	// Halted is true under PolicyNone: the partition stopped at Consumed
	// and fetches nothing until the application seeks.
	Halted bool
	// EpochPruned is true, for Diverged, when the leader's answer was the
	// echo of an epoch it no longer keeps (see seek.Truncation.EpochPruned):
	// the lineage proved the answered end cannot be that epoch's end.
	// Divergent is then a bound without an epoch (Exact is false).
	EpochPruned bool
	// ReplacedBatches describes the record batches Poll delivered that
	// hold Replaced offsets, oldest first: their offsets, leader epoch,
	// producer identity and sequence, and CRC, so that the application can
	// tell which writes it must compensate for, and recognize one that the
	// new lineage holds again (same producer ID, epoch and sequence). It
	// reaches back as far as the partition's delivery history
	// (DeliveryHistory); ReplacedBatchesComplete says it covers all of
	// Replaced (offsets that held no record delivered, such as
	// transaction markers, need no batch; false, for one, when the
	// replaced records were delivered before a restart, from a committed
	// position).
	ReplacedBatches         []DeliveredBatch
	ReplacedBatchesComplete bool
}

// DeliveredBatch is the digest of a record batch whose records Poll
// delivered.
type DeliveredBatch struct {
	// Base and Last are the batch's first and last offsets.
	Base, Last int64
	// LeaderEpoch is the partition leader epoch the batch was written in.
	LeaderEpoch int32
	// ProducerID, ProducerEpoch and BaseSequence are the idempotent
	// producer's identity and the sequence of the first record (ProducerID
	// -1 when the producer was not idempotent; the sequence then means
	// nothing).
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Transactional marks a batch written in a transaction.
	Transactional bool
	// CRC is the batch's CRC-32C (over attributes to the end of the
	// batch, as written by the producer).
	CRC uint32
	// Records is the number of records in the batch.
	Records int32
}

func (e TruncationEvent) String() string {
	s := fmt.Sprintf("%s[%d] %s: consumed to %v", e.Topic, e.Partition, e.Kind, e.Consumed)
	if e.Kind == Diverged {
		s += fmt.Sprintf(", log diverges at %v", e.Divergent)
		if !e.Exact {
			s += " (bound)"
		}
		if e.EpochPruned {
			s += " (the leader no longer has the consumed epoch)"
		}
	}
	if !e.Replaced.Empty() {
		s += fmt.Sprintf(", delivered offsets %v replaced", e.Replaced)
	}
	if !e.Skipped.Empty() {
		s += fmt.Sprintf(", offsets %v skipped", e.Skipped)
	}
	if e.Halted {
		s += ", halted until seek"
	}
	return s
}

// Err returns the error this break is, as the errors package types it:
// *errors.LogTruncationError for Diverged and Unlocated (which matches both
// errors.ErrLogTruncation and errors.ErrOffsetOutOfRange), and a
// *errors.PartitionError wrapping errors.ErrOffsetBelowLogStart,
// errors.ErrOffsetOutOfRange or errors.ErrTopicIDChanged for the others.
func (e TruncationEvent) Err() error {
	switch e.Kind {
	case Diverged, Unlocated:
		return &errors.LogTruncationError{Divergences: []errors.Divergence{{
			Topic: e.Topic, Partition: e.Partition,
			Consumed:  errors.Position{Offset: e.Consumed.Offset, LeaderEpoch: e.Consumed.Epoch},
			Divergent: errors.Position{Offset: e.Divergent.Offset, LeaderEpoch: e.Divergent.Epoch},
			Unknown:   e.Kind == Unlocated,
		}}}
	case BelowLogStart:
		return e.partErr(errors.ErrOffsetBelowLogStart)
	case Recreated:
		return e.partErr(errors.ErrTopicIDChanged)
	default:
		return e.partErr(errors.ErrOffsetOutOfRange)
	}
}

func (e TruncationEvent) partErr(err error) error {
	return &errors.PartitionError{Op: "fetch", Topic: e.Topic, Partition: e.Partition, Offset: e.Consumed.Offset, LeaderEpoch: e.Consumed.Epoch, Err: err}
}

// Fetches is what Poll returns.
type Fetches struct {
	// Records are the records fetched, in offset order per partition.
	Records []Record
	// Truncations are the breaks detected since the last Poll, in
	// detection order. Records of a partition that follow its break in
	// Records belong to the new lineage.
	Truncations []TruncationEvent
	// Errors are per-partition errors: for every halted partition its
	// reason (a *errors.LogTruncationError under PolicyNone, a
	// *errors.PartitionError for a non-retriable broker error or corrupt
	// data), and, without halting them, an assigned partition missing from
	// metadata for MissingPartitionReport (a *errors.PartitionError, Op
	// "lookup", matching errors.ErrUnknownTopicOrPartition) and one whose
	// leader has named, for MissingPartitionReport, a read replica that
	// metadata does not list or lists offline, or whose fetches keep
	// failing, so that it is not read (a
	// *errors.PartitionError, Op "fetch", naming the broker, matching
	// errors.ErrReplicaNotAvailable; see Rack). Each is reported once, and
	// again only if it recurs after the partition was back.
	Errors []error

	mem *pollMemory // what Release hands back
}

// memory returns f's recyclable memory record, made on first use.
func (f *Fetches) memory(r *recycler, poison bool) *pollMemory {
	if f.mem == nil {
		f.mem = &pollMemory{r: r, poison: poison}
	}
	return f.mem
}

// Empty reports whether the Fetches hold nothing.
func (f *Fetches) Empty() bool {
	return len(f.Records) == 0 && len(f.Truncations) == 0 && len(f.Errors) == 0
}

// Err joins Errors into one error (nil when there are none).
func (f *Fetches) Err() error { return errors.Join(f.Errors...) }
