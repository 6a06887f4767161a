package producer

// recovery_model_test.go: a randomized model test. A model broker (one log per
// partition with per-producer sequence state, deduplication of the last 5
// batches, a leader epoch cache and OffsetForLeaderEpoch answers as in
// Kafka; optionally pre-2.5 UNKNOWN_PRODUCER_ID behaviour) expires idle
// producers' state (KIP-854), loses requests and responses, appends and then
// answers NOT_LEADER_OR_FOLLOWER (KAFKA-13574), refuses batches (too large,
// invalid), truncates its log in unclean elections (sometimes to nothing),
// moves leadership cleanly, deletes by retention, and interleaves other
// producers' records; a replica may stop following with records of its
// leader (another producer's, acks=1) that later leaders never get, and be
// elected uncleanly later: its log then diverges from theirs, holding
// records of an older epoch at offsets acknowledged since. A model I/O
// layer drives a Sequencer and an AckLedger against it, answering the
// ledger's questions late (stale ones get FENCED_LEADER_EPOCH) and
// recording acknowledged ranges sometimes under a lagging leader epoch. In
// half the runs DeleteRecords may move the log start after an unclean
// election, before the ledger checks the new leader (the leader epoch cache
// trimmed as Kafka trims it, so that an epoch it no longer keeps is
// echoed), in half of those with OffsetForLeaderEpoch answered as kfake
// answers it (-1/-1 while the new epoch is empty).
// After each run every fault heals and everything must resolve; the
// invariants checked:
//
//  1. no record appears twice in a log unless PossibleDuplicate was reported
//     for it;
//  2. every acknowledged record is at its acknowledged offset (or below the
//     log start, if it was in the log when the log start passed it), or an
//     AckedWritesLost report covers it (one the log start passed after an
//     unclean election cut it may be covered by an Unconfirmed one); every
//     AckedWritesLost report is true (the records were acknowledged there
//     and are gone: the acknowledged copy, though an earlier attempt may
//     be back at the offset), and so is every ProvenGap;
//  3. per partition, the first occurrences of records in the log are in
//     produce order;
//  4. a record reported Failed with MaybeWritten false is not in the log;
//  5. every record ends acknowledged or failed (no stuck partition), and the
//     number of bumps is bounded by the number of incidents.
//
// In half the runs (drawn from a random source of their own, so that the
// other runs are unchanged seed for seed) a topic is also deleted and
// created again at random moments: the partition is replaced by an empty one
// under a new topic ID, requests on the wire reach the deleted incarnation
// before the deletion (their answers come later, or are lost) or meet a
// broker that does not know the ID they name (UNKNOWN_TOPIC_ID), and
// sometimes an unclean election cuts the deleted log just before, with the
// partition's next request on the wire. The client learns of the recreation
// at once or some steps later, as the producer's metadata loop does (ack
// ledger forgotten, leader change, Sequencer.NewIncarnation); an
// acknowledgement handled after that is about the deleted log and is
// reported as a failure. The invariants above hold per incarnation's log,
// and:
//
//  6. a gap (ProvenGap, PossibleGap) is reported only by an incarnation that
//     lost producer state, never for an answer from one the client knows
//     deleted, and a recreation never needs a new epoch;
//  7. a record that is in the logs of two incarnations was reported
//     PossibleDuplicate with cause ErrTopicIDChanged, and so was a record
//     acknowledged by an incarnation if an earlier one holds it;
//  8. in a recreated incarnation, each identity's first appended batch
//     starts at sequence 0 and no batch skips sequences.
//
// Invariant 3 is what found the need to send one batch at a time while the
// leader may hold no state for the producer (Config.SoloAfterIdle,
// LeaderChanged): such a leader accepts any sequence.

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	kepocherrors "github.com/kepoch/kepoch/errors"
)

type mRecord struct {
	rec       int // record id (0 for other producers' records)
	producer  ProducerID
	seq       int32
	epoch     int32 // leader epoch at append
	batchBase int64
	batchLast int64
	batchSeq  int32
}

type mDedup struct {
	epoch       int16
	first, last int32
	offset      int64
}

type mProducer struct {
	epoch   int16
	lastSeq int32
	recent  []mDedup
}

type mEpochStart struct {
	epoch int32
	start int64
}

type mRequest struct {
	ref  BatchRef
	id   BatchIdentity
	recs []int
	// inc is the topic incarnation the request names (the one the client
	// knew when it sent it).
	inc int
	// gone is the answer to a request that reached its incarnation before
	// that was deleted, delivered after the deletion (nil: the request did
	// not reach it, and meets a broker that knows no such topic ID).
	gone *ProduceResult
}

// mPartition is the model leader of one partition.
type mPartition struct {
	tp          TopicPartition
	log         []mRecord
	logStart    int64
	leaderEpoch int32
	cache       []mEpochStart
	states      map[int64]*mProducer
	queue       []mRequest
	legacy      bool // pre-2.5: UNKNOWN_PRODUCER_ID for unknown producers with sequence ≠ 0
	lastAppend  time.Time

	// inc is the topic incarnation (0: the first; each recreation of the
	// topic makes a new mPartition with the next one).
	inc int
	// stateLoss counts what made this incarnation's leader lose producer
	// state (an unclean election that cut the log, state expiry,
	// retention): a sequence gap reported for a request to it needs one.
	stateLoss int
	// truncated: an unclean election cut the log, so acknowledged records
	// may be gone; after the deletion the ack ledger, which forgot the
	// partition, can no longer report it.
	truncated bool
	// highSeq is, per identity, the last sequence of the highest batch this
	// incarnation appended (recreated incarnations only: their sequences
	// must start at 0 and never skip ahead); seqErr is the first violation.
	highSeq map[ProducerID]int32
	seqErr  string
	// stale is a replica that stopped following at some point, with
	// records of its leader the later leaders never had (snapshot).
	stale *mReplica
}

// mReplica is a replica's log and leader epoch cache.
type mReplica struct {
	log   []mRecord
	cache []mEpochStart
}

// modelExpiration is the model brokers' producer.id.expiration.ms.
const modelExpiration = 300 * time.Millisecond

func newMPartition(tp TopicPartition, legacy bool) *mPartition {
	return &mPartition{tp: tp, cache: []mEpochStart{{0, 0}}, states: map[int64]*mProducer{}, legacy: legacy}
}

// produce validates and appends a batch as ProducerAppendInfo does.
func (m *mPartition) produce(id BatchIdentity, recs []int) (code int16, base int64) {
	n := int32(len(recs))
	last := LastSequence(id.BaseSequence, n)
	st := m.states[id.Producer.ID]
	if st != nil {
		if id.Producer.Epoch < st.epoch {
			return kerr.InvalidProducerEpoch.Code, -1
		}
		for _, d := range st.recent {
			if d.epoch == id.Producer.Epoch && d.first == id.BaseSequence && d.last == last {
				return 0, d.offset // duplicate: original offset, nothing appended
			}
		}
		if id.Producer.Epoch > st.epoch {
			if id.BaseSequence != 0 {
				return kerr.OutOfOrderSequenceNumber.Code, -1
			}
		} else if id.BaseSequence != NextSequence(st.lastSeq, 1) {
			return kerr.OutOfOrderSequenceNumber.Code, -1
		}
	} else if m.legacy && id.BaseSequence != 0 {
		return kerr.UnknownProducerID.Code, -1
	}
	if m.highSeq != nil && m.seqErr == "" {
		if hi, ok := m.highSeq[id.Producer]; !ok && id.BaseSequence != 0 {
			m.seqErr = fmt.Sprintf("first batch of %v in incarnation %d starts at sequence %d", id.Producer, m.inc, id.BaseSequence)
		} else if ok && id.BaseSequence > hi+1 {
			m.seqErr = fmt.Sprintf("batch %v in incarnation %d skips sequences after %d", id, m.inc, hi)
		}
	}
	if m.highSeq != nil {
		if hi, ok := m.highSeq[id.Producer]; !ok || last > hi {
			m.highSeq[id.Producer] = last
		}
	}
	base = int64(len(m.log))
	for i, r := range recs {
		m.log = append(m.log, mRecord{rec: r, producer: id.Producer, seq: NextSequence(id.BaseSequence, int32(i)),
			epoch: m.leaderEpoch, batchBase: base, batchLast: base + int64(n) - 1, batchSeq: id.BaseSequence})
	}
	m.track(id.Producer, id.BaseSequence, last, base)
	return 0, base
}

func (m *mPartition) track(p ProducerID, first, last int32, offset int64) {
	st := m.states[p.ID]
	if st == nil || st.epoch != p.Epoch {
		st = &mProducer{epoch: p.Epoch}
		m.states[p.ID] = st
	}
	st.lastSeq = last
	st.recent = append(st.recent, mDedup{p.Epoch, first, last, offset})
	if len(st.recent) > 5 {
		st.recent = st.recent[1:]
	}
}

// foreign appends a batch of another producer (so our offsets are not
// contiguous and lost offsets get reused by others).
func (m *mPartition) foreign(n int) {
	base := int64(len(m.log))
	for i := 0; i < n; i++ {
		m.log = append(m.log, mRecord{producer: ProducerID{ID: 1, Epoch: 0}, epoch: m.leaderEpoch,
			batchBase: base, batchLast: base + int64(n) - 1})
	}
}

// rebuild recomputes producer state from the log, as a new leader does.
func (m *mPartition) rebuild() {
	m.states = map[int64]*mProducer{}
	for i := int64(0); i < int64(len(m.log)); {
		r := m.log[i]
		if r.rec != 0 && i >= m.logStart {
			m.track(r.producer, r.batchSeq, m.log[r.batchLast].seq, r.batchBase)
		}
		i = r.batchLast + 1
	}
}

// newLeader moves leadership: a new epoch starting at the log end, after
// truncating the log to truncateTo (an unclean election of a shorter replica).
func (m *mPartition) newLeader(truncateTo int64) {
	if truncateTo < int64(len(m.log)) {
		m.log = m.log[:truncateTo]
		m.rebuild()
		m.stateLoss++
		m.truncated = true
	}
	m.leaderEpoch++
	end := int64(len(m.log))
	m.cache = slices.DeleteFunc(m.cache, func(e mEpochStart) bool { return e.start >= end })
	m.cache = append(m.cache, mEpochStart{m.leaderEpoch, end})
}

// snapshot records a replica that stops following now (it goes offline):
// the log as the leader has it, plus n records of another producer that the
// leader appended (acks=1) and only that replica copied. electStale later
// elects it uncleanly.
func (m *mPartition) snapshot(n int) {
	log := slices.Clone(m.log)
	base := int64(len(log))
	for range n {
		log = append(log, mRecord{producer: ProducerID{ID: 1, Epoch: 0}, epoch: m.leaderEpoch, batchBase: base, batchLast: base + int64(n) - 1})
	}
	m.stale = &mReplica{log: log, cache: slices.Clone(m.cache)}
}

// electStale makes the replica snapshot recorded the log (newLeader then
// starts its epoch): what was appended since it stopped following is gone,
// and the offsets from where its log and the leaders' since diverge hold
// other records, of an older epoch, than the ones acknowledged there. An
// acknowledged range recorded under that older epoch (the client's metadata
// lagging) looks present to the epoch argument.
func (m *mPartition) electStale() {
	m.log, m.cache, m.stale = m.stale.log, trimCache(m.stale.cache, m.logStart), nil
	m.rebuild()
	m.stateLoss++
	m.truncated = true
}

// offsetForLeaderEpoch answers as LeaderEpochFileCache.endOffsetFor.
func (m *mPartition) offsetForLeaderEpoch(q int32) EpochEnd {
	latest := m.cache[len(m.cache)-1]
	switch {
	case q == latest.epoch:
		return EpochEnd{Epoch: q, EndOffset: int64(len(m.log)), LogStartOffset: -1}
	case q > latest.epoch:
		return EpochEnd{Epoch: -1, EndOffset: -1, LogStartOffset: -1}
	case q < m.cache[0].epoch:
		return EpochEnd{Epoch: q, EndOffset: m.cache[0].start, LogStartOffset: -1}
	}
	i := len(m.cache) - 1
	for m.cache[i].epoch > q {
		i--
	}
	return EpochEnd{Epoch: m.cache[i].epoch, EndOffset: m.cache[i+1].start, LogStartOffset: -1}
}

// kfakeOffsetForLeaderEpoch answers as kfake does (the brokers of the
// component tests): its current epoch with its log end; an epoch no
// retained batch is above of with -1/-1 (so while the current epoch is
// empty, after an unclean election as after a clean change); an epoch
// below its first retained batch's with its log start; otherwise the
// epoch of the batch before the first one above it, ending there. An
// empty log answers its current epoch (above the one asked) at 0.
func (m *mPartition) kfakeOffsetForLeaderEpoch(q int32) EpochEnd {
	if q == m.leaderEpoch {
		return EpochEnd{Epoch: q, EndOffset: int64(len(m.log)), LogStartOffset: -1}
	}
	if m.logStart >= int64(len(m.log)) {
		return EpochEnd{Epoch: m.leaderEpoch, EndOffset: 0, LogStartOffset: -1}
	}
	prev := int32(-1)
	for i := m.logStart; i < int64(len(m.log)); i = m.log[i].batchLast + 1 {
		if b := m.log[i]; b.epoch > q {
			if prev < 0 {
				return EpochEnd{Epoch: q, EndOffset: m.logStart, LogStartOffset: -1}
			}
			return EpochEnd{Epoch: prev, EndOffset: b.batchBase, LogStartOffset: -1}
		}
		prev = m.log[i].epoch
	}
	return EpochEnd{Epoch: -1, EndOffset: -1, LogStartOffset: -1}
}

// probe returns up to 3 batch headers from offset on.
func (m *mPartition) probe(offset int64) ProbeResult {
	res := ProbeResult{LogStartOffset: m.logStart, LogEndOffset: int64(len(m.log))}
	for i := max(offset, m.logStart); i < int64(len(m.log)) && len(res.Batches) < 3; {
		r := m.log[i]
		res.Batches = append(res.Batches, ProbedBatch{BaseOffset: r.batchBase, LastOffset: r.batchLast,
			LeaderEpoch: r.epoch, ProducerID: r.producer.ID, ProducerEpoch: r.producer.Epoch, BaseSequence: r.batchSeq})
		i = r.batchLast + 1
	}
	return res
}

type recStatus struct {
	acked     bool
	offset    int64
	failed    bool
	maybe     bool
	ackedSeen bool // was acknowledged at some point
	// ackInc is the incarnation whose acknowledgement set offset;
	// replaced: that acknowledgement was handled once the client knew the
	// incarnation deleted, so the records were reported failed instead.
	ackInc   int
	replaced bool
	// ackEpoch is the leader epoch the acknowledged copy was appended
	// under.
	ackEpoch int32
}

type offsetKey struct {
	tp     TopicPartition
	inc    int
	offset int64
}

type seqKey struct {
	tp  TopicPartition
	inc int // sequences restart in each topic incarnation
	p   ProducerID
	seq int32
}

// mCheck is an ack-ledger question waiting for an answer (EpochQuery or
// Probe) and the topic incarnation it names.
type mCheck struct {
	q   any
	inc int
}

// mDriver is the model I/O layer and application.
type mDriver struct {
	t      *testing.T
	rng    *rand.Rand
	seq    *Sequencer
	led    *AckLedger
	parts  []*mPartition
	byTP   map[TopicPartition]*mPartition
	now    time.Time
	exact  bool // the ledger gets exact append epochs
	faults bool
	// drng draws the replicas that stop following and are elected later
	// (mPartition.snapshot, electStale), from a source of its own so that
	// the rest of a run draws from rng what it did before they were
	// modelled.
	drng *rand.Rand

	nextRec   int
	recTP     map[int]TopicPartition
	pending   map[TopicPartition][]int
	batchRecs map[BatchRef][]int
	status    map[int]*recStatus
	possDup   map[int]bool
	lostRep   map[int]bool
	// unconfRep: the offsets (of an incarnation) an Unconfirmed report
	// covered; goneAtStart: acknowledged records that were already gone
	// from the log (an unclean election cut them) when the log start
	// passed them, which only a report may excuse.
	unconfRep   map[offsetKey]bool
	goneAtStart map[int]bool
	// lrng draws the DeleteRecords after unclean elections (nil: none),
	// from a source of its own, so that the rest of a run draws from rng
	// what it did before they were modelled; kfake: the brokers answer
	// OffsetForLeaderEpoch as kfake does (kfakeOffsetForLeaderEpoch).
	lrng      *rand.Rand
	kfake     bool
	bySeq     map[seqKey]int
	nextPID   int64
	incidents int
	stats     map[string]int
	checks    []mCheck

	// Topic recreation. rrng draws every recreation decision (nil: the run
	// recreates nothing): a source of its own, so that a run without
	// recreation draws from rng exactly what it did before recreation was
	// modelled. incs holds every incarnation of a partition, byTP the
	// current one; known is the incarnation the client names (it learns of
	// a recreation some steps later, as metadata would), sentInc the one
	// each batch's latest send named, and curInc the one whose answer is
	// being handled.
	rrng    *rand.Rand
	incs    map[TopicPartition][]*mPartition
	known   map[TopicPartition]int
	sentInc map[BatchRef]int
	curInc  int
	// possDupRe: records reported PossibleDuplicate with cause
	// ErrTopicIDChanged (possDup holds those with any other cause, the
	// only ones that allow two copies in one log).
	possDupRe map[int]bool
	// newIncarnation informs the client of a recreation (the
	// transactional model goes through its TxnState); onAppend sees every
	// append attempt of the client's batches.
	newIncarnation func(TopicPartition)
	onAppend       func(m *mPartition, req mRequest, code int16)
	// cutBeforeDelete: brokers may lose producer state (the transactional
	// model's never do), so a deleted incarnation may also have.
	cutBeforeDelete bool
	// traceTo, if set, receives the run's trace (as runModelTrace does),
	// fatal failures included.
	traceTo func(string)
}

func (d *mDriver) fatalf(format string, args ...any) {
	if d.traceTo != nil {
		d.traceTo("fatal: " + fmt.Sprintf(format, args...))
	}
	d.t.Helper()
	d.t.Fatalf(format, args...)
}

func (d *mDriver) produce(tp TopicPartition) {
	for n := 1 + d.rng.Intn(3); n > 0; n-- {
		d.nextRec++
		d.pending[tp] = append(d.pending[tp], d.nextRec)
		d.status[d.nextRec] = &recStatus{}
		d.recTP[d.nextRec] = tp
	}
}

// send puts tp's next batch (a retry first) on the wire.
func (d *mDriver) send(tp TopicPartition) {
	m := d.byTP[tp]
	if ref, id, ok := d.seq.NextResend(tp); ok {
		if err := d.seq.Sent(ref); err != nil {
			d.fatalf("Sent: %v", err)
		}
		d.sentInc[ref] = d.known[tp]
		m.queue = append(m.queue, mRequest{ref: ref, id: id, recs: d.batchRecs[ref], inc: d.known[tp]})
		return
	}
	if len(d.pending[tp]) == 0 {
		return
	}
	n := min(len(d.pending[tp]), 1+d.rng.Intn(4))
	dl := d.now.Add(time.Duration(40+d.rng.Intn(200)) * time.Millisecond)
	ref, id, err := d.seq.AssignAt(tp, int32(n), d.now, dl)
	if err != nil {
		return // not now
	}
	recs := slices.Clone(d.pending[tp][:n])
	d.pending[tp] = d.pending[tp][n:]
	d.batchRecs[ref] = recs
	d.sentInc[ref] = d.known[tp]
	m.queue = append(m.queue, mRequest{ref: ref, id: id, recs: recs, inc: d.known[tp]})
}

// process answers the head request of tp's queue.
func (d *mDriver) process(tp TopicPartition) {
	m := d.byTP[tp]
	if len(m.queue) == 0 {
		return
	}
	req := m.queue[0]
	m.queue = m.queue[1:]
	if req.inc != m.inc {
		d.handle(d.completeGone(req))
		return
	}
	d.curInc = m.inc
	var res ProduceResult
	fate := 100
	if d.faults {
		fate = d.rng.Intn(100)
	}
	switch {
	case fate < 6: // request lost before the broker: no answer
		res = ProduceResult{Delivery: NoResponse}
	case fate < 9:
		res = ProduceResult{Delivery: NotSent}
	case fate < 12:
		res = answered(kerr.NotLeaderForPartition.Code)
	case fate < 14 && len(req.recs) > 1:
		res = answered(kerr.MessageTooLarge.Code)
	case fate < 15:
		d.incidents++
		res = answered(kerr.InvalidRecord.Code)
	default:
		code, base := d.append(m, req)
		res = ProduceResult{Code: code, BaseOffset: base, LogStartOffset: m.logStart, ByTopicID: true}
		switch {
		case fate < 22: // appended (or not), answer lost
			res = ProduceResult{Delivery: NoResponse}
		case fate < 25 && code == 0: // appended, then leadership moved (KAFKA-13574)
			res = answered(kerr.NotLeaderForPartition.Code)
		}
		if d.faults && d.rng.Intn(3) == 0 {
			m.foreign(1 + d.rng.Intn(2))
		}
	}
	d.trace("process %v ref=%d id=%v recs=%v -> %+v (log len %d)", tp, req.ref, req.id, req.recs, res, len(m.log))
	d.handle(d.seq.Complete(req.ref, res))
}

// append has the model leader m validate and append req's batch.
func (d *mDriver) append(m *mPartition, req mRequest) (int16, int64) {
	d.t.Helper()
	code, base := m.produce(req.id, req.recs)
	if code == 0 {
		m.lastAppend = d.now
	}
	if m.seqErr != "" {
		d.fatalf("%v: %s", m.tp, m.seqErr)
	}
	if d.onAppend != nil {
		d.onAppend(m, req, code)
	}
	return code, base
}

// completeGone completes a request that names a deleted incarnation: its
// answer from before the deletion if it had one, else what a broker that
// knows no such topic ID answers (or nothing).
func (d *mDriver) completeGone(req mRequest) Decision {
	d.curInc = req.inc
	res := answered(kerr.UnknownTopicID.Code)
	switch {
	case req.gone != nil:
		res = *req.gone
	case d.faults && d.rrng.Intn(4) == 0:
		res = ProduceResult{Delivery: NoResponse}
	case d.rrng.Intn(3) == 0:
		res = answered(kerr.UnknownTopicOrPartition.Code)
	}
	d.trace("process %v ref=%d id=%v recs=%v on deleted incarnation %d -> %+v", d.recTP[req.recs[0]], req.ref, req.id, req.recs, req.inc, res)
	d.stats["deleted-answer"]++
	return d.seq.Complete(req.ref, res)
}

// recreate deletes tp's topic and creates it again: the partition is
// replaced by an empty one under a new topic ID (leader epoch 0, no
// producer state). Of the requests on the wire to the deleted incarnation,
// some reached it before the deletion (appended or refused there; the
// answer comes later, or is lost), the rest meet the new one, which
// refuses them for naming an unknown topic ID. The client learns of it
// later (learn).
func (d *mDriver) recreate(tp TopicPartition) {
	old := d.byTP[tp]
	if d.cutBeforeDelete && d.rrng.Intn(3) == 0 {
		// Just before the deletion an unclean election cut the log and
		// the client sent the partition's next request to the new
		// leader: its producer state may be behind, and its answer
		// (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) is about
		// the deleted log.
		d.leaderChange(old, true)
		d.send(tp)
	}
	for i := range old.queue {
		req := &old.queue[i]
		if req.inc != old.inc || d.rrng.Intn(2) == 0 {
			continue
		}
		code, base := d.append(old, *req)
		res := ProduceResult{Code: code, BaseOffset: base, LogStartOffset: old.logStart, ByTopicID: true}
		if d.rrng.Intn(3) == 0 {
			res = ProduceResult{Delivery: NoResponse}
		}
		req.gone = &res
	}
	m := newMPartition(tp, old.legacy)
	m.inc, m.queue, m.highSeq = old.inc+1, old.queue, map[ProducerID]int32{}
	old.queue = nil
	d.incs[tp] = append(d.incs[tp], m)
	d.byTP[tp] = m
	for i, x := range d.parts {
		if x == old {
			d.parts[i] = m
		}
	}
	d.trace("recreate %v: incarnation %d", tp, m.inc)
	d.stats["recreate"]++
}

// learn makes the client adopt tp's current incarnation, as the producer's
// metadata loop does on TopicRecreated: the ack ledger forgets the
// partition, a new leader epoch is a leader change, the Sequencer (or
// TxnState) is told, and the ledger observes the new leader epoch.
func (d *mDriver) learn(tp TopicPartition) {
	m := d.byTP[tp]
	if d.known[tp] == m.inc {
		return
	}
	old := d.incs[tp][d.known[tp]]
	d.known[tp] = m.inc
	d.trace("learn %v: incarnation %d", tp, m.inc)
	d.led.Forget(tp)
	if old.leaderEpoch != m.leaderEpoch {
		d.seq.LeaderChanged(tp)
	}
	if d.newIncarnation != nil {
		d.newIncarnation(tp)
	} else {
		d.handle(d.seq.NewIncarnation(tp))
	}
	if q, ok := d.led.ObserveLeaderEpoch(tp, m.leaderEpoch); ok {
		d.addCheck(tp, q)
	}
}

// recreationStep makes a recreation step instead of an ordinary one, when
// rrng says so: recreate a partition's topic, or have the client learn of
// a recreation. It draws nothing from rng.
func (d *mDriver) recreationStep() bool {
	if d.rrng == nil {
		return false
	}
	switch y := d.rrng.Intn(1000); {
	case y < 3:
		d.recreateSometimes(d.parts[d.rrng.Intn(len(d.parts))].tp, 1)
		return true
	case y < 23:
		for _, m := range d.parts {
			if d.known[m.tp] != m.inc {
				d.learn(m.tp)
				return true
			}
		}
	}
	return false
}

// recreateSometimes recreates tp's topic with probability 1/n (drawn from
// rrng; never without it), and has the client learn of it at once one time
// in three (metadata named the new topic ID before the next request).
func (d *mDriver) recreateSometimes(tp TopicPartition, n int) {
	if d.rrng == nil || d.rrng.Intn(n) != 0 {
		return
	}
	d.recreate(tp)
	if d.rrng.Intn(3) == 0 {
		d.learn(tp)
	}
}

func (d *mDriver) learnAll() {
	for _, m := range d.parts {
		d.learn(m.tp)
	}
}

func (d *mDriver) addCheck(tp TopicPartition, q any) {
	d.checks = append(d.checks, mCheck{q, d.known[tp]})
}

var runModelTrace func(string)

func (d *mDriver) trace(format string, args ...any) {
	if runModelTrace != nil {
		runModelTrace(fmt.Sprintf(format, args...))
	}
	if d.traceTo != nil {
		d.traceTo(fmt.Sprintf(format, args...))
	}
}

func (d *mDriver) handle(dec Decision) {
	d.t.Helper()
	d.trace("decision acks=%+v outcomes=%+v bump=%+v", dec.Acks, dec.Outcomes, dec.Bump)
	if dec.Fatal != nil || dec.Abortable != nil {
		d.fatalf("unexpected fatal/abortable: %+v", dec)
	}
	for _, a := range dec.Acks {
		recs := d.batchRecs[a.Batch]
		inc := d.sentInc[a.Batch]
		m := d.incs[a.TP][inc]
		if a.BaseOffset < 0 || len(recs) == 0 {
			d.fatalf("ack %+v for records %v", a, recs)
		}
		if inc != d.known[a.TP] {
			// Acknowledged by an incarnation the client knows deleted:
			// the producer reports the records failed (ErrTopicIDChanged;
			// nothing if they failed already) and keeps the ack out of
			// the ledger.
			for i, r := range recs {
				st := d.status[r]
				st.acked, st.offset, st.ackedSeen, st.ackInc = false, a.BaseOffset+int64(i), true, inc
				st.failed, st.maybe, st.replaced = true, true, true
				d.bySeq[seqKey{a.TP, inc, a.Identity.Producer, NextSequence(a.Identity.BaseSequence, int32(i))}] = r
			}
			delete(d.batchRecs, a.Batch)
			d.stats["replaced-ack"]++
			continue
		}
		for i, r := range recs {
			st := d.status[r]
			st.acked, st.offset, st.ackedSeen, st.failed, st.ackInc = true, a.BaseOffset+int64(i), true, false, inc
			st.ackEpoch = m.log[st.offset].epoch
			d.bySeq[seqKey{a.TP, inc, a.Identity.Producer, NextSequence(a.Identity.BaseSequence, int32(i))}] = r
		}
		epoch, exact := m.log[a.BaseOffset].epoch, true
		if !d.exact && epoch > 0 && d.rng.Intn(2) == 0 {
			epoch, exact = epoch-1, false // the client's metadata lagged
		}
		res, err := d.led.Record(a.TP, AckedRange{From: a.BaseOffset, To: a.BaseOffset + int64(a.Records),
			LeaderEpoch: epoch, EpochExact: exact, Producer: a.Identity.Producer, FirstSequence: a.Identity.BaseSequence})
		if err != nil {
			d.fatalf("Record: %v", err)
		}
		if res.Next != nil || res.Probe != nil {
			d.stats["record-check"]++
		}
		d.checkResult(m, res)
		delete(d.batchRecs, a.Batch)
		d.stats["ack"]++
	}
	for _, o := range dec.Outcomes {
		switch o := o.(type) {
		case Failed:
			for _, r := range d.batchRecs[o.Batch] {
				st := d.status[r]
				st.failed, st.maybe = true, o.MaybeWritten
			}
			// The batch keeps its records until it is dropped: a late
			// AfterFailure ack still needs them.
			d.stats["failed"]++
		case PossibleDuplicate:
			if errors.Is(o.Cause.Err, kepocherrors.ErrTopicIDChanged) {
				for _, r := range d.batchRecs[o.Batch] {
					d.possDupRe[r] = true
				}
				d.stats["recreated-duplicate"]++
				continue
			}
			for _, r := range d.batchRecs[o.Batch] {
				d.possDup[r] = true
			}
			d.stats["possible-duplicate"]++
		case ResequencedNoLoss:
			if errors.Is(o.Cause.Err, kepocherrors.ErrTopicIDChanged) {
				d.stats["recreated-resequenced"]++
				continue
			}
			d.stats["resequenced"]++
		case ProvenGap:
			// Proven: the write acknowledged with LastAckedSequence is
			// not where it was acknowledged any more, in the incarnation
			// that gave the answer, which lost producer state.
			m := d.incs[o.TP][d.curInc]
			if d.curInc != d.known[o.TP] {
				d.fatalf("ProvenGap %+v from incarnation %d, known deleted", o, m.inc)
			}
			if m.stateLoss == 0 {
				d.fatalf("ProvenGap %+v from incarnation %d, which lost no producer state", o, m.inc)
			}
			rec, ok := d.bySeq[seqKey{o.TP, m.inc, o.Producer, o.LastAckedSequence}]
			if !ok || !d.status[rec].ackedSeen {
				d.fatalf("ProvenGap %+v names no acknowledged write (record %d %+v)", o, rec, d.status[rec])
			}
			if off := d.status[rec].offset; off < int64(len(m.log)) && m.log[off].rec == rec {
				d.fatalf("ProvenGap %+v but record %d is still at %d", o, rec, off)
			}
			d.stats["proven-gap"]++
		case PossibleGap:
			if d.curInc != d.known[o.TP] {
				d.fatalf("PossibleGap %+v from incarnation %d, known deleted", o, d.curInc)
			}
			if m := d.incs[o.TP][d.curInc]; m.stateLoss == 0 {
				d.fatalf("PossibleGap %+v from incarnation %d, which lost no producer state", o, m.inc)
			}
			d.stats["possible-gap"]++
		}
	}
	for _, ref := range dec.Split {
		recs := d.batchRecs[ref]
		k := len(recs) / 2
		refs, err := d.seq.Split(ref, []int32{int32(k), int32(len(recs) - k)})
		if err != nil {
			d.fatalf("Split: %v", err)
		}
		d.batchRecs[refs[0]], d.batchRecs[refs[1]] = recs[:k], recs[k:]
		d.sentInc[refs[0]], d.sentInc[refs[1]] = d.sentInc[ref], d.sentInc[ref]
		delete(d.batchRecs, ref)
		d.stats["split"]++
	}
	if dec.Bump != nil {
		if errors.Is(dec.Bump.Cause.Err, kepocherrors.ErrTopicIDChanged) && !dec.Bump.NewProducerID {
			// A new incarnation holds no producer state: only a new
			// producer ID asked for before it (a refused mapping) is
			// still needed.
			d.fatalf("epoch bump for a recreation: %+v", dec.Bump)
		}
		d.stats["bump"]++
	}
	if dec.NeedProducerID {
		d.nextPID++
		sd, err := d.seq.SetProducer(ProducerID{ID: d.nextPID, Epoch: 0})
		if err != nil {
			d.fatalf("SetProducer: %v", err)
		}
		d.stats["new-producer-id"]++
		d.handle(sd)
	}
	for _, tp := range dec.CheckAckedWrites {
		if q, ok := d.led.Recheck(tp, d.byTP[tp].leaderEpoch); ok {
			d.addCheck(tp, q)
		}
	}
}

// answerCheck answers one waiting ledger question (chosen at random) from the
// model leader as it is now: an OffsetForLeaderEpoch or a probe fetch. A
// question for an older leader epoch gets FENCED_LEADER_EPOCH (dropped; the
// ledger asked again when it saw the new epoch).
func (d *mDriver) answerCheck() {
	if len(d.checks) == 0 {
		return
	}
	i := d.rng.Intn(len(d.checks))
	ch := d.checks[i]
	d.checks = slices.Delete(d.checks, i, i+1)
	switch c := ch.q.(type) {
	case EpochQuery:
		m := d.byTP[c.TP]
		if ch.inc != m.inc {
			// UNKNOWN_TOPIC_ID: the ledger forgets the partition when
			// the client learns of the recreation.
			d.stats["deleted-check"]++
			return
		}
		if c.CurrentLeaderEpoch != m.leaderEpoch {
			d.stats["fenced-check"]++
			return
		}
		ans := m.offsetForLeaderEpoch(c.Epoch)
		if d.kfake {
			ans = m.kfakeOffsetForLeaderEpoch(c.Epoch)
		}
		if d.led.NeedsLogStart(c, ans) {
			// The I/O layer asks ListOffsets (EARLIEST).
			ans.LogStartOffset = m.logStart
		}
		d.trace("answer %+v to %+v (log start %d)", ans, c, m.logStart)
		d.checkResult(m, d.led.ApplyEpochEnd(c, ans))
	case Probe:
		m := d.byTP[c.TP]
		if ch.inc != m.inc {
			d.stats["deleted-check"]++
			return
		}
		if c.CurrentLeaderEpoch != m.leaderEpoch {
			d.stats["fenced-check"]++
			return
		}
		d.stats["probe"]++
		pr := m.probe(c.Offset)
		d.trace("probe %+v: %+v", c, pr)
		d.checkResult(m, d.led.ApplyProbe(c, pr))
	}
}

func (d *mDriver) checkResult(m *mPartition, r CheckResult) {
	d.t.Helper()
	if r.Unknown && !d.kfake {
		d.fatalf("check on %v: %+v", m.tp, r)
	}
	if r.Stale {
		d.stats["stale-check"]++
		return
	}
	for _, l := range r.Lost {
		for o := l.From; o < l.To; o++ {
			rec, ok := d.bySeq[seqKey{l.TP, m.inc, l.Producer, seqPlus(l.FirstSequence, o-l.From)}]
			if !ok || d.status[rec].offset != o || !d.status[rec].ackedSeen {
				d.fatalf("bogus loss report %+v at %d: record %d %+v", l, o, rec, d.status[rec])
			}
			if o < int64(len(m.log)) && m.log[o].rec == rec {
				if m.log[o].epoch == d.status[rec].ackEpoch {
					d.fatalf("loss reported for record %d still at %d: %+v", rec, o, l)
				}
				// The acknowledged copy is gone; an earlier attempt of
				// the record, appended at the same offset before an
				// unclean election cut it, is there again because a
				// replica that stopped following before the cut was
				// elected. Nothing tells the two apart but their epochs
				// (or producer epochs, when resequenced): a report on
				// the safe side.
				d.stats["lost-earlier-copy"]++
			}
			d.lostRep[rec] = true
		}
		d.stats["acked-writes-lost"]++
	}
	if len(r.Lost)+len(r.Unconfirmed) > 0 {
		d.trace("reports on %v: lost %+v unconfirmed %+v", m.tp, r.Lost, r.Unconfirmed)
	}
	for _, u := range r.Unconfirmed {
		for o := u.From; o < u.To; o++ {
			d.unconfRep[offsetKey{u.TP, m.inc, o}] = true
		}
		d.stats["unconfirmed"]++
	}
	if r.Next != nil {
		d.addCheck(m.tp, *r.Next)
	}
	if r.Probe != nil {
		d.addCheck(m.tp, *r.Probe)
	}
}

// moveLogStart moves m's log start to to (retention, DeleteRecords), trims
// its leader epoch cache as Kafka's LeaderEpochFileCache.truncateFromStart
// does (the newest entry at or below the new start is kept, moved to it),
// and notes the acknowledged records it passes that were already gone.
func (d *mDriver) moveLogStart(m *mPartition, to int64) {
	for r, st := range d.status {
		if d.recTP[r] == m.tp && st.acked && st.ackInc == m.inc && st.offset >= m.logStart && st.offset < to &&
			(st.offset >= int64(len(m.log)) || m.log[st.offset].rec != r) {
			d.goneAtStart[r] = true
			d.stats["gone-at-log-start"]++
		}
	}
	m.logStart = to
	m.cache = trimCache(m.cache, to)
}

// trimCache is cache after the log start moved to start.
func trimCache(cache []mEpochStart, start int64) []mEpochStart {
	i := 0
	for i+1 < len(cache) && cache[i+1].start <= start {
		i++
	}
	out := slices.Clone(cache[i:])
	if len(out) > 0 && out[0].start < start {
		out[0].start = start
	}
	return out
}

// leaderChange moves tp's leadership (truncating when unclean); requests on
// the wire to the old leader fail; the ledger checks the new leader.
func (d *mDriver) leaderChange(m *mPartition, unclean bool) {
	to := int64(len(m.log))
	if unclean {
		to = max(m.logStart, to-int64(1+d.rng.Intn(8)))
		if d.rng.Intn(3) == 0 {
			to = m.logStart // the new leader's log is empty: no producer state at all
		}
		if to < int64(len(m.log)) {
			// Replicas hold whole batches: the new leader's log ends
			// before the batch holding to, or after it when that batch
			// holds the log start offset (a stale replica's batch
			// may straddle the log start set by retention since).
			to = m.log[to].batchBase
			if to < m.logStart {
				to = m.log[m.logStart].batchLast + 1
			}
		}
		d.stats["unclean"]++
	}
	d.incidents++
	d.trace("leader change %v unclean=%v to=%d", m.tp, unclean, to)
	if d.drng != nil {
		stale := unclean && m.stale != nil && int64(len(m.stale.log)) >= m.logStart && d.drng.Intn(2) == 0
		if !stale && len(m.log) > 0 && d.drng.Intn(4) == 0 {
			m.snapshot(1 + d.drng.Intn(8))
		}
		if stale {
			m.electStale()
			d.trace("stale replica elected %v: log end %d, epochs %v", m.tp, len(m.log), m.cache)
			d.stats["diverged"]++
			to = int64(len(m.log))
		}
	}
	if to < int64(len(m.log)) && m.log[to].batchBase != to {
		d.fatalf("model: %v truncated to %d, inside batch %d-%d", m.tp, to, m.log[to].batchBase, m.log[to].batchLast)
	}
	m.newLeader(to)
	d.seq.LeaderChanged(m.tp)
	q := m.queue
	m.queue = nil
	for _, req := range q {
		if req.inc != m.inc {
			d.handle(d.completeGone(req))
			continue
		}
		d.curInc = m.inc
		d.handle(d.seq.Complete(req.ref, answered(kerr.NotLeaderForPartition.Code)))
	}
	if unclean && d.lrng != nil && !m.legacy && d.lrng.Intn(2) == 0 {
		// DeleteRecords (or retention) moves the log start before the
		// ledger checks the new leader: records the election cut may
		// be below it, and so may be records that were there.
		d.moveLogStart(m, m.logStart+d.lrng.Int63n(int64(len(m.log))-m.logStart+1))
		d.trace("delete records %v: log start %d, epochs %v", m.tp, m.logStart, m.cache)
		d.stats["delete-records"]++
	}
	if qq, ok := d.led.ObserveLeaderEpoch(m.tp, m.leaderEpoch); ok {
		d.addCheck(m.tp, qq)
	}
}

func (d *mDriver) step() {
	if d.recreationStep() {
		return
	}
	tp := d.parts[d.rng.Intn(len(d.parts))].tp
	m := d.byTP[tp]
	d.now = d.now.Add(time.Millisecond)
	switch x := d.rng.Intn(100); {
	case x < 28:
		d.produce(tp)
	case x < 55:
		d.send(tp)
	case x < 84:
		d.process(tp)
	case x < 88:
		d.answerCheck()
	case x < 91:
		d.now = d.now.Add(time.Duration(d.rng.Intn(120)) * time.Millisecond)
		d.handle(d.seq.Expire(d.now))
	case x < 93:
		d.leaderChange(m, true)
	case x < 95:
		d.leaderChange(m, false)
	case x < 97:
		// Producer-state expiry (KIP-854): only a producer that appended
		// nothing for producer.id.expiration.ms expires.
		d.now = d.now.Add(time.Duration(d.rng.Intn(2*int(modelExpiration/time.Millisecond))) * time.Millisecond)
		if st, ok := d.seq.Partition(tp); (!ok || len(st.InFlight) == 0) && len(m.queue) == 0 && len(m.states) > 0 &&
			d.now.Sub(m.lastAppend) >= modelExpiration {
			m.states = map[int64]*mProducer{}
			m.stateLoss++
			d.incidents++
			d.stats["state-expiry"]++
		}
	case x < 98 && m.legacy:
		// Retention removes the whole log; a pre-2.5 leader drops the
		// producer state with it.
		if st, ok := d.seq.Partition(tp); (!ok || len(st.InFlight) == 0) && len(m.queue) == 0 {
			d.moveLogStart(m, int64(len(m.log)))
			m.rebuild()
			m.stateLoss++
			d.incidents++
			d.stats["retention"]++
		}
	default:
		d.handle(d.seq.Expire(d.now))
	}
}

// heal stops faults and runs until every record is resolved.
func (d *mDriver) heal() {
	d.faults = false
	d.learnAll()
	for i := 0; ; i++ {
		if i > 2000 {
			d.fatalf("no progress after healing: pending %v, sequencer pending %d outstanding %d",
				d.pending, d.seq.Pending(), d.seq.Outstanding())
		}
		busy := false
		for _, m := range d.parts {
			d.send(m.tp)
			if len(m.queue) > 0 {
				busy = true
				d.process(m.tp)
			}
			busy = busy || len(d.pending[m.tp]) > 0
		}
		if len(d.checks) > 0 {
			busy = true
			d.answerCheck()
		}
		if !busy && d.seq.Pending() == 0 && d.seq.Outstanding() == 0 {
			return
		}
	}
}

func (d *mDriver) verify() {
	d.t.Helper()
	for _, cur := range d.parts {
		// in: the incarnations whose logs hold each record.
		in := map[int][]int{}
		for _, m := range d.incs[cur.tp] {
			seen := map[int]int{}
			last := 0
			for o, r := range m.log {
				if r.rec == 0 {
					continue
				}
				if seen[r.rec]++; seen[r.rec] == 1 {
					if r.rec < last {
						d.fatalf("%v: record %d first written at %d after record %d in incarnation %d (order)", m.tp, r.rec, o, last, m.inc)
					}
					last = r.rec
					in[r.rec] = append(in[r.rec], m.inc)
				} else if !d.possDup[r.rec] {
					d.fatalf("%v: record %d written twice in incarnation %d without a PossibleDuplicate report", m.tp, r.rec, m.inc)
				}
			}
		}
		for _, r := range slices.Sorted(maps.Keys(d.status)) { // in order: a failing seed reports the same failure
			st := d.status[r]
			if d.recTP[r] != cur.tp {
				continue
			}
			if len(in[r]) > 1 && !d.possDupRe[r] {
				d.fatalf("%v: record %d is in incarnations %v without a PossibleDuplicate report for the recreation", cur.tp, r, in[r])
			}
			switch {
			case st.acked || st.replaced:
				m := d.incs[cur.tp][st.ackInc]
				present := st.offset < int64(len(m.log)) && m.log[st.offset].rec == r
				// A loss in a deleted incarnation may have gone
				// unreported: the ledger forgot the partition.
				excused := d.lostRep[r] || (m != cur && m.truncated)
				if !present && st.offset >= m.logStart && !excused {
					d.fatalf("%v: acknowledged record %d at %d of incarnation %d is gone without a report", m.tp, r, st.offset, m.inc)
				}
				// Below the log start only retention excuses silence,
				// and only for a record that was there when the log
				// start passed it (or is there, below it, in the log
				// of a replica elected since, which kept it).
				if d.goneAtStart[r] && !present && !excused && !d.unconfRep[offsetKey{m.tp, m.inc, st.offset}] {
					d.fatalf("%v: acknowledged record %d at %d of incarnation %d was gone when the log start passed it, without a report",
						m.tp, r, st.offset, m.inc)
				}
				if st.acked && slices.ContainsFunc(in[r], func(k int) bool { return k < st.ackInc }) && !d.possDupRe[r] {
					d.fatalf("%v: record %d acknowledged by incarnation %d was in an earlier one %v, without a PossibleDuplicate report",
						m.tp, r, st.ackInc, in[r])
				}
			case st.failed:
				if !st.maybe && len(in[r]) > 0 {
					d.fatalf("%v: record %d reported certainly not written is in incarnations %v", cur.tp, r, in[r])
				}
			default:
				d.fatalf("%v: record %d unresolved", cur.tp, r)
			}
		}
	}
	if d.seq.Bumps() > d.incidents {
		d.fatalf("%d bumps for %d incidents", d.seq.Bumps(), d.incidents)
	}
}

func runModel(t *testing.T, seed int64, steps int) map[string]int {
	rng := rand.New(rand.NewSource(seed))
	seq, err := NewSequencer(Config{SoloAfterIdle: modelExpiration})
	if err != nil {
		t.Fatal(err)
	}
	legacy := rng.Intn(4) == 0
	d := &mDriver{
		t: t, rng: rng, seq: seq, led: NewAckLedger(1 << 16), byTP: map[TopicPartition]*mPartition{},
		now: time.Unix(0, 0), exact: rng.Intn(3) != 0, faults: true,
		pending: map[TopicPartition][]int{}, batchRecs: map[BatchRef][]int{}, status: map[int]*recStatus{},
		recTP: map[int]TopicPartition{}, possDup: map[int]bool{}, lostRep: map[int]bool{}, bySeq: map[seqKey]int{}, nextPID: 100,
		stats: map[string]int{}, incs: map[TopicPartition][]*mPartition{}, known: map[TopicPartition]int{},
		sentInc: map[BatchRef]int{}, possDupRe: map[int]bool{}, cutBeforeDelete: true,
		drng:      rand.New(rand.NewSource(seed + 1<<32)),
		unconfRep: map[offsetKey]bool{}, goneAtStart: map[int]bool{},
	}
	if lrng := rand.New(rand.NewSource(seed + 2<<32)); lrng.Intn(2) == 0 {
		d.lrng = lrng // half the runs delete records after unclean elections
		d.kfake = lrng.Intn(2) == 0
	}
	if rrng := rand.New(rand.NewSource(^seed)); rrng.Intn(2) == 0 {
		d.rrng = rrng // half the runs recreate topics
	}
	for _, tp := range []TopicPartition{tp0, tp1, tp2} {
		m := newMPartition(tp, legacy)
		d.parts = append(d.parts, m)
		d.byTP[tp] = m
		d.incs[tp] = []*mPartition{m}
		d.led.ObserveLeaderEpoch(tp, 0)
	}
	start := ProducerID{ID: d.nextPID, Epoch: 0}
	if rng.Intn(4) == 0 {
		start.Epoch = math.MaxInt16 - 2 // reach exhaustion within a run
	}
	if _, err := seq.SetProducer(start); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < steps; i++ {
		d.step()
	}
	d.heal()
	d.verify()
	return d.stats
}

// TestModelRandomized runs the model for many seeds; a failure names the
// seed (rerun one with -run 'TestModelRandomized/seed=N').
var (
	modelSeeds = flag.Int("model.seeds", 500, "TestModelRandomized: number of seeds")
	modelFirst = flag.Int64("model.first", 0, "TestModelRandomized: first seed")
	modelSteps = flag.Int("model.steps", 600, "TestModelRandomized: steps per run")
)

func TestModelRandomized(t *testing.T) {
	seeds, steps := *modelSeeds, *modelSteps
	if testing.Short() {
		seeds = min(seeds, 50)
	}
	total := map[string]int{}
	for seed := *modelFirst; seed < *modelFirst+int64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			for k, v := range runModel(t, seed, steps) {
				total[k] += v
			}
		})
	}
	// The faults must actually have been exercised, or the invariants
	// prove nothing.
	for _, k := range []string{"ack", "failed", "possible-duplicate", "resequenced", "proven-gap", "possible-gap",
		"split", "bump", "new-producer-id", "acked-writes-lost", "probe", "unclean", "state-expiry", "retention",
		"fenced-check", "stale-check", "delete-records", "gone-at-log-start", "unconfirmed", "recreate", "recreated-duplicate", "recreated-resequenced", "replaced-ack",
		"deleted-answer", "deleted-check", "diverged", "record-check"} {
		if total[k] == 0 {
			t.Errorf("the model never produced %q (totals %v)", k, total)
		}
	}
	t.Logf("totals over %d seeds: %v", seeds, total)
}
