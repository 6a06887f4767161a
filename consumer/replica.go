package consumer

// KIP-392 fetch from follower: the pure rules deciding where a partition's
// fetches go and what an answer changes about it. The seek machine knows
// nothing of replicas: it names the leader in every FetchRequest, and the
// consumer sends the fetch to the replica the leader named while that
// choice stands. The answers are stepped into the machine as the leader's
// would be, with two exceptions decided here (replicaStep).

import (
	"time"

	"github.com/kepoch/kepoch/seek"
)

// readReplica is the replica a partition's leader named (PreferredReadReplica
// in its Fetch answer) for the partition's fetches; noReplica names none
// (the zero value names broker 0 in epoch 0).
type readReplica struct {
	// id is the replica's broker, seek.NoBroker when none.
	id int32
	// leader and epoch are the leader that named it and its epoch: the
	// choice is the leader's for that epoch only.
	leader, epoch int32
	// until is when the leader is asked again (the metadata max age after
	// it named the replica, as Java's client does); zero: never.
	until time.Time
}

var noReplica = readReplica{id: seek.NoBroker, leader: seek.NoBroker, epoch: seek.NoEpoch}

// stands reports whether r still directs the fetches of a partition whose
// leader is leader in epoch: it names a replica, the leader and the epoch
// are the ones that named it, it has not expired, and usable says that
// metadata knows the broker (and does not list it offline for the
// partition). A replica that does not stand is dropped: fetches go to the
// leader, which may name one again.
func (r readReplica) stands(leader, epoch int32, now time.Time, usable bool) bool {
	return r.id >= 0 && r.leader == leader && r.epoch == epoch && leader >= 0 &&
		(r.until.IsZero() || now.Before(r.until)) && usable
}

// fetchReply is what one partition of a Fetch answer (or the failure of
// the whole request) says, as the replica rules need it.
type fetchReply struct {
	// from is the broker that answered; leader and epoch are the leader
	// and epoch the fetch was sent for (from != leader: a replica's).
	from, leader, epoch int32
	// code is the partition's error, or the request's (a transport
	// error is seek.CodeNetworkException); seek.CodeNone when answered.
	code seek.Code
	// diverging: the answer carries a DivergingEpoch.
	diverging bool
	// records: the answer carries record batches.
	records bool
	// named is the answer's PreferredReadReplica (seek.NoBroker: none, or
	// a Fetch below v11), and namedUsable whether metadata knows it (and
	// does not list it offline for the partition).
	named       int32
	namedUsable bool
}

// replicaStep is how the consumer steps an answer into the machine.
type replicaStep uint8

const (
	// stepAsIs: step the answer as it is (the leader's answer, or the
	// replica's records, DivergingEpoch or error, which the machine
	// judges exactly like the leader's: the replica checks the fetch's
	// CurrentLeaderEpoch and LastFetchedEpoch against its own log).
	stepAsIs replicaStep = iota
	// stepRefetch: the replica answered OFFSET_OUT_OF_RANGE. That says
	// nothing about the partition's log (a replica's high watermark and
	// log start lag the leader's), so it is not the machine's out-of-range
	// classification, never a reset nor a truncation: the fetch ends with
	// nothing fetched (FetchCompleted) and the next goes to the leader,
	// whose answer is judged as usual.
	stepRefetch
	// stepUnusable: the leader answered without records, naming a replica
	// metadata does not know (or lists offline). The partition cannot be
	// read there: the fetch fails as REPLICA_NOT_AVAILABLE, so the machine
	// refreshes metadata and asks the leader again after the retry
	// backoff (at once, it would only be redirected again at once).
	stepUnusable
)

// afterReply returns what a (not stale) answer leaves of the partition's
// read replica r, and how it is stepped. maxAge is how long a replica the
// leader named is kept (≤ 0: until something else drops it).
//
// The leader's answer decides: a replica it names (other than itself, with
// no error and no DivergingEpoch) replaces r, anything else drops r. A
// replica's answer cannot name another (Kafka's replicas never do; a broker
// that did could bounce the partition between two replicas forever): r
// stays while the replica answers without error, and any error drops it.
func afterReply(r readReplica, a fetchReply, now time.Time, maxAge time.Duration) (readReplica, replicaStep) {
	if a.from != a.leader {
		switch {
		case a.code == seek.CodeNone:
			return r, stepAsIs
		case a.code == seek.CodeOffsetOutOfRange:
			return noReplica, stepRefetch
		default:
			return noReplica, stepAsIs
		}
	}
	if a.code != seek.CodeNone || a.diverging || a.named < 0 || a.named == a.leader || a.leader < 0 {
		return noReplica, stepAsIs
	}
	if !a.namedUsable {
		if a.records {
			return noReplica, stepAsIs // the records are the leader's
		}
		return noReplica, stepUnusable
	}
	next := readReplica{id: a.named, leader: a.leader, epoch: a.epoch}
	if maxAge > 0 {
		next.until = now.Add(maxAge)
	}
	return next, stepAsIs
}

// unusableRun is a partition's run of answers that leave it unread
// because of its read replica: the leader naming a replica it cannot be
// read from (stepUnusable), or the replica it named failing the fetch.
// While it lasts, the partition is not read at all, only redirected. A run
// long enough is reported once (Fetches.Errors), so that a leader that
// keeps naming an unreachable broker (a custom replica.selector.class, a
// broker advertising a listener this client cannot reach) is not a silent
// stall.
type unusableRun struct {
	// since is the first answer of the run; zero: no run.
	since time.Time
	// replica is the broker the last answer of the run named or came
	// from, leader the leader that named it.
	replica, leader int32
	// failed is the error the replica last answered (its transport
	// error: seek.CodeNetworkException), seek.CodeNone when the last
	// answer of the run was a redirect to a replica metadata does not
	// list or lists offline.
	failed seek.Code
	// reported: the run was reported; it is not again.
	reported bool
}

// afterUnusable returns what a (not stale) answer a, stepped as step
// (afterReply), leaves of the partition's run u, and whether the run is to
// be reported now: at the first answer extending it at least bound after
// the run's first (bound 0: at the first), once per run.
//
// A redirect to an unusable replica starts or extends the run (the replica
// named may change: the partition is still not read), and so does an error
// from the replica the leader named (a transport error included): the
// leader will name it again, and a replica that always fails leaves the
// partition as unread as one that is not listed. The leader's redirect to
// a usable replica neither starts, extends nor ends it: nothing was read
// yet. Any other answer without error ends it: the partition was read
// (records, none new, a DivergingEpoch, the leader naming no replica, or
// the replica's own answer), so a later run is a new one and is reported
// again. Any other error neither ends nor extends it: the partition was
// not read then either, and the next answer finds the run as it was.
func afterUnusable(u unusableRun, a fetchReply, step replicaStep, now time.Time, bound time.Duration) (unusableRun, bool) {
	replica, failed := int32(0), seek.CodeNone
	switch {
	case step == stepUnusable:
		replica = a.named
	case a.from != a.leader && a.code != seek.CodeNone:
		replica, failed = a.from, a.code
	case a.from == a.leader && a.code == seek.CodeNone && !a.diverging && !a.records &&
		a.named >= 0 && a.named != a.leader && a.namedUsable:
		return u, false // redirected to a replica not yet tried: nothing read
	case a.code == seek.CodeNone:
		return unusableRun{}, false
	default:
		return u, false
	}
	if u.since.IsZero() {
		u = unusableRun{since: now}
	}
	u.replica, u.leader, u.failed = replica, a.leader, failed
	if u.reported || now.Sub(u.since) < bound {
		return u, false
	}
	u.reported = true
	return u, true
}
