package consumer

import (
	"bytes"
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

	// buf is the Fetch answer waiting for Poll; its batches are stepped
	// into the machine when Poll delivers them.
	buf *fetched
	// nearest receives the position a SeekToNearest resolved to.
	nearest chan Position
}

// fetched is one partition's Fetch answer with data, held for Poll.
type fetched struct {
	req  seek.RequestID
	rp   kmsg.FetchResponseTopicPartition
	size int
}

func (c *Consumer) newPart(tp TopicPartition) (*part, error) {
	cfg := seek.DefaultConfig()
	cfg.Policy = c.cfg.policy
	cfg.LineageSize = c.cfg.lineageSize
	cfg.MaxEpochWaits = c.cfg.maxEpochWaits
	cfg.IDs = &c.ids
	m, err := seek.NewPartition(cfg)
	if err != nil {
		return nil, err
	}
	return &part{tp: tp, m: m}, nil
}

func (p *part) revoke() {
	p.m.Step(seek.Revoked{})
	p.fetch = nil
	if p.nearest != nil {
		p.nearest = nil
	}
}

// dropBufferLocked forgets a buffered Fetch answer (its records were never
// delivered).
func (c *Consumer) dropBufferLocked(p *part) {
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
	acts := p.m.Step(ev)
	if lc, ok := ev.(seek.LeaderChanged); ok && lc.TopicID != (seek.TopicID{}) {
		p.topicID = lc.TopicID
	}
	for i := range acts {
		c.actLocked(p, acts[i])
	}
}

func (c *Consumer) actLocked(p *part, a seek.Action) {
	switch a.Kind {
	case seek.ActFetch:
		f := a.Fetch
		p.fetch, p.sent = &f, false
		c.fetcherLocked(f.Leader).wakeUp()
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
		}
		c.events = append(c.events, ev)
		if ev.Halted {
			c.errs = append(c.errs, ev.Err())
		}
		c.signalLocked()
	case seek.ActHalt:
		c.dropBufferLocked(p)
		p.fetch = nil
		if a.Halt.Reason == seek.HaltError {
			pos, _ := p.m.Position()
			c.errs = append(c.errs, &errors.PartitionError{Op: "fetch", Topic: p.tp.Topic, Partition: p.tp.Partition,
				Offset: pos.Offset, LeaderEpoch: pos.Epoch, Err: errors.FromCode(int16(a.Halt.Code))})
			c.signalLocked()
		}
	case seek.ActResolved:
		if p.nearest != nil {
			p.nearest <- a.Resolved.Position
			p.nearest = nil
		}
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

// collectLocked takes what Poll returns: pending reports and errors, then the
// buffered answers of fetching, unpaused partitions, decoded and stepped into
// their machines as they are delivered.
func (c *Consumer) collectLocked() Fetches {
	var f Fetches
	f.Truncations, c.events = c.events, nil
	f.Errors, c.errs = c.errs, nil
	var keep []*part
	for len(c.ready) > 0 {
		p := c.ready[0]
		c.ready = c.ready[1:]
		if p.paused {
			keep = append(keep, p)
			continue
		}
		if c.cfg.maxPollRecords > 0 && len(f.Records) >= c.cfg.maxPollRecords {
			keep = append(keep, p)
			continue
		}
		c.deliverLocked(p, &f)
	}
	c.ready = append(keep, c.ready...)
	// Reports raised while delivering (an epoch regression in a batch)
	// belong to this Poll too.
	f.Truncations = append(f.Truncations, c.events...)
	f.Errors = append(f.Errors, c.errs...)
	c.events, c.errs = nil, nil
	return f
}

// deliverLocked decodes p's buffered answer into f.Records, stepping each
// batch into the machine first: a batch the machine does not accept (stale,
// or one that starts a validation) ends the delivery, and the rest of the
// answer is dropped.
func (c *Consumer) deliverLocked(p *part, f *Fetches) {
	b := p.buf
	c.buffered -= b.size
	p.buf = nil
	c.wakeFetchersLocked()

	start, _ := p.m.Position()
	var it batch.Iterator
	it.ResetFetch(&b.rp, batch.Options{
		Topic:         p.tp.Topic,
		StartOffset:   start.Offset,
		ReadCommitted: c.cfg.readCommitted,
		Retain:        true,
		Decompressor:  c.decompressor(),
	})
	for it.Next() {
		bt := it.Batch()
		h := &bt.Header
		last := h.BaseOffset + int64(h.LastOffsetDelta)
		before, _ := p.m.Position()
		c.stepLocked(p, seek.BatchFetched{Req: b.req, Base: h.BaseOffset, Last: last, Epoch: h.PartitionLeaderEpoch})
		after, ok := p.m.Position()
		if !ok || after.Offset <= before.Offset {
			if last < before.Offset {
				continue // entirely below the position
			}
			return // not accepted: stale, or validation started
		}
		for i := range bt.Records {
			r := &bt.Records[i]
			if r.Offset < before.Offset {
				continue
			}
			f.Records = append(f.Records, c.record(p, h, r))
		}
	}
	if err := it.Err(); err != nil {
		pos, _ := p.m.Position()
		n := len(c.errs)
		c.stepLocked(p, seek.FetchFailed{Req: b.req, Code: seek.CodeCorruptMessage})
		// The machine halts the partition, and ActHalt reported a bare
		// CORRUPT_MESSAGE: report the decode error, which names the
		// batch, in its place (one error per corrupt batch).
		c.errs = append(c.errs[:n], &errors.PartitionError{Op: "fetch", Topic: p.tp.Topic, Partition: p.tp.Partition,
			Offset: pos.Offset, LeaderEpoch: pos.Epoch, Err: err})
		return
	}
	c.stepLocked(p, seek.FetchCompleted{Req: b.req})
}

func (c *Consumer) record(p *part, h *batch.Header, r *batch.Record) Record {
	rec := Record{
		Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch,
		Timestamp: time.UnixMilli(r.Timestamp), Key: r.Key, Value: r.Value,
		ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
	}
	if len(r.Headers) > 0 {
		rec.Headers = make([]Header, len(r.Headers))
		for i, hd := range r.Headers {
			rec.Headers[i] = Header{Key: string(hd.Key), Value: bytes.Clone(hd.Value)}
			if hd.Value == nil {
				rec.Headers[i].Value = nil
			}
		}
	}
	return rec
}

// decompressor returns the consumer's decompressor, bounded by the
// configured size limit.
func (c *Consumer) decompressor() *compress.Decompressor {
	if c.dec == nil {
		d, err := compress.NewDecompressor(c.cfg.decompressLimit)
		if err != nil {
			return nil // nil: the codec's default, bounded at 256 MiB
		}
		c.dec = d
	}
	return c.dec
}
