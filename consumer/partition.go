package consumer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/seek"
)

// part is one assigned partition: its seek machine, the Fetch it wants sent,
// and the fetch answer buffered for Poll. Guarded by Consumer.mu.
type part struct {
	tp      TopicPartition
	m       *seek.Partition
	topicID [16]byte
	paused  bool

	// fetch is the partition's wanted Fetch (from the last ActFetch), nil
	// when the machine wants none; sent is true once a fetcher put it in a
	// request.
	fetch *seek.FetchRequest
	sent  bool
	// flying is the fetch loop whose request in flight includes the
	// partition, nil when none does.
	flying *fetcher
	// replica is the replica the leader named for the partition's fetches
	// (KIP-392), noReplica while it is read from its leader (see
	// routeLocked). lastFrom is the broker that served the last batch
	// Poll delivered (seek.NoBroker before any).
	replica  readReplica
	lastFrom int32

	// buf is the Fetch answer waiting for Poll; its batches are stepped
	// into the machine when Poll delivers them. delivering is the answer
	// being delivered meanwhile (buf is nil then).
	buf, delivering *fetched
	// nearest receives what a waiting SeekToNearest ends with (see
	// endNearest).
	nearest chan nearestResult
	// history holds the digests of the last batches delivered, in offset
	// order (at most Consumer.cfg.historySize). Every batch Poll delivered
	// records of at or past historyFrom is there (when historyKnown): the
	// offsets between its entries held no record delivered (transaction
	// markers, aborted transactions, compaction gaps, a jump forward).
	history      []DeliveredBatch
	historyFrom  int64
	historyKnown bool
	// epochs is the partition's durable epoch history (EpochHistory): the
	// epochs of the batches delivered since the position last jumped.
	epochs *seek.EpochHistory
	// missingSince is when metadata was first seen without the partition
	// (zero while it has it); missingReported is set once Poll was told.
	missingSince    time.Time
	missingReported bool
	// unusable is the partition's run of answers that leave it unread
	// because of its read replica (afterUnusable).
	unusable unusableRun
	// unreachable is the partition's run of requests its leader left
	// unanswered (afterLeaderRequest).
	unreachable leaderRun
}

// remember adds the digest of a delivered batch to p's history. A batch at
// or below one already there (the application sought back and reads again)
// replaces everything from it on.
func (p *part) remember(b DeliveredBatch, limit int) {
	if limit == 0 {
		return
	}
	i := len(p.history)
	for i > 0 && p.history[i-1].Last >= b.Base {
		i--
	}
	if i < len(p.history) && p.history[i].Base < b.Base {
		// The batch starts inside one delivered before (the log
		// changed): that one's records below it are no longer listed.
		p.historyFrom = max(p.historyFrom, b.Base)
	}
	p.history = p.history[:i]
	if i == 0 {
		// The first batch, or a seek back below all the history: what
		// was delivered from the batch on is this batch and what
		// follows it.
		p.historyFrom, p.historyKnown = b.Base, true
	}
	if len(p.history) == limit {
		p.historyFrom = p.history[0].Last + 1
		p.history = p.history[1:] // append moves it to a new array when full: O(1) amortized
	}
	p.history = append(p.history, b)
}

// seedEpochs makes a stored history (an AtHistory start, already cut at its
// offset) the partition's epoch history, so that it keeps growing from
// there. Other starts leave the history to delivery (observeEpochs).
func (p *part) seedEpochs(s seek.Start, size int) {
	if s.Kind != seek.StartHistory || s.History == nil {
		return
	}
	h, err := seek.EpochHistoryOf(s.History.Entries(), s.History.End(), size)
	if err != nil {
		p.epochs.Reset() // cannot happen: a history's entries are valid
		return
	}
	h.SetTopicID(s.History.TopicID())
	p.epochs = h
}

// observeEpochs adds a delivered batch to the epoch history. from is the
// position before the batch: when the history does not end there, the
// position moved by a seek, a reset or a rewind rather than by delivery,
// and the history is cut back to it (a move back) or started afresh (a
// move forward: nothing is known of the offsets skipped). The history
// names the topic ID the partition is fetched under: the incarnation the
// batch belongs to.
func (p *part) observeEpochs(from int64, b DeliveredBatch) {
	p.epochs.SetTopicID(seek.TopicID(p.topicID))
	if end := p.epochs.End(); end != from && p.epochs.Len() > 0 {
		if from < end {
			p.epochs.Cut(from)
		} else {
			p.epochs.Reset()
		}
	}
	p.epochs.Observe(b.LeaderEpoch, b.Base, b.Last)
}

// replaced returns the digests of the delivered batches with records in r,
// and whether they cover all of r; the history past r.From is dropped (those
// offsets are no longer the log's).
func (p *part) replaced(r Range) ([]DeliveredBatch, bool) {
	if r.Empty() {
		return nil, true
	}
	var out []DeliveredBatch
	keep := len(p.history)
	for i, b := range p.history {
		if b.Last < r.From {
			continue
		}
		keep = min(keep, i)
		if b.Base < r.To {
			out = append(out, b)
		}
	}
	// Every record delivered in r is in a batch listed when the history
	// reaches back to r.From: it holds every batch delivered since
	// historyFrom, up to the position (r.To), and nothing else was
	// delivered between its entries (r may start or end at a transaction
	// marker, or span an aborted transaction or a compaction gap).
	complete := p.historyKnown && p.historyFrom <= r.From
	switch {
	case keep == 0:
		// Nothing delivered is listed any more.
		p.historyKnown = false
	case keep < len(p.history) && p.history[keep].Base < r.From:
		// The batch dropped across r.From had records below it
		// delivered: no longer listed.
		p.historyFrom = max(p.historyFrom, r.From)
	}
	p.history = p.history[:keep]
	return out, complete
}

// fetched is one partition's Fetch answer with data, decoded by its fetch
// loop and held for Poll.
type fetched struct {
	req  seek.RequestID
	from int32 // the broker that answered
	size int   // bytes of the answer's record batches
	d    *decoded
	// checked: the broker checked the fetch's LastFetchedEpoch
	// (seek.BatchFetched.Checked).
	checked bool
	// next is the first span Poll has yet to deliver (a Poll that reached
	// MaxPollRecords left the rest for the next), and bufs how many of
	// d.bufs went with the records delivered so far.
	next, bufs int
	// dropped: a step of its delivery dropped p's buffer (a report, a
	// halt), so none of it is left for a next Poll.
	dropped bool
}

// countRecords adds up the record counts of the batch headers in b, bounded
// by len(b) so that a corrupt count cannot make Poll allocate much.
func countRecords(b []byte) int {
	n, size := 0, len(b)
	for len(b) >= batch.HeaderSize {
		length := int(int32(binary.BigEndian.Uint32(b[8:])))
		if length < batch.HeaderSize-batch.LogOverhead || batch.LogOverhead+length > len(b) {
			break
		}
		if k := int(int32(binary.BigEndian.Uint32(b[57:]))); k > 0 {
			n += k
		}
		b = b[batch.LogOverhead+length:]
	}
	return min(n, size)
}

func (c *Consumer) newPart(tp TopicPartition) (*part, error) {
	cfg := seek.DefaultConfig()
	cfg.Policy = c.cfg.policy
	cfg.LineageSize = c.cfg.lineageSize
	cfg.MaxEpochWaits = c.cfg.maxEpochWaits
	cfg.IDs = &c.ids
	cfg.InBandValidation = c.cfg.inBand
	m, err := seek.NewPartition(cfg)
	if err != nil {
		return nil, err
	}
	return &part{tp: tp, m: m, epochs: seek.NewEpochHistory(c.cfg.epochHistory), replica: noReplica, lastFrom: seek.NoBroker}, nil
}

func (p *part) revoke() {
	p.m.Step(seek.Revoked{})
	p.fetch = nil
	p.abandonNearest(ErrNotAssigned)
}

// supersedeNearest ends a waiting SeekToNearest: p is sought again.
func (p *part) supersedeNearest() { p.abandonNearest(ErrSeekSuperseded) }

// abandonNearest ends a waiting SeekToNearest with a *PartitionError
// wrapping why it did not land anywhere.
func (p *part) abandonNearest(why error) {
	p.endNearest(Position{}, &errors.PartitionError{Op: "seek", Topic: p.tp.Topic, Partition: p.tp.Partition,
		Offset: -1, LeaderEpoch: NoEpoch, Err: why})
}

// nearestResult is how a SeekToNearest ends: where the partition landed,
// or why it did not land where the stored position says.
type nearestResult struct {
	pos Position
	err error
}

// endNearest answers the SeekToNearest waiting for p, if any. Every way its
// resolution can end answers it: resolved by the leader, nothing to
// resolve (offset 0, or a leader without epochs), a break reported or a
// halt instead, the partition revoked, a later seek.
func (p *part) endNearest(pos Position, err error) {
	if p.nearest != nil {
		p.nearest <- nearestResult{pos, err}
		p.nearest = nil
	}
}

// dropBufferLocked forgets a buffered Fetch answer (its records were never
// delivered).
func (c *Consumer) dropBufferLocked(p *part) {
	if p.delivering != nil {
		p.delivering.dropped = true
	}
	if p.buf == nil {
		return
	}
	c.buffered -= p.buf.size
	p.buf = nil
	for i, r := range c.ready {
		if r == p {
			c.ready = append(c.ready[:i], c.ready[i+1:]...)
			break
		}
	}
	c.wakeFetchersLocked()
}

// stepLocked steps the partition's machine and carries out its actions.
func (c *Consumer) stepLocked(p *part, ev seek.Event) {
	switch e := ev.(type) {
	case seek.Assigned:
		p.seedEpochs(e.Start, c.cfg.epochHistory)
		c.knowLeaderLocked(p)
	case seek.Seek:
		p.seedEpochs(e.Start, c.cfg.epochHistory)
		c.knowLeaderLocked(p)
	}
	acts := p.m.Step(ev)
	if lc, ok := ev.(seek.LeaderChanged); ok && lc.TopicID != (seek.TopicID{}) {
		p.topicID = lc.TopicID
	}
	for i := range acts {
		c.actLocked(p, acts[i])
	}
	if p.fetch != nil && !p.m.AwaitsFetch(p.fetch.Req) {
		// The machine superseded the fetch (a new leader epoch to
		// validate, a reset, a leader unknown): not sent yet, it must
		// not be (it named the old leader and epoch, and its answer is
		// ignored); in flight, its answer is told apart by request ID,
		// not by p.fetch. Kept, it was still routed to the old leader
		// (routeLocked), put in that loop's next request (build) and
		// handed to a fetch loop by Resume.
		p.fetch = nil
	}
	if p.nearest != nil && p.m.State() != seek.StateAwaitingValidation {
		// The machine moved on without a resolution to report: there
		// was nothing to ask the leader (offset 0, or metadata without
		// epochs), so the position is the stored offset as is.
		pos, _ := p.m.Position()
		p.endNearest(pos, nil)
	}
}

// knowLeaderLocked tells p's machine, before a start or a seek, what the
// consumer knows now of its leader: whether it checks LastFetchedEpoch
// (ValidateInBand). The machine learned it with the leader, perhaps before
// the leader had answered a fetch.
func (c *Consumer) knowLeaderLocked(p *part) {
	if !c.cfg.inBand {
		return
	}
	id := p.m.Leader().ID
	p.m.Step(seek.BrokerInBand{Broker: id, InBand: c.inBandLocked(id)}) // no actions
}

func (c *Consumer) actLocked(p *part, a seek.Action) {
	switch a.Kind {
	case seek.ActFetch:
		f := a.Fetch
		p.fetch, p.sent = &f, false
		to := c.routeLocked(p, time.Now())
		if p.flying != nil && p.flying.id == to {
			// The fetch in flight asks for what the partition no
			// longer wants (it was seeked or reassigned), and the new
			// one waits for its answer: do not wait up to
			// FetchMaxWait for it. One in flight at another broker
			// (the old leader) holds the new one up in no way: its
			// answer is stale, and a cancel would cost the other
			// partitions in it their fetch and the broker's
			// connection (kgo closes a canceled request's).
			p.flying.cancelLocked()
		}
		c.fetchableLocked(p, to)
	case seek.ActValidate:
		c.offsets.addValidate(p.tp, a.Validate)
	case seek.ActListOffsets:
		c.offsets.addList(p.tp, a.List)
	case seek.ActRefreshMetadata:
		c.meta.Trigger(refreshReason(a.Refresh))
	case seek.ActReport:
		c.dropBufferLocked(p)
		p.fetch = nil
		ev := TruncationEvent{
			Topic: p.tp.Topic, Partition: p.tp.Partition, Kind: a.Report.Kind,
			Consumed: a.Report.Consumed, Divergent: a.Report.Divergent, Resume: a.Report.Resume, Exact: a.Report.Exact,
			Replaced: a.Report.Replaced, Skipped: a.Report.Skipped, Halted: a.Report.Then == seek.ThenHalt,
			EpochPruned: a.Report.EpochPruned,
		}
		// The epoch history keeps only what the log still holds: below
		// a located divergence; nothing after any other break.
		if ev.Kind == Diverged {
			p.epochs.Cut(ev.Divergent.Offset)
		} else {
			p.epochs.Reset()
		}
		ev.ReplacedBatches, ev.ReplacedBatchesComplete = p.replaced(ev.Replaced)
		if c.grp != nil {
			// The position the latest Poll began at is one of the
			// lineage that broke: nothing of the partition is
			// autocommitted until a Poll begins on the new one.
			c.grp.forgetCommittableLocked(p.tp)
		}
		c.events = append(c.events, ev)
		if ev.Halted {
			c.errs = append(c.errs, ev.Err())
		}
		// A stored position the leader cannot locate (or a break found
		// while asking) has no nearest offset: the policy decides, and
		// the SeekToNearest waiting says so.
		p.endNearest(Position{}, ev.Err())
		c.signalLocked()
	case seek.ActHalt:
		c.dropBufferLocked(p)
		p.fetch = nil
		var err error
		switch a.Halt.Reason {
		case seek.HaltError:
			pos, _ := p.m.Position()
			err = &errors.PartitionError{Op: "fetch", Topic: p.tp.Topic, Partition: p.tp.Partition,
				Offset: pos.Offset, LeaderEpoch: pos.Epoch, Err: errors.FromCode(int16(a.Halt.Code))}
		case seek.HaltUnvalidated:
			pos, _ := p.m.Position()
			err = &errors.PartitionError{Op: "validate", Topic: p.tp.Topic, Partition: p.tp.Partition,
				Offset: pos.Offset, LeaderEpoch: NoEpoch, Err: errors.ErrUnvalidated}
		}
		if err != nil {
			c.errs = append(c.errs, err)
			p.endNearest(Position{}, err)
			c.signalLocked()
		}
	case seek.ActResolved:
		p.endNearest(a.Resolved.Position, nil)
	}
}

func refreshReason(r seek.RefreshReason) metadata.Reason {
	switch r {
	case seek.RefreshFenced:
		return metadata.ReasonFencedLeaderEpoch
	case seek.RefreshBehind:
		return metadata.ReasonUnknownLeaderEpoch
	case seek.RefreshTopicID:
		return metadata.ReasonUnknownTopicOrPartition
	case seek.RefreshError:
		return metadata.ReasonNotLeader
	default:
		return metadata.ReasonWait
	}
}

// decoded is a partition's Fetch answer, decoded by its fetch loop without
// the lock: its records, and per batch its offsets and leader epoch (which
// Poll steps into the machine when it delivers them). The records are
// Refs, which hold no pointer: however many answers are buffered, the
// garbage collector does not scan them. Poll makes Records of those it
// delivers, in the slice it returns.
type decoded struct {
	refs  []batch.Ref
	spans []span
	err   error    // the decode error that ended the answer, if any
	bufs  [][]byte // recycled buffers the records' keys and values are in
	// holders counts what still reads refs: the buffered answer until it
	// is over, and each Poll that listed records of it until it made
	// them (Polls may run at once, each with a piece of the answer). The
	// last one pools refs.
	holders atomic.Int32
}

// drop ends one hold on d's refs, pooling them after the last.
func (d *decoded) drop() {
	if d.holders.Add(-1) == 0 {
		refSlices.put(d.refs)
	}
}

// span is one decoded batch: its digest (offsets, leader epoch, producer,
// CRC), its records in decoded.refs and what their slots index.
type span struct {
	batch    DeliveredBatch
	from, to int
	// bufs is where in decoded.bufs the buffers its batch was
	// decompressed into end (those from the previous span's on).
	bufs    int
	payload []byte               // the batch's records, decompressed
	headers []batch.RecordHeader // the records' headers, in payload
}

// decode decodes the record batches of rp, a Fetch answer for tp that asked
// from offset start (records below it are left out). It runs in the fetch
// loop, without the lock: nothing it reads is shared.
func (c *Consumer) decode(it *batch.Iterator, tp TopicPartition, rp *kmsg.FetchResponseTopicPartition, start int64) *decoded {
	d := &decoded{refs: refSlices.get(countRecords(rp.RecordBatches))}
	d.holders.Store(1) // the buffered answer's
	// Compressed batches are decompressed into the recycler's buffers,
	// which go back with the records' Release, or by themselves once
	// nothing refers to them.
	buffer := func(n int) []byte {
		b := recycled.buffer(n)
		d.bufs = append(d.bufs, b)
		return b
	}
	it.ResetFetch(rp, batch.Options{
		Topic:         tp.Topic,
		StartOffset:   start,
		ReadCommitted: c.cfg.readCommitted,
		Decompressor:  c.dec,
		Parallel:      c.cfg.decodeParallel,
		Refs:          true,
		// Keys and values alias the answer (uncompressed batches) or
		// their batch's own decompressed bytes, which nothing reuses:
		// the records keep them without a copy.
		OwnPayload: true,
		Buffer:     buffer,
	})
	for it.Next() {
		bt := it.Batch()
		h := &bt.Header
		sp := span{from: len(d.refs), batch: DeliveredBatch{Base: h.BaseOffset, Last: h.LastOffset(), LeaderEpoch: h.PartitionLeaderEpoch,
			ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence,
			Transactional: h.Attributes.Transactional(), CRC: h.CRC, Records: h.NumRecords}}
		if len(bt.Refs) > 0 {
			sp.payload = bt.Payload
			if len(bt.Headers) > 0 {
				sp.headers = slices.Clone(bt.Headers) // the Iterator reuses its own
			}
			d.refs = append(d.refs, bt.Refs...)
		}
		sp.to, sp.bufs = len(d.refs), len(d.bufs)
		d.spans = append(d.spans, sp)
	}
	d.err = it.Err()
	if d.err == nil && len(d.spans) == 0 && it.Partial() {
		d.err = partialOnly(tp, rp.RecordBatches, start)
	}
	it.Reset(nil, batch.Options{}) // keep nothing of the answer alive
	return d
}

// partialOnly is the error of an answer whose records are part of one batch
// and no whole one: the position cannot move, and fetching it again gets the
// same. Kafka from Fetch v3 returns a partition's first batch whole or
// nothing; a broker below v3 cuts a batch larger than the partition's limit
// (FetchMaxPartitionBytes), as may a broker that is not Kafka's. It matches
// errors.ErrMessageTooLarge, as Java's RecordTooLargeException there.
func partialOnly(tp TopicPartition, raw []byte, start int64) error {
	base := start
	if len(raw) >= 8 {
		base = int64(binary.BigEndian.Uint64(raw))
	}
	return &batch.DecodeError{Topic: tp.Topic, Partition: tp.Partition, Offset: base,
		Reason: fmt.Sprintf("the answer holds %d bytes of a batch and no whole batch: nothing past offset %d can be read (a batch larger than FetchMaxPartitionBytes cut by the broker)", len(raw), start),
		Err:    errors.ErrMessageTooLarge}
}

// collectLocked takes what Poll returns: pending reports and errors, then the
// buffered answers of unpaused partitions, in the order they came, up to
// MaxPollRecords (the answer that reaches it is left part delivered, first
// in line for the next Poll), stepped into their machines as they are
// delivered. The records delivered are listed in mk, for Poll to
// make outside the lock (makeRecords): the fetch loops need the lock to
// buffer their next answers and plan their next requests meanwhile.
func (c *Consumer) collectLocked(mk *toMake) Fetches {
	var f Fetches
	f.Truncations, c.events = c.events, nil
	f.Errors, c.errs = c.errs, nil
	limit := c.cfg.maxPollRecords
	// The limit counts the records delivered, not those buffered: an
	// answer that delivers none (stale: the partition moved on, e.g. to
	// validate its position with a new leader) must not leave the next
	// partition's answer for a later Poll, which, this one having
	// returned nothing, would wait for news from the partition that
	// moved on.
	var keep, back []*part
	ready := c.ready
	c.ready = nil
	for _, p := range ready {
		if p.paused || limit > 0 && mk.n >= limit {
			keep = append(keep, p)
			continue
		}
		b := p.buf
		if !c.deliverLocked(p, &f, mk, limit) && p.buf == b {
			// Left part delivered (at the limit): first in line
			// for the next Poll to go on with.
			back = append(back, p)
		}
	}
	c.ready = append(append(back, keep...), c.ready...)
	// Reports raised while delivering (an epoch regression in a batch)
	// belong to this Poll too.
	f.Truncations = append(f.Truncations, c.events...)
	f.Errors = append(f.Errors, c.errs...)
	c.events, c.errs = nil, nil
	return f
}

// toMake lists the records a Poll delivers, as collectLocked decided: runs
// of Refs of delivered batches, in delivery order, and the holds on the
// answers' Refs (decoded.holders) to drop once they are made.
type toMake struct {
	n     int
	runs  []run
	holds []*decoded
}

// run is a run of delivered records: refs of the batch sp of partition tp.
type run struct {
	tp   TopicPartition
	sp   *span
	refs []batch.Ref
}

// makeRecords makes the records mk lists into f.Records, one slice sized
// once. It runs without the lock: the answers are the Poll's alone.
func (c *Consumer) makeRecords(f *Fetches, mk *toMake) {
	if mk.n > 0 {
		sl := recycled.records(mk.n)
		recs := sl.recs[:mk.n]
		i := 0
		for _, r := range mk.runs {
			for j := range r.refs {
				record(&recs[i], r.tp, r.sp, &r.refs[j])
				i++
			}
		}
		f.Records = recs
		m := f.memory(&recycled, c.cfg.poisonReleased)
		m.recs = slab{recs: recs, dirty: sl.dirty}
	}
	for _, d := range mk.holds {
		d.drop()
	}
	*mk = toMake{}
}

// deliverLocked steps the batches of p's buffered answer into the machine
// and lists their records in mk, until the answer ends or, with limit above
// 0, mk holds limit records or more: it then reports false and leaves the
// rest buffered. Batches are never split. A batch the machine does not
// accept (stale, or one that starts a validation) ends the delivery, and
// the rest of the answer is dropped.
func (c *Consumer) deliverLocked(p *part, f *Fetches, mk *toMake, limit int) (done bool) {
	b := p.buf
	d := b.d
	m := f.memory(&recycled, c.cfg.poisonReleased)
	// While its batches are stepped the answer is no longer p's, as once
	// delivered (a step that drops p's buffer finds none); it is put back
	// if the limit leaves part of it for the next Poll.
	p.buf, p.delivering = nil, b
	d.holders.Add(1) // this Poll's, until it made its records
	mk.holds = append(mk.holds, d)
	defer func() {
		p.delivering = nil
		if !done && !b.dropped {
			p.buf = b
			return
		}
		c.buffered -= b.size
		c.wakeFetchersLocked()
		mk.holds = append(mk.holds, d) // the answer's own hold ends
		// The rest of the decompression buffers (no delivered record
		// lives in them) go with this Poll.
		m.bufs = append(m.bufs, d.bufs[b.bufs:]...)
	}()
	for ; b.next < len(d.spans); b.next++ {
		if limit > 0 && mk.n >= limit {
			return false
		}
		sp := &d.spans[b.next]
		// The batch's decompressed records go with the Poll that
		// delivers them, and are released with it.
		m.bufs = append(m.bufs, d.bufs[b.bufs:sp.bufs]...)
		b.bufs = sp.bufs
		before, _ := p.m.Position()
		c.stepLocked(p, seek.BatchFetched{Req: b.req, Base: sp.batch.Base, Last: sp.batch.Last, Epoch: sp.batch.LeaderEpoch, Checked: b.checked})
		after, ok := p.m.Position()
		if !ok || after.Offset <= before.Offset {
			if sp.batch.Last < before.Offset {
				continue // entirely below the position
			}
			return true // not accepted: stale, or validation started
		}
		p.lastFrom = b.from
		if sp.to > sp.from {
			p.remember(sp.batch, c.cfg.historySize)
		}
		p.observeEpochs(before.Offset, sp.batch)
		// Offsets rise strictly within a batch (the parser checks it), so
		// the records below the position are a prefix of the span: skip
		// it without reading every record again.
		from := sp.from
		if from < sp.to && d.refs[from].Offset < before.Offset {
			from += sort.Search(sp.to-sp.from, func(i int) bool { return d.refs[sp.from+i].Offset >= before.Offset })
		}
		if from < sp.to {
			mk.runs = append(mk.runs, run{tp: p.tp, sp: sp, refs: d.refs[from:sp.to]})
			mk.n += sp.to - from
		}
	}
	if err := d.err; err != nil {
		pos, _ := p.m.Position()
		n := len(c.errs)
		c.stepLocked(p, seek.FetchFailed{Req: b.req, Code: seek.CodeCorruptMessage})
		// The machine halts the partition, and ActHalt reported a bare
		// CORRUPT_MESSAGE: report the decode error, which names the
		// batch, in its place (one error per corrupt batch). A stale
		// answer (the partition moved on, e.g. to a new leader, while it
		// was buffered) halts nothing and reports nothing.
		if len(c.errs) > n {
			c.errs = append(c.errs[:n], &errors.PartitionError{Op: "fetch", Topic: p.tp.Topic, Partition: p.tp.Partition,
				Offset: pos.Offset, LeaderEpoch: pos.Epoch, Err: err})
		}
		return true
	}
	c.stepLocked(p, seek.FetchCompleted{Req: b.req, Checked: b.checked})
	return true
}

// record fills rec, a slot of a new or recycled slice, with the record x
// of batch sp of partition tp.
func record(rec *Record, tp TopicPartition, sp *span, x *batch.Ref) {
	// Field by field into the slot: a struct literal would be built
	// aside and copied in whole with bulk write barriers (a fifth of a
	// small-record consumer's CPU).
	rec.Topic, rec.Partition, rec.Offset, rec.LeaderEpoch = tp.Topic, tp.Partition, x.Offset, sp.batch.LeaderEpoch
	rec.Timestamp = time.UnixMilli(x.Timestamp)
	rec.Key, rec.Value = x.Key.In(sp.payload), x.Value.In(sp.payload)
	rec.ProducerID, rec.ProducerEpoch = sp.batch.ProducerID, sp.batch.ProducerEpoch
	rec.Headers = nil // a recycled slot holds an earlier record's
	if x.HeadersLen > 0 {
		hs := sp.headers[x.HeadersAt : x.HeadersAt+x.HeadersLen]
		rec.Headers = make([]Header, len(hs))
		for i, hd := range hs {
			rec.Headers[i] = Header{Key: string(hd.Key), Value: bytes.Clone(hd.Value)}
			if hd.Value == nil {
				rec.Headers[i].Value = nil
			}
		}
	}
}

// decompressor returns the consumer's decompressor, bounded by the
// configured size limit.
func (c *Consumer) decompressor() *compress.Decompressor {
	d, err := compress.NewDecompressor(c.cfg.decompressLimit)
	if err != nil {
		return nil // nil: the codec's default, bounded at 256 MiB
	}
	return d
}
