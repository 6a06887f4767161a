package seek

// ListOffsets: start positions, resets by policy, out-of-range classification.

// startList asks for an offset. Classifying an OFFSET_OUT_OF_RANGE keeps
// the position (it is what gets classified); any other listing replaces it.
func (p *Partition) startList(spec ListSpec, ts int64, pur purpose) {
	p.state = StateAwaitingReset
	if pur != purposeClassify {
		p.pos = Position{Offset: NoOffset, Epoch: NoEpoch}
		p.lineage.reset()
	}
	p.listSpec, p.listTS, p.lpurpose = spec, ts, pur
	p.send()
}

// onListed handles the answer to the ListOffsets in flight.
func (p *Partition) onListed(e ListedOffset) {
	if !p.answers(e.Req, ActListOffsets) || p.state != StateAwaitingReset {
		return
	}
	p.inflight, p.infKind = 0, 0
	switch classify(e.Code) {
	case clsNone:
	case clsUnsupported:
		p.halt(HaltError, e.Code)
		return
	case clsOutOfRange:
		p.waitMetadata(RefreshError)
		return
	default:
		p.failed(e.Code)
		return
	}
	if p.lpurpose == purposeClassify {
		p.classified(e.Offset)
		return
	}
	if e.Offset < 0 {
		if p.listSpec == ListTimestamp {
			// No record at or after the timestamp: the log end.
			p.startList(ListLatest, 0, p.lpurpose)
			return
		}
		p.retryLater()
		return
	}
	// ListOffsets results carry no position epoch (the epoch returned is
	// that of the record at Offset, not of the one before it); the first
	// batch supplies it.
	p.lpurpose = purposeNone
	p.setPosition(Position{Offset: e.Offset, Epoch: NoEpoch})
	p.send()
}

// classified finishes an OFFSET_OUT_OF_RANGE given the log start.
func (p *Partition) classified(logStart int64) {
	p.lpurpose = purposeNone
	p.state = StateFetching // the position is still ours while we decide
	switch {
	case logStart >= 0 && p.pos.Offset < logStart:
		p.brokenAt(BelowLogStart, Range{From: p.pos.Offset, To: p.pos.Offset}, Range{From: p.pos.Offset, To: logStart}, logStart)
	case p.rangeOK:
		// The leader vouched for our epoch up to the position and the
		// position is not below the log start: a passing condition.
		p.rangeOK = false
		p.send()
	default:
		p.brokenAt(PastLogEnd, Range{From: NoOffset, To: p.pos.Offset}, Range{}, logStart)
	}
}
