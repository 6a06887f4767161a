package producer

// recovery_ledger.go: detection of acknowledged writes lost after a leader
// change (unclean election, truncation). No Kafka client does this: they all
// forget a write once it is acknowledged.

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// AckedRange is one acknowledged batch (or several contiguous ones of the same
// producer identity) as recorded in an AckLedger.
type AckedRange struct {
	// From and To bound the offsets, [From, To).
	From, To int64
	// LeaderEpoch is the partition leader epoch the records were appended
	// under.
	LeaderEpoch int32
	// EpochExact says LeaderEpoch is known to be the append epoch. Produce
	// responses do not carry it: the I/O layer knows only the epoch its
	// metadata had for the leader when it sent the batch, which differs
	// from the append epoch if the leader's epoch changed in between
	// without the client noticing. The epoch argument is not applied to an
	// inexact range either way: its offsets are read (a Probe) after each
	// leader change until a probe finds it, which makes it exact.
	EpochExact bool
	// Producer and FirstSequence identify the records (for Probe).
	Producer      ProducerID
	FirstSequence int32
	// TailFrom and TailCRC identify, when HasTailCRC is set, a range
	// without a producer identity (for Probe): its newest batch holds
	// [TailFrom, To) and the CRC-32C of its v2 header is TailCRC. The CRC
	// covers the batch's attributes, last offset delta, timestamps,
	// producer fields and records: everything but what the broker sets
	// (base offset, partition leader epoch) and the length and magic.
	// Record takes a TailFrom below From as From.
	TailFrom   int64
	TailCRC    uint32
	HasTailCRC bool
}

// EpochQuery is an OffsetForLeaderEpoch question the ledger needs answered
// for one partition: send LeaderEpoch = Epoch and CurrentLeaderEpoch =
// CurrentLeaderEpoch (so that only that leader answers; FENCED_LEADER_EPOCH or
// UNKNOWN_LEADER_EPOCH mean "ask again after a metadata refresh", with the
// same query).
type EpochQuery struct {
	TP                 TopicPartition
	Epoch              int32
	CurrentLeaderEpoch int32
	id                 uint64
}

// EpochEnd is an OffsetForLeaderEpoch answer without error: the largest epoch
// ≤ the requested one that the leader knows, and where it ends in the leader's
// log. (-1, -1) means the leader could not tell.
type EpochEnd struct {
	Epoch     int32
	EndOffset int64
	// LogStartOffset is the leader's log start offset (ListOffsets,
	// EARLIEST), needed only when AckLedger.NeedsLogStart says so: the
	// answer names the epoch asked about, and may be the leader's echo
	// of an epoch it no longer keeps (see ApplyEpochEnd). -1: unknown,
	// and such an answer is taken for an echo.
	LogStartOffset int64
}

// Probe asks the I/O layer to fetch record batch headers from the leader,
// starting at Offset (a Fetch with CurrentLeaderEpoch = CurrentLeaderEpoch;
// the headers are enough), and report them with ApplyProbe. It confirms or
// refutes losses judged on an inexact epoch.
//
// A Tail probe reads only the one batch holding Offset (the broker returns
// the batch containing the offset, and always at least one batch whatever
// MaxBytes says): the newest acknowledged batch of one producer identity
// (or of the ranges without one).
// It needs no log end offset (ProbeResult.LogEndOffset may be -1) and a
// small fetch suffices; when it does not confirm the identity's ranges,
// the next Probe walks them.
type Probe struct {
	TP                 TopicPartition
	Offset             int64
	CurrentLeaderEpoch int32
	Tail               bool
	id                 uint64
	tail               ProducerID // the identity a tail probe is for
}

// ProbedBatch is one fetched record batch header.
type ProbedBatch struct {
	BaseOffset    int64
	LastOffset    int64 // BaseOffset + LastOffsetDelta
	LeaderEpoch   int32 // PartitionLeaderEpoch
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	CRC           uint32 // the header's CRC-32C
}

// ProbeResult is what a Probe's fetch found.
type ProbeResult struct {
	// LogStartOffset is the leader's log start offset; -1 unknown.
	// Acknowledged records below it were removed by retention (or
	// DeleteRecords) if they were in the log when it moved: see
	// ApplyProbe for those that may have been lost before.
	LogStartOffset int64
	// LogEndOffset is the leader's log end offset (OffsetForLeaderEpoch for
	// the current leader epoch answers it); -1 unknown. Acknowledged
	// records at or above it are gone.
	LogEndOffset int64
	// Batches are the fetched batch headers, in offset order.
	Batches []ProbedBatch
}

// AckedWritesLost reports acknowledged records that are no longer in the
// partition's log: the offsets [From, To) written under LeaderEpoch by
// Producer, starting at FirstSequence, are missing from the log of the leader
// of CurrentLeaderEpoch. Reported once per range.
type AckedWritesLost struct {
	TP                 TopicPartition
	From, To           int64
	LeaderEpoch        int32
	Producer           ProducerID
	FirstSequence      int32
	CurrentLeaderEpoch int32
	// Unconfirmed: the range may be gone, but the leader's log cannot say
	// (its epoch is not known to be its append epoch, so the epoch
	// argument says nothing about it, and no batch header confirms it
	// either way: records without a producer identity whose newest batch
	// is not found as acknowledged, offsets in a gap compaction may
	// have left, or offsets the log start has passed, removed by
	// retention or cut by an unclean election before). It is no longer
	// tracked; the application decides what to check.
	Unconfirmed bool
	// Untracked (with Unconfirmed): the range is offsets whose
	// acknowledged ranges the ledger's bound (AckLedgerRanges) had
	// dropped, reported because a loss reached the oldest range it still
	// held: what was acknowledged below that range may be gone too, and
	// the ledger cannot tell. Offsets in it may be other producers';
	// LeaderEpoch is -1, Producer NoProducerID and FirstSequence -1.
	// Reported once per offset.
	Untracked bool
	// Err (with Unconfirmed) says the range was not verified at all
	// after the leader change: the check (OffsetForLeaderEpoch, or the
	// fetch of batch headers confirming it) failed for good, or kept
	// failing past its bounded retries, and Err is the last attempt's
	// error (matching ErrAckCheckFailed). The records may be in the
	// log or gone; the producer no longer tracks them. It is nil for a
	// range the leader's log was read for.
	Err error
}

// CheckResult is the outcome of one answer applied to the ledger.
type CheckResult struct {
	// Lost are the acknowledged ranges now known to be gone.
	Lost []AckedWritesLost
	// Unconfirmed are ranges on an inexact epoch (or that an answer
	// could not place) that a probe could not confirm either way because
	// they carry no producer identity (records of a non-idempotent
	// producer) and their newest batch was not found with its CRC,
	// because their offsets lie in a gap (compaction) that nothing of
	// theirs follows, or because the log start passed them before they
	// were found in the current leader's log. They may be lost; they are no longer
	// tracked. Each has Unconfirmed set. From AbandonQuery
	// and AbandonProbe: the ranges a check that could not be made was to
	// verify, each with Err set too.
	Unconfirmed []AckedWritesLost
	// Unknown: the answer could not settle anything by epochs ((-1, -1),
	// or an epoch above the one asked). The ranges it was about are
	// probed (Probe: their batches looked for at their offsets, losses
	// reported from what the probe finds); ranges of a later epoch,
	// recorded while the question was out, are asked about (Next).
	Unknown bool
	// Stale: the answer belongs to a query or probe that was superseded
	// (a newer leader epoch was observed); it was ignored.
	Stale bool
	// Next is a further OffsetForLeaderEpoch question, for an older write
	// epoch this answer did not settle. It is needed only when something
	// was lost in a newer epoch or a range's survival cannot be derived.
	Next *EpochQuery
	// Probe is a fetch needed to confirm losses judged on inexact epochs.
	// At most one probe per partition is outstanding: while one is, later
	// results leave this nil and its ApplyProbe covers the new suspects
	// too (continuing with a further Probe if needed).
	Probe *Probe
}

// ledgerEntry is one recorded range and what is known about it.
type ledgerEntry struct {
	AckedRange
	// presentIn is a leader epoch in whose log the range is known to be:
	// its append epoch, or the leader epoch of the last check it passed.
	presentIn int32
	// checked: settled for the partition's current leader epoch.
	checked bool
	// suspect: judged lost on an inexact epoch, waiting for a probe.
	suspect bool
	// rec orders the acknowledgements of the ranges without a producer
	// identity: the Record call of the range's newest batch.
	rec uint64
}

type ledgerPart struct {
	entries     []*ledgerEntry // by From
	leaderEpoch int32          // highest leader epoch observed; -1 none
	query       *EpochQuery
	probe       *Probe
	// walk: identities whose tail probe did not confirm all their
	// suspect ranges since the last leader change; they are walked.
	walk      map[ProducerID]bool
	forgotten int64 // the bound dropped ranges ending at or below this offset
	// forgottenFrom is the lowest offset of a dropped range (-1: none);
	// forgottenTold how far the dropped offsets were reported Untracked.
	forgottenFrom, forgottenTold int64
}

// DefaultLedgerRanges is the default bound on ranges kept per partition.
const DefaultLedgerRanges = 1024

// AckLedger remembers, per partition, a bounded number of acknowledged offset
// ranges with the leader epoch they were appended under, and finds the ones
// that a new leader no longer has.
//
// After a leader epoch change (ObserveLeaderEpoch), it asks one
// OffsetForLeaderEpoch question: the end offset, in the new leader's log, of
// the newest epoch it has acknowledged writes in. The answer (a, end) settles
// every range written under an epoch ≥ a:
//
//   - written under an epoch in (a, asked]: the new leader never had that
//     epoch, so none of its records; the range is lost;
//   - written under a: the part at or beyond end is lost, the part below
//     survives;
//
// and, by log matching (two logs holding a record with the same offset and
// epoch are identical up to it), a surviving range written under a also
// proves every older range below it that was known present in the same log.
// Only when something was lost, or no such anchor exists, does the ledger
// ask again for an older epoch (CheckResult.Next). A (-1, -1) answer settles
// nothing by epochs: the ranges it was about are probed instead.
//
// All of this holds only for a range's true append epoch. A range whose
// epoch is not exact (AckedRange.EpochExact: the client's metadata may have
// lagged the leader's epoch) is judged by nothing but a Probe (a fetch of
// batch headers), whatever the answer says: appended under a later epoch
// that a later unclean election cut away, its offsets may hold records of
// the recorded epoch in the new leader's log, which the answer then places
// past it. The probe confirms it present (it becomes exact, and an anchor
// from then on) or lost by producer identity and sequence at its offsets;
// without a producer identity it is reported Unconfirmed. An inexact range
// is never an anchor, nor anchored.
//
// Probes read the tail first: for each producer identity with suspect
// ranges, the one batch holding the last offset of its newest range (a
// Probe with Tail). Found there with the identity and the sequence
// acknowledged at that offset, its header gives that range's append epoch
// et; the leader of et appended it, and the current log holds it under et,
// so that log up to it is et's leader's log when it appended it (log
// matching), which held whatever that leader had acknowledged before. So
// every suspect range of the identity below the tail, in sequence before
// it and recorded under et, is in the log at its offsets (it was sent while
// the leader of et led; appended later, under a higher epoch, its sequence
// would follow the tail's): all become exact with one fetch. The sequence
// chain alone would not do: a leader holding no state for the producer
// (its records cut by an unclean election, or its state expired) accepts
// any sequence (Kafka 2.5 on), so the tail can be present with everything
// before it gone; such a tail carries a later epoch than its range was
// recorded under, and only its own batch is confirmed. What the tail does
// not confirm (not found, not ours, past the log end, or recorded under
// another epoch) is walked from the identity's oldest suspect range, one
// fetch per 4 MiB: the walk's cost is paid when something may be wrong.
//
// Ranges without a producer identity (a non-idempotent producer's) are
// found by their newest batch instead: its base and last offsets and the
// CRC of its header (AckedRange.TailCRC), which covers its records,
// timestamps and producer fields but not what the broker sets. They count
// as one identity for the tail probe, its tail the range acknowledged last;
// found there under et, it confirms the earlier-acknowledged ranges
// recorded under et below it (such a producer sends a partition's next
// batch only once the previous one is answered, so acknowledgement order
// is append order, which sequences give otherwise). The walk confirms such
// a range by its own newest batch; without it, a range is lost from the
// log end if it reaches past it, Unconfirmed below. A merged range
// truncated within is reported in two parts, lost past the log end and
// Unconfirmed before it (only its newest batch's CRC is kept). A broker
// that rewrites batches (recompressing for the topic's compression.type,
// or LogAppendTime) changes their CRC: their ranges are reported
// Unconfirmed at each leader change, as without a CRC.
//
// The log start proves nothing either: offsets retention (or DeleteRecords)
// moved it past were removed only if they were in the log then. Only a range
// proven present in the current leader's log (exact, and recorded under its
// epoch or confirmed by a check against it) has its offsets below the log
// start dropped in silence. A suspect range was not: an inexact one was
// never found in the log since it was acknowledged (the tail probe confirms
// what it can before any walk), an exact one only in an older leader's log,
// and the leader change since may have been an unclean election that cut it
// before the log start passed it: those offsets are reported Unconfirmed,
// the rest of it is walked. Nor does an OffsetForLeaderEpoch answer at or
// below the log start prove a range present: it may be the leader's echo of
// an epoch it no longer keeps (see ApplyEpochEnd). That costs a report
// only where Kafka's answers cannot tell retention from loss: retention
// below the newest epoch the producer wrote under leaves that epoch's true
// end, which proves the older ranges through the log they were proven in;
// a partition the producer left idle until retention passed everything it
// wrote has its ranges reported Unconfirmed at the next leader change, once
// (TestLedgerCleanChangesAfterRetention). The bound's
// dropped offsets (Untracked) are reported below the log start too: whether
// they were ever proven present is no longer known.
//
// A range recorded under a leader epoch older than the newest one observed
// (acknowledged after the leader change was seen, by a batch sent before)
// is checked as soon as it is recorded (Record returns the check) unless an
// outstanding check covers it: it is not left for a leader change that may
// not come.
//
// The ledger is bounded: beyond its limit the oldest ranges are forgotten
// (Forgotten tells how far), and their loss can no longer be detected.
// When a loss (or a possible one) reaches the oldest range still held, the
// dropped offsets are reported Unconfirmed and Untracked, once: the
// application learns that acknowledged writes below the ones reported may
// be gone too. A check the I/O layer cannot make (its requests refused for
// good, or failing past their retries) is given up with AbandonQuery or
// AbandonProbe, which report its ranges Unconfirmed with Err: no range is
// dropped unverified without a report. It is pure (no I/O, no clock) and
// not safe for concurrent use.
type AckLedger struct {
	max    int
	parts  map[TopicPartition]*ledgerPart
	nextID uint64
	recs   uint64 // Record calls
}

// NewAckLedger returns a ledger keeping at most maxRanges ranges per partition
// (DefaultLedgerRanges if ≤ 0). Contiguous acknowledgements of one producer
// identity under one epoch share a range.
func NewAckLedger(maxRanges int) *AckLedger {
	if maxRanges <= 0 {
		maxRanges = DefaultLedgerRanges
	}
	return &AckLedger{max: maxRanges, parts: make(map[TopicPartition]*ledgerPart)}
}

func (l *AckLedger) part(tp TopicPartition) *ledgerPart {
	p := l.parts[tp]
	if p == nil {
		p = &ledgerPart{leaderEpoch: -1, forgotten: -1, forgottenFrom: -1, forgottenTold: -1}
		l.parts[tp] = p
	}
	return p
}

// seqPlus advances a sequence by n records, wrapping like NextSequence.
func seqPlus(seq int32, n int64) int32 {
	m := int64(math.MaxInt32) + 1
	return int32((int64(seq) + n%m) % m)
}

// Record adds an acknowledged range (from an Ack with BaseOffset ≥ 0:
// From = BaseOffset, To = BaseOffset + Records). A range that is empty,
// starts at a negative offset, has a negative leader epoch or a TailFrom at
// or beyond To (with HasTailCRC) is refused with an error matching
// errors.ErrInvalidArgument.
//
// A range recorded under a leader epoch older than the partition's highest
// observed one (the client's metadata lagged when it was sent) is not known
// to be in the current leader's log. When no outstanding check covers it,
// the result holds the one that does: a Probe for an inexact range
// (CheckResult.Probe; while a probe is outstanding the range waits for its
// continuation), an OffsetForLeaderEpoch question for an exact one
// (CheckResult.Next). Otherwise the result is empty.
func (l *AckLedger) Record(tp TopicPartition, r AckedRange) (CheckResult, error) {
	var res CheckResult
	switch {
	case r.From < 0:
		return res, invalidArgument("AckLedger.Record", "r", fmt.Sprintf("range [%d, %d) starts at a negative offset", r.From, r.To))
	case r.To <= r.From:
		return res, invalidArgument("AckLedger.Record", "r", fmt.Sprintf("range [%d, %d) is empty", r.From, r.To))
	case r.LeaderEpoch < 0:
		return res, invalidArgument("AckLedger.Record", "r", fmt.Sprintf("leader epoch %d is negative", r.LeaderEpoch))
	case r.HasTailCRC && r.TailFrom >= r.To:
		return res, invalidArgument("AckLedger.Record", "r", fmt.Sprintf("tail batch offset %d is not in the range [%d, %d)", r.TailFrom, r.From, r.To))
	}
	if !r.HasTailCRC || r.Producer.Valid() {
		r.TailFrom, r.TailCRC, r.HasTailCRC = 0, 0, false
	} else if r.TailFrom < r.From {
		r.TailFrom = r.From
	}
	p := l.part(tp)
	l.recs++
	e := &ledgerEntry{AckedRange: r, presentIn: r.LeaderEpoch, rec: l.recs}
	e.checked = r.LeaderEpoch >= p.leaderEpoch
	// Unchecked on arrival: judged at once unless a check outstanding
	// covers it. An inexact range waits for the outstanding probe's
	// continuation, or for the outstanding question (which makes it a
	// suspect), or is probed now; an exact one waits for the outstanding
	// question (or its Next), or is asked about now.
	probeNow := false
	if !e.checked && !r.EpochExact && (p.probe != nil || p.query == nil) {
		e.suspect = true
		probeNow = p.probe == nil
		if !l.hasSuspect(p, r.Producer) {
			// Its identity's tail was read since the leader change,
			// and nothing of it waits: read this one's tail too.
			delete(p.walk, r.Producer)
		}
	}
	askNow := !e.checked && r.EpochExact && p.query == nil
	if n := len(p.entries); n > 0 && !e.suspect {
		last := p.entries[n-1]
		if last.To == r.From && last.LeaderEpoch == r.LeaderEpoch && last.EpochExact == r.EpochExact &&
			last.Producer == r.Producer && (!r.Producer.Valid() || seqPlus(last.FirstSequence, last.To-last.From) == r.FirstSequence) &&
			last.presentIn == e.presentIn && last.checked == e.checked && !last.suspect {
			last.To = r.To
			last.TailFrom, last.TailCRC, last.HasTailCRC, last.rec = r.TailFrom, r.TailCRC, r.HasTailCRC, e.rec
			if askNow {
				res.Next = l.askNext(tp, p)
			}
			return res, nil
		}
	}
	i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].From > r.From })
	p.entries = append(p.entries, nil)
	copy(p.entries[i+1:], p.entries[i:])
	p.entries[i] = e
	for len(p.entries) > l.max {
		if p.entries[0].To > p.forgotten {
			p.forgotten = p.entries[0].To
		}
		if p.forgottenFrom < 0 || p.entries[0].From < p.forgottenFrom {
			p.forgottenFrom = p.entries[0].From
		}
		p.entries[0] = nil
		p.entries = p.entries[1:]
	}
	if askNow {
		res.Next = l.askNext(tp, p)
	}
	if probeNow {
		res.Probe = l.nextProbe(tp, p)
	}
	return res, nil
}

// askNext is nextQuery's question as CheckResult.Next.
func (l *AckLedger) askNext(tp TopicPartition, p *ledgerPart) *EpochQuery {
	if q, ok := l.nextQuery(tp, p); ok {
		return &q
	}
	return nil
}

// hasSuspect reports whether a range of id waits for a probe.
func (l *AckLedger) hasSuspect(p *ledgerPart, id ProducerID) bool {
	for _, e := range p.entries {
		if e.suspect && e.Producer == id {
			return true
		}
	}
	return false
}

// Ranges returns the ranges the ledger holds for tp, in offset order.
func (l *AckLedger) Ranges(tp TopicPartition) []AckedRange {
	p := l.parts[tp]
	if p == nil {
		return nil
	}
	out := make([]AckedRange, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.AckedRange
	}
	return out
}

// Forgotten returns the offset below which the bound has dropped ranges for
// tp (-1: none dropped). Losses below it cannot be detected.
func (l *AckLedger) Forgotten(tp TopicPartition) int64 {
	if p := l.parts[tp]; p != nil {
		return p.forgotten
	}
	return -1
}

// Forget drops everything about tp: when the topic is deleted or recreated
// (its topic ID changed), leader epochs and offsets start over.
func (l *AckLedger) Forget(tp TopicPartition) { delete(l.parts, tp) }

// ObserveLeaderEpoch tells the ledger tp's leader epoch (from metadata). When
// it is higher than any seen before and some ranges are not known to be in
// that leader's log, it returns the one OffsetForLeaderEpoch question to ask;
// repeated observations of the same epoch ask nothing. A newer epoch
// supersedes any question or probe still unanswered.
func (l *AckLedger) ObserveLeaderEpoch(tp TopicPartition, leaderEpoch int32) (EpochQuery, bool) {
	p := l.part(tp)
	if leaderEpoch <= p.leaderEpoch {
		return EpochQuery{}, false
	}
	p.leaderEpoch = leaderEpoch
	p.query, p.probe, p.walk = nil, nil, nil
	for _, e := range p.entries {
		e.suspect = false
		e.checked = e.presentIn >= leaderEpoch
	}
	return l.nextQuery(tp, p)
}

// Recheck asks again about every range of tp against the leader of
// currentLeaderEpoch, even ranges already checked: for when the producer's
// sequence state says acknowledged writes are gone (Decision.CheckAckedWrites)
// without a leader change having been seen.
func (l *AckLedger) Recheck(tp TopicPartition, currentLeaderEpoch int32) (EpochQuery, bool) {
	p := l.part(tp)
	if currentLeaderEpoch < p.leaderEpoch {
		return EpochQuery{}, false
	}
	p.leaderEpoch = currentLeaderEpoch
	p.query, p.probe, p.walk = nil, nil, nil
	for _, e := range p.entries {
		e.suspect = false
		e.checked = false
	}
	return l.nextQuery(tp, p)
}

// nextQuery asks about the newest write epoch among unchecked ranges.
func (l *AckLedger) nextQuery(tp TopicPartition, p *ledgerPart) (EpochQuery, bool) {
	newest := int32(-1)
	for _, e := range p.entries {
		if !e.checked && !e.suspect && e.LeaderEpoch > newest {
			newest = e.LeaderEpoch
		}
	}
	if newest < 0 {
		return EpochQuery{}, false
	}
	l.nextID++
	q := EpochQuery{TP: tp, Epoch: newest, CurrentLeaderEpoch: p.leaderEpoch, id: l.nextID}
	p.query = &q
	return q, true
}

// Wants reports whether q is still the question the ledger waits on for
// its partition: false once it was answered, or superseded by a newer
// leader epoch, a Recheck or a Forget. A question it no longer wants is
// not worth sending (its answer would be Stale): in particular not again
// after the new leader refused it as fenced.
func (l *AckLedger) Wants(q EpochQuery) bool {
	p := l.parts[q.TP]
	return p != nil && p.query != nil && p.query.id == q.id
}

// WantsProbe is Wants for a probe.
func (l *AckLedger) WantsProbe(pr Probe) bool {
	p := l.parts[pr.TP]
	return p != nil && p.probe != nil && p.probe.id == pr.id
}

// ApplyEpochEnd applies the answer to q. Only the latest query of a partition
// is applied; others are Stale.
//
// An answer naming the epoch asked about, older than the current leader
// epoch, with an end at or below the leader's log start
// (ans.LogStartOffset; see NeedsLogStart) may be the leader's echo of an
// epoch it no longer keeps (mayEcho): it then says nothing about the
// offsets below it, which the log start has passed. An exact range of that
// epoch not proven in the current leader's log (provenIn) is not judged
// present there: its offsets below the end are reported Unconfirmed (an
// unclean election may have cut them before retention passed them), and
// those from the end on lost.
func (l *AckLedger) ApplyEpochEnd(q EpochQuery, ans EpochEnd) CheckResult {
	var res CheckResult
	p := l.parts[q.TP]
	if p == nil || p.query == nil || p.query.id != q.id {
		res.Stale = true
		return res
	}
	p.query = nil
	a, end := ans.Epoch, ans.EndOffset
	cur := q.CurrentLeaderEpoch
	// echo: the answer may not be where epoch a ends but the leader's
	// echo of an epoch older than every one it keeps (see
	// ApplyEpochEnd's doc): its end is then its oldest kept epoch's
	// start, its log start once retention has trimmed its epochs.
	echo := mayEcho(q, ans) && (ans.LogStartOffset < 0 || end <= ans.LogStartOffset)
	if a < 0 || end < 0 || a > q.Epoch {
		// The leader cannot place the epoch: the epoch argument says
		// nothing, and the whole of the epoch's writes may be gone. The
		// ranges are checked at their offsets instead (a Probe), not
		// left waiting in silence for a leader change that may not
		// come.
		res.Unknown = true
		for _, e := range p.entries {
			if !e.checked && !e.suspect && e.LeaderEpoch <= q.Epoch {
				e.suspect = true
			}
		}
		// Ranges of a later epoch, recorded while q was out, are asked
		// about next.
		res.Next = l.askNext(q.TP, p)
		res.Probe = l.nextProbe(q.TP, p)
		return res
	}
	// anchors: for each log (leader epoch) the surviving ranges were known
	// to be in, how far the new leader's log provably agrees with it.
	anchors := make(map[int32]int64)
	var kept []*ledgerEntry
	lose := func(e *ledgerEntry, from int64) {
		// The whole of the oldest range held: the bound's dropped
		// offsets below it may be gone too.
		oldest := from <= e.From && e == p.entries[0]
		if from > e.From {
			head := *e
			head.To = from
			head.TailFrom, head.TailCRC, head.HasTailCRC = 0, 0, false // not its newest batch
			l.survive(&head, cur, anchors)
			kept = append(kept, &head)
			e.FirstSequence = seqPlus(e.FirstSequence, from-e.From)
			e.From = from
		}
		res.Lost = append(res.Lost, lost(q.TP, e, cur))
		if oldest {
			l.untracked(&res, q.TP, p, cur)
		}
	}
	var undecided []*ledgerEntry
	for _, e := range p.entries {
		switch {
		case e.checked || e.suspect || e.LeaderEpoch > q.Epoch:
			kept = append(kept, e)
		case !e.EpochExact:
			// The epoch argument holds only for the append epoch:
			// under a later one (the client's metadata lagged) the
			// range's offsets may hold records of its recorded epoch
			// in the new leader's log that are not ours, its own
			// records truncated with the later epoch, however the
			// answer reads. Nor is it an anchor, nor anchored (the log
			// it is known to be in is not known). Its offsets are
			// read instead (a Probe).
			e.suspect = true
			kept = append(kept, e)
		case e.LeaderEpoch > a:
			lose(e, e.From)
		case e.LeaderEpoch == a && echo && echoed(e, end, cur):
			// Below end, its offsets are below the log start:
			// present in this log when retention passed them (a
			// true end), or cut by an unclean election before (an
			// echo). Nothing tells which: Unconfirmed. From end
			// on it is lost either way: epoch a ends there, or
			// the leader's log holds later epochs from there.
			head := *e
			head.To = min(e.To, end)
			res.Unconfirmed = append(res.Unconfirmed, unconfirmed(q.TP, &head, cur))
			if e == p.entries[0] {
				l.untracked(&res, q.TP, p, cur)
			}
			if e.To > end {
				e.FirstSequence = seqPlus(e.FirstSequence, end-e.From)
				e.From = end
				res.Lost = append(res.Lost, lost(q.TP, e, cur))
			}
		case e.LeaderEpoch == a && e.To <= end:
			l.survive(e, cur, anchors)
			kept = append(kept, e)
		case e.LeaderEpoch == a:
			lose(e, max(e.From, end))
		default:
			undecided = append(undecided, e)
			kept = append(kept, e)
		}
	}
	for _, e := range undecided {
		if agreed, ok := anchors[e.presentIn]; ok && e.To <= agreed {
			e.checked = true
			e.presentIn = cur
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].From < kept[j].From })
	p.entries = kept
	if nq, ok := l.nextQuery(q.TP, p); ok {
		res.Next = &nq
	}
	res.Probe = l.nextProbe(q.TP, p)
	return res
}

// provenIn reports whether e is known to have been in the log of the leader
// of cur: its epoch is exact (it was found in a log, or recorded so) and the
// log it was found in is cur's (recorded under cur, or confirmed by a check
// against cur's leader). Only then did a log start of cur's leader that has
// passed its offsets remove them by retention: proven in an older leader's
// log, an unclean election since may have cut it first.
func provenIn(e *ledgerEntry, cur int32) bool { return e.EpochExact && e.presentIn >= cur }

// mayEcho reports whether ans, naming the epoch q asked about, may be the
// leader's echo of an epoch it no longer keeps rather than where that epoch
// ends. Asked about an epoch older than every entry of its leader epoch
// cache, a Kafka broker answers the requested epoch with the start offset
// of its oldest entry (LeaderEpochFileCache.endOffsetFor; kfake answers it
// with its log start), and retention trims that cache as the log start
// moves, keeping the newest entry at or below it, moved to it. A broker
// that keeps the epoch answers where it ends: the next entry's start, not
// below its log start, and at it only when retention has passed the whole
// epoch; so an end at or below the log start proves nothing about the
// offsets below it, an end above it is where the epoch ends. The current
// leader epoch is always its latest (a new leader assigns it at once), and
// the answer for it is the log end: an echo is possible only for an older
// one. An end of 0 leaves nothing below it to judge.
func mayEcho(q EpochQuery, ans EpochEnd) bool {
	return ans.Epoch == q.Epoch && q.Epoch < q.CurrentLeaderEpoch && ans.EndOffset > 0
}

// echoed reports whether a possible echo ending at end decides e's fate
// differently from a true end: e is exact (inexact ranges are probed), has
// offsets below end (which a true end proves present), and is not proven
// in the current leader's log (then retention removed them either way).
func echoed(e *ledgerEntry, end int64, cur int32) bool {
	return e.EpochExact && e.From < end && !provenIn(e, cur)
}

// NeedsLogStart reports whether ans, the answer to q, may be the leader's
// echo of an epoch it no longer keeps (mayEcho) and ApplyEpochEnd's verdict
// depends on it: then the I/O layer asks the leader's log start (ListOffsets,
// EARLIEST) and passes it in ans.LogStartOffset. An end above the log start
// is where the epoch ends; at or below it, the answer cannot be told from an
// echo. Only for exact ranges of the epoch asked about: after a clean leader
// change whose ranges are all new, it costs nothing.
func (l *AckLedger) NeedsLogStart(q EpochQuery, ans EpochEnd) bool {
	if !l.Wants(q) || !mayEcho(q, ans) {
		return false
	}
	for _, e := range l.parts[q.TP].entries {
		if !e.checked && !e.suspect && e.LeaderEpoch == q.Epoch && echoed(e, ans.EndOffset, q.CurrentLeaderEpoch) {
			return true
		}
	}
	return false
}

// survive marks e as present in the log of leader epoch cur, and records it
// as an anchor for the log it was known present in before.
func (l *AckLedger) survive(e *ledgerEntry, cur int32, anchors map[int32]int64) {
	if e.To > anchors[e.presentIn] {
		anchors[e.presentIn] = e.To
	}
	e.checked = true
	e.presentIn = cur
}

func lost(tp TopicPartition, e *ledgerEntry, cur int32) AckedWritesLost {
	return AckedWritesLost{
		TP: tp, From: e.From, To: e.To, LeaderEpoch: e.LeaderEpoch,
		Producer: e.Producer, FirstSequence: e.FirstSequence, CurrentLeaderEpoch: cur,
	}
}

// nextProbe issues a probe unless one is already outstanding (ApplyProbe
// continues from whatever it did not reach): a tail probe for the lowest
// suspect range's identity if it has one not yet walked (see AckLedger),
// a walk from the lowest suspect range otherwise.
func (l *AckLedger) nextProbe(tp TopicPartition, p *ledgerPart) *Probe {
	if p.probe != nil {
		return nil
	}
	var first, tail *ledgerEntry
	for _, e := range p.entries {
		if !e.suspect {
			continue
		}
		if first == nil {
			first = e
		}
		if !tailable(e) || p.walk[e.Producer] {
			continue
		}
		if tail == nil || e.Producer == tail.Producer && newer(e, tail) {
			tail = e
		}
	}
	if first == nil {
		return nil
	}
	l.nextID++
	pr := Probe{TP: tp, Offset: first.From, CurrentLeaderEpoch: p.leaderEpoch, id: l.nextID}
	if tail != nil {
		pr.Offset, pr.Tail, pr.tail = tail.To-1, true, tail.Producer
	}
	p.probe = &pr
	return &pr
}

// tailable reports whether a tail probe can find e: by its producer
// identity and sequence, or (without an identity) by its newest batch's
// offsets and CRC.
func tailable(e *ledgerEntry) bool { return e.Producer.Valid() || e.HasTailCRC }

// newer reports whether e is a newer acknowledgement than t, of the same
// identity: by offset for a producer identity (its sequences follow its
// offsets in one log), by acknowledgement order without one.
func newer(e, t *ledgerEntry) bool {
	if e.Producer.Valid() {
		return e.To > t.To
	}
	return e.rec > t.rec
}

// applyTail applies a tail probe's fetch: the batch holding pr.Offset, the
// last offset of the identity's newest suspect range (the tail). Found with
// the tail's identity and sequence, it makes exact (its epoch is the
// batch's PartitionLeaderEpoch, et) the tail's records from that batch on,
// and every suspect range of the identity below the tail, in sequence
// before it, recorded under et: the leader of et appended them before the
// tail, and the current log holds the tail under et, so its log up to the
// tail, them included. What it does not confirm is walked.
func (l *AckLedger) applyTail(pr Probe, r ProbeResult, p *ledgerPart) CheckResult {
	var res CheckResult
	id := pr.tail
	if p.walk == nil {
		p.walk = make(map[ProducerID]bool)
	}
	p.walk[id] = true
	var tail *ledgerEntry
	for _, e := range p.entries {
		if e.suspect && e.Producer == id && e.To-1 == pr.Offset && tailable(e) && (tail == nil || newer(e, tail)) {
			tail = e
		}
	}
	if tail == nil {
		// Not waiting any more (it cannot happen: while a probe is
		// out, suspect ranges are neither merged nor split).
		res.Probe = l.nextProbe(pr.TP, p)
		return res
	}
	b := findBatch(r.Batches, pr.Offset)
	if b == nil || !isTail(b, tail) {
		// Gone, or not where it was acknowledged, or not read (past
		// the high watermark): the walk tells.
		res.Probe = l.nextProbe(pr.TP, p)
		return res
	}
	cur, et := pr.CurrentLeaderEpoch, b.LeaderEpoch
	confirm := func(e *ledgerEntry) {
		e.LeaderEpoch, e.EpochExact = et, true
		e.suspect, e.checked, e.presentIn = false, true, cur
	}
	var kept []*ledgerEntry
	for _, e := range p.entries {
		switch {
		case !e.suspect || e.Producer != id:
		case e == tail && e.LeaderEpoch == et:
			confirm(e)
		case e == tail:
			// Recorded under another epoch than the tail batch's:
			// only that batch is known to be the acknowledged one.
			if from := max(b.BaseOffset, e.From); from > e.From {
				head := *e
				head.To = from
				head.TailFrom, head.TailCRC, head.HasTailCRC = 0, 0, false
				kept = append(kept, &head)
				if e.Producer.Valid() {
					e.FirstSequence = seqPlus(e.FirstSequence, from-e.From)
				}
				e.From = from
			}
			confirm(e)
		case e.LeaderEpoch == et && e.To <= tail.From && before(e, tail):
			confirm(e)
		}
		kept = append(kept, e)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].From < kept[j].From })
	p.entries = kept
	res.Probe = l.nextProbe(pr.TP, p)
	return res
}

// isTail reports whether b, the batch holding t's last offset, is t's
// newest batch: with t's producer identity and the sequence acknowledged
// there, or (without an identity) at t's newest batch's offsets with its
// CRC. A broker that rewrites a batch (recompressing it for the topic's
// compression.type, or setting LogAppendTime timestamps) changes its CRC:
// such a tail is not confirmed, and the walk reports it Unconfirmed.
func isTail(b *ProbedBatch, t *ledgerEntry) bool {
	if t.Producer.Valid() {
		return ownedBy(b, t, t.To-1)
	}
	return t.HasTailCRC && b.BaseOffset == t.TailFrom && b.LastOffset == t.To-1 && b.CRC == t.TailCRC
}

// before reports whether e was appended before t, both of one identity, if
// both were appended under one leader epoch: by sequence for a producer
// identity (seqBefore); without one by acknowledgement order, which is
// append order: a non-idempotent producer sends a partition's next batch
// only once the previous one is answered.
func before(e, t *ledgerEntry) bool {
	if e.Producer.Valid() {
		return seqBefore(e, t)
	}
	return e.rec < t.rec
}

// seqBefore reports whether e's sequences precede t's, as one producer
// identity's batches in one log do: t's first sequence is at least e's
// length past e's first, and no further than their offsets are apart.
func seqBefore(e, t *ledgerEntry) bool {
	m := int64(math.MaxInt32) + 1
	d := ((int64(t.FirstSequence)-int64(e.FirstSequence))%m + m) % m
	return d >= e.To-e.From && d <= t.From-e.From
}

// ApplyProbe applies a probe's fetch. A suspect range whose records are found
// at their offsets with their producer identity and sequences survived (its
// epoch becomes exact); its offsets that hold other records, or lie at or
// beyond the log end, are lost, each offset judged by the batch holding it;
// offsets in a gap not proven compaction are Unconfirmed. Offsets below the
// log start are dropped without a report only when the range was proven
// present in the current leader's log (provenIn), so retention removed
// them. An inexact range was never found in the log since it was
// acknowledged (the check that finds it makes it exact; a tail probe that
// confirms it does so before this walk), an exact one only in an older
// leader's log, and an unclean election may have cut it before retention or
// DeleteRecords moved the log start past it: its offsets below the log
// start, wholly or in part, are reported Unconfirmed, and the rest of it is
// judged as above. Ranges the fetch did not reach stay suspect and
// CheckResult.Probe continues from them.
func (l *AckLedger) ApplyProbe(pr Probe, r ProbeResult) CheckResult {
	var res CheckResult
	p := l.parts[pr.TP]
	if p == nil || p.probe == nil || p.probe.id != pr.id {
		res.Stale = true
		return res
	}
	p.probe = nil
	if pr.Tail {
		return l.applyTail(pr, r, p)
	}
	cur := pr.CurrentLeaderEpoch
	var kept []*ledgerEntry
	for i, e := range p.entries {
		if !e.suspect {
			kept = append(kept, e)
			continue
		}
		// The oldest range held, lost (or possibly lost) from its first
		// offset: the bound's dropped offsets below it may be gone too.
		lowest := i == 0
		if ls := r.LogStartOffset; ls > e.From {
			// The log start passed its offsets below ls. Retention
			// (or DeleteRecords) removed them only if they were in
			// this log when it did: a range proven present in the
			// current leader's log was, but a suspect range
			// hardly ever is. An inexact one was never found in
			// the log since it was acknowledged (confirming it
			// makes it exact); an exact one was proven present in
			// an older leader's log (its append epoch's, or the
			// one of the check that confirmed it), and the leader
			// change that sent it here (an answer of -1/-1, or a
			// possible echo) may have been an unclean election
			// that cut it before the log start moved past it.
			// Nothing can tell the two apart any more:
			// Unconfirmed, not dropped in silence.
			if !provenIn(e, cur) {
				head := *e
				head.To = min(e.To, ls)
				res.Unconfirmed = append(res.Unconfirmed, unconfirmed(pr.TP, &head, cur))
				if lowest {
					l.untracked(&res, pr.TP, p, cur)
				}
			}
			if e.To <= ls {
				continue
			}
			if e.Producer.Valid() {
				e.FirstSequence = seqPlus(e.FirstSequence, ls-e.From)
			}
			e.From = ls
		}
		if !e.Producer.Valid() {
			// No sequences: the newest batch found at its offsets
			// with its CRC confirms the range (all of it if under
			// the recorded epoch: its earlier batches were appended
			// before it, by the same leader); only the log end can
			// prove a loss.
			tail := findBatch(r.Batches, e.To-1)
			switch {
			case tail != nil && isTail(tail, e):
				c := *e
				c.From = max(e.TailFrom, e.From)
				c.LeaderEpoch, c.EpochExact = tail.LeaderEpoch, true
				c.suspect, c.checked, c.presentIn = false, true, cur
				kept = append(kept, &c)
				if c.From > e.From && tail.LeaderEpoch == e.LeaderEpoch {
					c.From = e.From
				} else if c.From > e.From {
					head := *e
					head.To = c.From
					res.Unconfirmed = append(res.Unconfirmed, unconfirmed(pr.TP, &head, cur))
					if lowest {
						l.untracked(&res, pr.TP, p, cur)
					}
				}
				continue
			case r.LogEndOffset >= 0 && e.From >= r.LogEndOffset:
				res.Lost = append(res.Lost, lost(pr.TP, e, cur))
			case r.LogEndOffset >= 0 && e.To > r.LogEndOffset:
				gone := *e
				gone.From = r.LogEndOffset
				res.Lost = append(res.Lost, lost(pr.TP, &gone, cur))
				head := *e
				head.To = r.LogEndOffset
				res.Unconfirmed = append(res.Unconfirmed, unconfirmed(pr.TP, &head, cur))
			case e.HasTailCRC && tail == nil && (e.To-1 < pr.Offset || batchAfter(r.Batches, e.To-1) == nil):
				// Not reached by this fetch: below where it began
				// (recorded while it was out), or past what it read.
				kept = append(kept, e)
				continue
			default:
				res.Unconfirmed = append(res.Unconfirmed, unconfirmed(pr.TP, e, cur))
			}
			if lowest {
				l.untracked(&res, pr.TP, p, cur)
			}
			continue
		}
		// Walk the fetched batches over the range, judging each offset by
		// the batch holding it: confirmed runs become exact ranges (split
		// where the append epoch changes); offsets holding other records
		// are lost, and the walk goes on past them (a later batch of the
		// range may be there: a leader without the producer's state takes
		// any sequence, so a merged range's batches can be in the log
		// apart).
		o := e.From
		var confirmed []*ledgerEntry
		part := func(from, to int64) *ledgerEntry {
			c := *e
			c.From, c.To = from, to
			c.FirstSequence = seqPlus(e.FirstSequence, from-e.From)
			return &c
		}
		// The range's previous report (index in Lost or Unconfirmed),
		// which a contiguous one of the same kind extends.
		lastIdx, lastMaybe := -1, false
		report := func(from, to int64, maybe bool) {
			list := &res.Lost
			if maybe {
				list = &res.Unconfirmed
			}
			if lastIdx >= 0 && lastMaybe == maybe && (*list)[lastIdx].To == from {
				(*list)[lastIdx].To = to
				return
			}
			if maybe {
				*list = append(*list, unconfirmed(pr.TP, part(from, to), cur))
			} else {
				*list = append(*list, lost(pr.TP, part(from, to), cur))
			}
			lastIdx, lastMaybe = len(*list)-1, maybe
			if lowest && from == e.From {
				l.untracked(&res, pr.TP, p, cur)
			}
		}
		for o < e.To {
			b := findBatch(r.Batches, o)
			if b == nil {
				// No batch holds o, yet the fetch (which began at
				// pr.Offset) went past it: a gap left by compaction.
				// Our next batch at its offset with the continuing
				// sequence proves the gap's records were there if its
				// leader held the producer's state when it took it
				// (it then takes sequences only contiguously): when
				// the batch of ours just before the gap is under the
				// same epoch (that leader took both, and its state
				// was rebuilt from its log), or when it is under the
				// epoch the range was recorded under (the gap's
				// records were sent to that epoch's leader before it:
				// see AckLedger's tail probe). Otherwise its leader may
				// have held no state and taken any sequence, the
				// gap's records gone; and anything else cannot tell
				// compaction from truncation: the gap is Unconfirmed.
				nb := batchAfter(r.Batches, o)
				if nb == nil || o < pr.Offset {
					if r.LogEndOffset >= 0 && o >= r.LogEndOffset {
						report(o, e.To, false)
						o = e.To
					}
					break // not reached
				}
				n := len(confirmed)
				bracketed := n > 0 && confirmed[n-1].To == o && confirmed[n-1].LeaderEpoch == nb.LeaderEpoch
				if nb.BaseOffset < e.To && ownedBy(nb, e, nb.BaseOffset) && (bracketed || nb.LeaderEpoch == e.LeaderEpoch) {
					o = nb.BaseOffset
					continue
				}
				stop := min(nb.BaseOffset, e.To)
				report(o, stop, true)
				o = stop
				continue
			}
			stop := min(b.LastOffset+1, e.To)
			if !ownedBy(b, e, o) {
				report(o, stop, false)
				o = stop
				continue
			}
			if n := len(confirmed); n > 0 && confirmed[n-1].LeaderEpoch == b.LeaderEpoch && confirmed[n-1].To == o {
				confirmed[n-1].To = stop
			} else {
				c := part(o, stop)
				c.LeaderEpoch, c.EpochExact = b.LeaderEpoch, true
				c.suspect, c.checked, c.presentIn = false, true, cur
				confirmed = append(confirmed, c)
			}
			o = stop
		}
		kept = append(kept, confirmed...)
		if o >= e.To {
			continue
		}
		e.FirstSequence = seqPlus(e.FirstSequence, o-e.From)
		e.From = o
		kept = append(kept, e) // not reached by this fetch
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].From < kept[j].From })
	p.entries = kept
	res.Probe = l.nextProbe(pr.TP, p)
	return res
}

func findBatch(bs []ProbedBatch, offset int64) *ProbedBatch {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].LastOffset >= offset })
	if i < len(bs) && bs[i].BaseOffset <= offset {
		return &bs[i]
	}
	return nil
}

// untracked adds to res the Untracked report of the offsets the bound
// dropped and that were not reported yet: a loss reached the oldest range
// held, so they may be gone too. Offsets the log start has passed are
// reported as well: whether the dropped ranges were ever found in this log
// (retention removed them) or not (an unclean election may have cut them
// first) is what the ledger no longer knows.
func (l *AckLedger) untracked(res *CheckResult, tp TopicPartition, p *ledgerPart, cur int32) {
	from := max(p.forgottenFrom, p.forgottenTold)
	if p.forgottenFrom < 0 || from >= p.forgotten {
		return
	}
	p.forgottenTold = p.forgotten
	res.Unconfirmed = append(res.Unconfirmed, AckedWritesLost{
		TP: tp, From: from, To: p.forgotten, LeaderEpoch: -1, Producer: NoProducerID, FirstSequence: -1,
		CurrentLeaderEpoch: cur, Unconfirmed: true, Untracked: true,
	})
}

// AbandonQuery gives up on q: it could not be answered (its requests
// failed for good, or kept failing), with err the last attempt's error.
// Every range of the partition it was to verify (those not yet verified
// against the current leader, and not waiting for a probe) is reported
// Unconfirmed with Err set (matching ErrAckCheckFailed) and no longer
// tracked; when the oldest range held is among them, so are the offsets
// the bound dropped below it (Untracked). A query the ledger no longer
// Wants is Stale: its successor covers the ranges.
func (l *AckLedger) AbandonQuery(q EpochQuery, err error) CheckResult {
	p := l.parts[q.TP]
	if p == nil || p.query == nil || p.query.id != q.id {
		return CheckResult{Stale: true}
	}
	p.query = nil
	return l.abandon(q.TP, p, q.CurrentLeaderEpoch, err, func(e *ledgerEntry) bool { return !e.checked && !e.suspect })
}

// AbandonProbe is AbandonQuery for a probe that could not be made: the
// ranges waiting for it are reported.
func (l *AckLedger) AbandonProbe(pr Probe, err error) CheckResult {
	p := l.parts[pr.TP]
	if p == nil || p.probe == nil || p.probe.id != pr.id {
		return CheckResult{Stale: true}
	}
	p.probe = nil
	return l.abandon(pr.TP, p, pr.CurrentLeaderEpoch, err, func(e *ledgerEntry) bool { return e.suspect })
}

// abandon reports the ranges of p that unverified selects as not verified
// because of err, and drops them.
func (l *AckLedger) abandon(tp TopicPartition, p *ledgerPart, cur int32, err error, unverified func(*ledgerEntry) bool) CheckResult {
	var res CheckResult
	if err == nil {
		err = ErrAckCheckFailed
	} else if !errors.Is(err, ErrAckCheckFailed) {
		err = fmt.Errorf("%w: %w", ErrAckCheckFailed, err)
	}
	var kept []*ledgerEntry
	for i, e := range p.entries {
		if !unverified(e) {
			kept = append(kept, e)
			continue
		}
		res.Unconfirmed = append(res.Unconfirmed, unconfirmed(tp, e, cur))
		if i == 0 {
			l.untracked(&res, tp, p, cur)
		}
	}
	for i := range res.Unconfirmed {
		res.Unconfirmed[i].Err = err
	}
	p.entries = kept
	return res
}

// unconfirmed is lost's report for a range that may be gone.
func unconfirmed(tp TopicPartition, e *ledgerEntry, cur int32) AckedWritesLost {
	l := lost(tp, e, cur)
	l.Unconfirmed = true
	return l
}

// batchAfter returns the first batch starting above offset, or nil.
func batchAfter(bs []ProbedBatch, offset int64) *ProbedBatch {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].BaseOffset > offset })
	if i < len(bs) {
		return &bs[i]
	}
	return nil
}

// ownedBy reports whether the record at offset o in batch b is the one e
// recorded there: same producer identity and the matching sequence.
func ownedBy(b *ProbedBatch, e *ledgerEntry, o int64) bool {
	return b.ProducerID == e.Producer.ID && b.ProducerEpoch == e.Producer.Epoch &&
		seqPlus(b.BaseSequence, o-b.BaseOffset) == seqPlus(e.FirstSequence, o-e.From)
}
