package seek

// OffsetForLeaderEpoch answers and what they prove.

// onEpochEnd handles the answer to the OffsetForLeaderEpoch in flight.
func (p *Partition) onEpochEnd(e EpochEndOffset) {
	if !p.answers(e.Req, ActValidate) || p.state != StateAwaitingValidation {
		return
	}
	p.inflight, p.infKind = 0, 0
	switch classify(e.Code) {
	case clsNone:
		p.resolve(e.End)
	case clsUnsupported:
		// The leader lacks OffsetForLeaderEpoch v3: Kafka skips
		// validation; in-band DivergingEpoch still guards the fetches.
		p.skipValidation()
	case clsOutOfRange:
		p.waitMetadata(RefreshError)
	default:
		p.failed(e.Code)
	}
}

// resolve applies a leader's answer for p.check.
func (p *Partition) resolve(ans EpochEnd) {
	if p.vpurpose == purposeNearest {
		want := p.check
		np, ok := Nearest(want, ans)
		if !ok {
			p.broken(Unlocated, Range{From: NoOffset, To: want.Offset}, Range{})
			return
		}
		p.setPosition(np)
		p.vpurpose = purposeNone
		p.acts = append(p.acts, Action{Kind: ActResolved, Resolved: Resolved{Requested: want, Position: np}})
		p.send()
		return
	}
	v := compare(p.check, ans, &p.lineage)
	switch v.out {
	case outConsistent:
		if p.narrowing {
			// The leader has our record just below the candidate, in
			// the epoch just checked: the candidate is the first
			// divergent offset, and that epoch is the position's.
			agreed := Position{Offset: p.cand.Offset, Epoch: p.check.Epoch}
			p.diverged(agreed, agreed, true, false)
			return
		}
		p.validated()
	case outUndefined:
		if p.narrowing {
			p.diverged(p.cand, p.candResume, false, false)
			return
		}
		p.broken(Unlocated, Range{From: NoOffset, To: p.pos.Offset}, Range{})
	case outExact:
		p.diverged(v.at, v.resume, true, false)
	case outBound:
		p.diverged(v.at, v.resume, false, false)
	case outPruned:
		p.diverged(v.at, v.resume, false, true)
	case outRecheck:
		p.narrowing = true
		p.cand, p.candResume = v.at, v.resume
		p.check = v.recheck
		p.send()
	}
}

// validated ends a validation that found nothing lost.
func (p *Partition) validated() {
	pur := p.vpurpose
	p.vpurpose = purposeNone
	if pur == purposeRange {
		// The epoch checks out, so the position is not past our
		// lineage's end; see where the log starts.
		p.rangeOK = true
		p.startList(ListEarliest, 0, purposeClassify)
		return
	}
	p.state = StateFetching
	p.send()
}
