package seek

// Nearest is the SeekToNearest resolution of KIP-320: given a position
// (offset, epoch) that was read in epoch, and the leader's answer to
// OffsetForLeaderEpoch(epoch), it returns where to continue: the offset
// itself if the leader still has it (the epoch ends at or after it), else
// the end of that epoch on the leader, which is the first offset of the next
// larger epoch. The result is min(offset, answer.EndOffset).
//
// The result's epoch is the epoch of the leader's record just before it
// when that is known: the epoch itself if the offset is kept in it, the
// answer's epoch if the position moves to where that epoch ends; NoEpoch
// when the leader never had the epoch and the offset is kept (the record
// before it is in some older epoch). A wrong epoch would make the next
// validation report a divergence that is not there.
//
// If the leader no longer has the epoch at all (it answers a smaller epoch)
// and that smaller epoch ends at or after the offset, the offset is kept:
// the leader's records there are ones the reader has not seen, so moving
// forward would skip them. ok is false when the leader could not locate the
// epoch (a -1/-1 answer): there is no nearest offset, and the caller falls
// back to its reset policy.
func Nearest(want Position, answer EpochEnd) (p Position, ok bool) {
	if answer.Undefined() {
		return Position{Offset: NoOffset, Epoch: NoEpoch}, false
	}
	if answer.EndOffset < want.Offset {
		return normal(Position{Offset: answer.EndOffset, Epoch: answer.Epoch}), true
	}
	if answer.Epoch < want.Epoch {
		// The leader's record before the offset is in some epoch ≤
		// answer.Epoch; which one is unknown, and a wrong claim would
		// fail the next validation. Continue without one.
		return Position{Offset: want.Offset, Epoch: NoEpoch}, true
	}
	return normal(Position{Offset: want.Offset, Epoch: want.Epoch}), true
}

// outcome is what one leader answer says about a checked position.
type outcome uint8

const (
	// outConsistent: the leader has the checked position's epoch up to
	// (at least) the checked offset.
	outConsistent outcome = iota + 1
	// outUndefined: the leader cannot locate the epoch (-1/-1).
	outUndefined
	// outExact: the log diverges exactly at verdict.at.
	outExact
	// outBound: the log diverges at or before verdict.at; the lineage
	// cannot tell how far before.
	outBound
	// outRecheck: the log diverges at or before verdict.at; ask the leader
	// about verdict.recheck (our epoch just below at) to find out.
	outRecheck
	// outPruned: the answer is the leader's echo of an epoch it no longer
	// has (see compare); the log diverges at or before verdict.at, and the
	// leader keeps no epoch below it to narrow with.
	outPruned
)

type verdict struct {
	out     outcome
	at      Position // divergence candidate, as reported
	resume  Position // the position a rewind to it takes
	recheck Position // outRecheck: (at.Offset, our epoch of record at.Offset-1)
}

// compare judges the leader's answer for epoch check.Epoch against the
// consumed position check and the lineage of what was consumed. It is the
// single place that decides truncation; the OffsetForLeaderEpoch path and
// the in-band Fetch DivergingEpoch path both come here.
//
// With (E, End) the answer and (c, r) the check:
//
//   - E or End is -1: the leader cannot tell (undefined).
//   - E = r, but End is at or below the first offset we consumed in the
//     epoch before r: the leader no longer has r and echoed it with the
//     start of its oldest epoch (pruned): the log diverges at or before
//     End, a bound without an epoch.
//   - E ≥ r: the leader has our epoch. End ≥ c means nothing we consumed is
//     gone (consistent); otherwise the candidate is End.
//   - E < r: the leader never had our epochs above E, so every record we
//     consumed in them is gone, as is every record of epoch E from End on:
//     the candidate is min(End, first offset we consumed above E). Kafka's
//     own consumer only compares End with c and misses the case End ≥ c
//     (protocol.md §3.13, §6 item 8); the broker flags it in-band.
//
// The candidate d is exact if nothing was consumed below it in this
// lineage. Otherwise it is checked against our epoch of record d-1: if it is
// E, both logs hold the same record there (same offset, same epoch) and
// everything before it, so d is exact; if it is smaller, the leader must be
// asked about that epoch too (a log that diverged twice, e.g. after two
// unclean elections), exactly as a follower iterates; if the lineage does
// not know, d is the best bound (what Kafka reports). Narrowing combines
// several answers, which is sound only because they all come from one
// leader epoch: every OffsetForLeaderEpoch carries CurrentLeaderEpoch and
// a broker that moved on answers FENCED_LEADER_EPOCH, which restarts the
// narrowing against the new leader.
func compare(check Position, answer EpochEnd, l *Lineage) verdict {
	if answer.Undefined() {
		return verdict{out: outUndefined}
	}
	c, r := check.Offset, check.Epoch
	if s, ok := l.startBefore(r); ok && answer.Epoch == r && answer.EndOffset <= s {
		// The leader names our epoch r with an end at or below s, a
		// record we consumed in an earlier epoch. That cannot be where r
		// ends in any log holding our records of r: one leader writes
		// all of epoch r, so r starts at the same offset in every log
		// that has it, after every record of an earlier epoch (after s),
		// and a leader that has r answers its end at or after that start
		// (the next cached epoch's start, or its log end for its latest
		// epoch). The one answer that names r and can end there is
		// LeaderEpochFileCache.endOffsetFor's for an epoch older than all
		// it keeps: (r, start of its oldest cached epoch). So the leader
		// no longer has r (retention pruned it, or it never had it), its
		// records from End on are in epochs above r, and each record we
		// consumed from End on (all in epochs ≤ r) differs from the
		// leader's: the log diverges at or before End. Below End the
		// leader has no epoch to compare with; asking about our older
		// epochs would only echo End again and look like agreement.
		// Report End, without an epoch, as a bound.
		at := Position{Offset: answer.EndOffset, Epoch: NoEpoch}
		return verdict{out: outPruned, at: at, resume: at}
	}
	var d int64
	if answer.Epoch >= r {
		if answer.EndOffset >= c {
			return verdict{out: outConsistent}
		}
		d = answer.EndOffset
	} else {
		if c <= 0 {
			return verdict{out: outConsistent} // nothing consumed to lose
		}
		d = min(answer.EndOffset, l.firstAbove(answer.Epoch, c))
		if d >= c {
			return verdict{out: outConsistent}
		}
	}
	// The report names d with the leader's epoch that ends there when d
	// is the end the leader answered (Kafka's divergent offset and epoch),
	// or with our epoch of record d-1 when the two logs agree there.
	//
	// The position a rewind to d takes (resume) must carry the epoch of the
	// leader's record d-1, or none: a wrong claim would make a later
	// validation report a divergence that is not there. The answered epoch
	// is certain only when it is below the one asked about (then it is a
	// cache entry followed by another, so its range is not empty). An
	// answer with the epoch asked about may be an echo: a leader whose
	// retained log starts after that epoch echoes it with its log start
	// (LeaderEpochFileCache.endOffsetFor), and the record before is gone or
	// in another epoch.
	at := Position{Offset: d, Epoch: NoEpoch}
	resume := at
	if d == answer.EndOffset {
		at.Epoch = answer.Epoch
		if answer.Epoch < r {
			resume.Epoch = answer.Epoch
		}
	}
	if from, ok := l.consumedFrom(); d <= 0 || ok && d <= from {
		// Nothing was consumed below d in this lineage: every consumed
		// record is gone, and d is where the leader's log departs.
		return verdict{out: outExact, at: at, resume: resume}
	}
	ours, known := l.epochAt(d - 1)
	switch {
	case !known || ours > answer.Epoch:
		return verdict{out: outBound, at: at, resume: resume}
	case ours == answer.Epoch:
		agreed := Position{Offset: d, Epoch: ours}
		return verdict{out: outExact, at: agreed, resume: agreed}
	}
	return verdict{out: outRecheck, at: at, resume: resume, recheck: Position{Offset: d, Epoch: ours}}
}
