package seek

import (
	"strconv"
	"strings"
)

// ActionKind says which field of an Action is set.
type ActionKind uint8

const (
	// ActFetch: send the Fetch in Action.Fetch.
	ActFetch ActionKind = iota + 1
	// ActValidate: send the OffsetForLeaderEpoch in Action.Validate.
	ActValidate
	// ActListOffsets: send the ListOffsets in Action.List.
	ActListOffsets
	// ActRefreshMetadata: refresh metadata for the partition's topic, then
	// step LeaderChanged. Action.Refresh says why.
	ActRefreshMetadata
	// ActReport: the consumed lineage broke; Action.Report says how. The
	// consumer drops records it buffered from the old lineage and surfaces
	// the report (as errors.LogTruncationError or its siblings).
	ActReport
	// ActHalt: the partition stopped; nothing more is fetched until the
	// application seeks (or reassigns). Action.Halt says why.
	ActHalt
	// ActResolved: a SeekToNearest was resolved; Action.Resolved says where
	// the position went.
	ActResolved
)

var actionNames = [...]string{"invalid", "fetch", "validate", "list-offsets", "refresh-metadata", "report", "halt", "resolved"}

// String returns the name used in scenario scripts.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return "action(" + strconv.Itoa(int(k)) + ")"
}

// Action is an output of Partition.Step: a request to send, or a fact to
// surface. Kind says which one field holds it. Actions are plain values; the
// slice Step returns is reused by the next Step.
type Action struct {
	Kind     ActionKind
	Fetch    FetchRequest
	Validate ValidateRequest
	List     ListRequest
	Refresh  RefreshReason
	Report   Truncation
	Halt     Halt
	Resolved Resolved
}

// FetchRequest is one partition of a Fetch request, sent to the leader.
type FetchRequest struct {
	Req RequestID
	// Leader is the broker to send to. (The consumer may send it to a
	// replica the leader named instead, KIP-392: unchanged, and its
	// answer is stepped as the leader's.)
	Leader int32
	// Offset is FetchOffset: the position.
	Offset int64
	// CurrentLeaderEpoch fences the fetch (v9+); NoEpoch disables fencing.
	CurrentLeaderEpoch int32
	// LastFetchedEpoch is the position's epoch (v12+; dropped below v12):
	// the leader answers DivergingEpoch if that epoch does not end at
	// Offset in its log. NoEpoch disables the check.
	LastFetchedEpoch int32
	// Validates marks the fetch whose answer is the position's validation
	// (Config.InBandValidation): it must go to Leader itself, not to a
	// replica, and its answer proves the position only if the leader
	// checked LastFetchedEpoch (BatchFetched.Checked,
	// FetchCompleted.Checked); a DivergingEpoch is judged as always.
	Validates bool
}

// ValidateRequest is one partition of an OffsetForLeaderEpoch request (v3+,
// ReplicaId -1), sent to the leader.
type ValidateRequest struct {
	Req    RequestID
	Leader int32
	// Epoch is the LeaderEpoch to look up.
	Epoch int32
	// CurrentLeaderEpoch fences the request; NoEpoch disables fencing.
	CurrentLeaderEpoch int32
}

// ListRequest is one partition of a ListOffsets request (v4+), sent to the
// leader.
type ListRequest struct {
	Req    RequestID
	Leader int32
	Spec   ListSpec
	// Timestamp is the target time in Unix milliseconds for ListTimestamp.
	Timestamp int64
	// CurrentLeaderEpoch fences the request; NoEpoch disables fencing.
	CurrentLeaderEpoch int32
}

// RefreshReason says why metadata is needed.
type RefreshReason uint8

const (
	// RefreshLeaderUnknown: the partition has no known leader.
	RefreshLeaderUnknown RefreshReason = iota + 1
	// RefreshFenced: a broker answered FENCED_LEADER_EPOCH: it knows a newer
	// leader epoch than we do.
	RefreshFenced
	// RefreshBehind: an epoch we know of (from a commit, a seek or earlier
	// metadata) is newer than the metadata's leader epoch; wait for it.
	RefreshBehind
	// RefreshError: a retriable partition error (NOT_LEADER_OR_FOLLOWER and
	// the like).
	RefreshError
	// RefreshTopicID: the topic id is unknown or inconsistent; the topic may
	// have been recreated.
	RefreshTopicID
)

var refreshNames = [...]string{"invalid", "leader-unknown", "fenced", "behind", "error", "topic-id"}

// String returns the name used in scenario scripts.
func (r RefreshReason) String() string {
	if int(r) < len(refreshNames) {
		return refreshNames[r]
	}
	return "refresh(" + strconv.Itoa(int(r)) + ")"
}

// HaltReason says why a partition halted.
type HaltReason uint8

const (
	// HaltBreak: the lineage broke under PolicyNone; an ActReport precedes
	// the halt in the same Step.
	HaltBreak HaltReason = iota + 1
	// HaltError: a broker answered a non-retriable error (Halt.Code).
	HaltError
	// HaltUnvalidated: the start was AtHistory and the history does not
	// give the epoch of the record before the offset (it is empty, starts
	// after that record, ends before it, or the offset is 0), so the
	// position cannot be validated. The position is set, without an epoch,
	// and nothing is fetched until the application seeks: with At to
	// accept the unvalidated offset, or anywhere else.
	HaltUnvalidated
)

// Halt describes an ActHalt.
type Halt struct {
	Reason HaltReason
	// Code is the error for HaltError.
	Code Code
}

// Resolved describes an ActResolved: SeekToNearest(Requested) resolved to
// Position.
type Resolved struct {
	Requested Position
	Position  Position
}

// BreakKind classifies a break of the consumed lineage.
type BreakKind uint8

const (
	// Diverged: the leader's log differs from what was consumed, from
	// Truncation.Divergent on (an unclean election truncated it). Located by
	// OffsetForLeaderEpoch or a Fetch DivergingEpoch, refined with the
	// partition's lineage.
	Diverged BreakKind = iota + 1
	// Unlocated: the log may have diverged but the leader cannot say where:
	// it answered -1/-1 (the epoch is newer than any it has, e.g. a
	// committed epoch from before the topic was recreated), or it never had
	// the consumed epoch and the lineage cannot bound where that epoch began.
	Unlocated
	// BelowLogStart: the position fell below the log start (retention or
	// DeleteRecords removed records that were never consumed).
	BelowLogStart
	// PastLogEnd: the position is past the log end and has no epoch to
	// locate the divergence with (a committed offset without epoch, or an
	// unvalidated seek).
	PastLogEnd
	// Recreated: the topic id changed: the topic was deleted and created
	// again, and every offset now belongs to a new log.
	Recreated
)

var breakNames = [...]string{"invalid", "diverged", "unlocated", "below-log-start", "past-log-end", "recreated"}

// String returns the name used in scenario scripts.
func (k BreakKind) String() string {
	if int(k) < len(breakNames) {
		return breakNames[k]
	}
	return "break(" + strconv.Itoa(int(k)) + ")"
}

// Then says what the machine does after a break.
type Then uint8

const (
	// ThenRewind: the position moved to Truncation.Divergent, validated; the
	// next records delivered are the leader's from there on.
	ThenRewind Then = iota + 1
	// ThenReset: the position is being reset by policy (a ListOffsets
	// action follows, or the position moved to the log start already known).
	ThenReset
	// ThenHalt: PolicyNone; the partition halts until the application
	// seeks. The position stays at Truncation.Consumed.
	ThenHalt
)

var thenNames = [...]string{"invalid", "rewind", "reset", "halt"}

// String returns the name used in scenario scripts.
func (t Then) String() string {
	if int(t) < len(thenNames) {
		return thenNames[t]
	}
	return "then(" + strconv.Itoa(int(t)) + ")"
}

// Truncation reports a break of the consumed lineage: what was consumed,
// where the leader's log departs from it, and which offsets that were
// delivered are gone. It is the data of errors.LogTruncationError (the
// consumer maps it); it is reported exactly once per break.
type Truncation struct {
	Kind BreakKind
	// Consumed is the position when the break was detected: the next offset
	// and the epoch of the last consumed record.
	Consumed Position
	// Divergent is, for Diverged, the first offset that is not in the
	// leader's log as it was consumed, with the leader's epoch that ends
	// there (as Kafka's LogTruncationException.divergentOffsets has it) or,
	// when exact, the epoch of the record just before it that both logs
	// share; NoEpoch if neither is known. NoOffset/NoEpoch for other kinds.
	Divergent Position
	// Resume is, for Diverged, where reading the new lineage continues:
	// the position ThenRewind moved to, or the one to seek to (with
	// AtEpoch) after ThenHalt. Its offset is Divergent's; its epoch is
	// the epoch of the leader's record before it when that is certain and
	// NoEpoch otherwise (the leader may have echoed an epoch it does not
	// have, and a wrong epoch would make a later validation report a
	// divergence that is not there); the first batch then supplies it.
	// NoOffset/NoEpoch for other kinds.
	Resume Position
	// Exact is true when the lineage proves Divergent is the first
	// replaced offset (of those the leader still holds: records below its
	// log start were deleted by retention and nobody can compare them).
	// When false, Divergent is an upper bound: the leader confirms
	// everything consumed from Divergent on is gone, but records consumed
	// before it, outside what the lineage remembers, may be gone too (this
	// is the precision of Kafka's own LogTruncationException).
	Exact bool
	// Replaced is the delivered offsets that are no longer in the log:
	// [Divergent, Consumed) for Diverged (from the first offset consumed
	// if that is later: a reset or seek started above the divergence),
	// [0, Consumed) for Recreated (from the first offset consumed, when
	// the lineage saw everything consumed since a reset or seek, and
	// empty when nothing was consumed since; a bound rewind leaves what
	// was consumed below it out of the lineage), and
	// [?, Consumed) (From = NoOffset, an unknown suffix) for Unlocated and
	// PastLogEnd; empty for BelowLogStart.
	Replaced Range
	// Skipped is, for BelowLogStart, the offsets [Consumed, log start) that
	// were never delivered and can no longer be read; empty otherwise.
	Skipped Range
	// EpochPruned is true, for Diverged, when the leader no longer knows
	// the epoch it was asked about: its answer named that epoch with an end
	// offset the lineage proves cannot be that epoch's end (at or below a
	// record consumed in an earlier epoch), which is the answer
	// LeaderEpochFileCache.endOffsetFor gives for an epoch older than every
	// epoch it keeps: the start offset of its oldest one. Everything
	// consumed from that offset on is gone; what was consumed below it
	// cannot be compared (the leader keeps no epoch there). Divergent is
	// that offset without an epoch, and Exact is false.
	EpochPruned bool
	// Then is what the machine does next.
	Then Then
}

// String formats the report the way the scenario scripts print it.
func (t Truncation) String() string {
	var b strings.Builder
	b.WriteString(t.Kind.String())
	b.WriteString(" consumed=")
	b.WriteString(t.Consumed.String())
	if t.Kind == Diverged {
		b.WriteString(" divergent=")
		b.WriteString(t.Divergent.String())
		if t.Resume != t.Divergent {
			b.WriteString(" resume=")
			b.WriteString(t.Resume.String())
		}
		if t.Exact {
			b.WriteString(" exact")
		} else {
			b.WriteString(" bound")
		}
		if t.EpochPruned {
			b.WriteString(" epoch-pruned")
		}
	}
	if !t.Replaced.Empty() {
		b.WriteString(" replaced=")
		b.WriteString(t.Replaced.String())
	}
	if !t.Skipped.Empty() {
		b.WriteString(" skipped=")
		b.WriteString(t.Skipped.String())
	}
	b.WriteString(" then=")
	b.WriteString(t.Then.String())
	return b.String()
}

// String formats the action the way the scenario scripts print it.
func (a Action) String() string {
	switch a.Kind {
	case ActFetch:
		f := a.Fetch
		return "fetch #" + strconv.FormatUint(uint64(f.Req), 10) +
			" leader=" + strconv.Itoa(int(f.Leader)) +
			" offset=" + strconv.FormatInt(f.Offset, 10) +
			" current-epoch=" + epochString(f.CurrentLeaderEpoch) +
			" last-fetched-epoch=" + epochString(f.LastFetchedEpoch) + validatesString(f.Validates)
	case ActValidate:
		v := a.Validate
		return "validate #" + strconv.FormatUint(uint64(v.Req), 10) +
			" leader=" + strconv.Itoa(int(v.Leader)) +
			" epoch=" + epochString(v.Epoch) +
			" current-epoch=" + epochString(v.CurrentLeaderEpoch)
	case ActListOffsets:
		l := a.List
		s := "list-offsets #" + strconv.FormatUint(uint64(l.Req), 10) +
			" leader=" + strconv.Itoa(int(l.Leader)) + " " + l.Spec.String()
		if l.Spec == ListTimestamp {
			s += "=" + strconv.FormatInt(l.Timestamp, 10)
		}
		return s + " current-epoch=" + epochString(l.CurrentLeaderEpoch)
	case ActRefreshMetadata:
		return "refresh-metadata " + a.Refresh.String()
	case ActReport:
		return "report " + a.Report.String()
	case ActHalt:
		switch a.Halt.Reason {
		case HaltError:
			return "halt error " + a.Halt.Code.String()
		case HaltUnvalidated:
			return "halt unvalidated"
		}
		return "halt break"
	case ActResolved:
		return "resolved " + a.Resolved.Requested.String() + " -> " + a.Resolved.Position.String()
	}
	return a.Kind.String()
}

func validatesString(v bool) string {
	if v {
		return " validates"
	}
	return ""
}
