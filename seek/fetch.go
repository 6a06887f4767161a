package seek

// Fetch answers: batches, partition errors, DivergingEpoch.

// onBatch accepts a batch of the fetch in flight that reaches the position,
// unless its epoch goes below the position's.
func (p *Partition) onBatch(e BatchFetched) {
	if !p.answers(e.Req, ActFetch) || e.Last < p.pos.Offset {
		return
	}
	if p.fetchValidates() {
		// The fetch is the position's validation: its first batch that
		// reaches the position is accepted only if the broker checked
		// LastFetchedEpoch; otherwise nothing of it is, and the leader
		// is asked.
		if !e.Checked {
			p.validate(purposeValidate)
			return
		}
		p.checkedInBand()
	}
	if e.Epoch >= 0 && e.Epoch < p.pos.Epoch && p.regressAt != p.pos.Offset {
		// Epochs never go down along a log: the leader's log after our
		// position is not the one we consumed from. Check before
		// delivering (a broker below Fetch v12 cannot tell us in-band).
		// Checked once per position, so a position whose epoch was a
		// loose claim (a commit of the leader epoch instead of the
		// record epoch) costs one round trip, not a loop.
		p.regressAt = p.pos.Offset
		p.validate(purposeValidate)
		return
	}
	p.lineage.observe(e.Epoch, max(e.Base, p.pos.Offset))
	p.pos = Position{Offset: e.Last + 1, Epoch: max(e.Epoch, NoEpoch)}
	p.oorStreak = 0
}

// onFetchFailed handles a partition error of the fetch in flight.
func (p *Partition) onFetchFailed(e FetchFailed) {
	if !p.answers(e.Req, ActFetch) {
		return
	}
	p.inflight, p.infKind = 0, 0
	if h := e.Hint; h != nil && h.ID >= 0 && h.Epoch > p.leader.Epoch {
		// KIP-951: the answer names a newer leader; no need to wait for
		// metadata.
		p.onLeader(LeaderChanged{Leader: h.ID, Epoch: h.Epoch, InBand: e.HintInBand})
		if p.inflight != 0 || p.state != StateFetching {
			return
		}
	}
	if classify(e.Code) == clsOutOfRange {
		p.outOfRange()
		return
	}
	if classify(e.Code) == clsUnsupported {
		p.halt(HaltError, e.Code)
		return
	}
	if !p.failed(e.Code) {
		p.send() // a "failure" with code NONE: as if completed
	}
}

// outOfRange classifies an OFFSET_OUT_OF_RANGE fetch answer: first rule out
// a divergence if the position has an epoch, then compare the position with
// the log start.
func (p *Partition) outOfRange() {
	p.oorStreak++
	if p.oorStreak > 2 {
		// Validation and the log start both said the position is fine,
		// twice, yet the leader keeps refusing it: treat it as past the
		// end.
		p.broken(PastLogEnd, Range{From: NoOffset, To: p.pos.Offset}, Range{})
		return
	}
	if p.pos.HasEpoch() && p.leader.Epoch >= 0 {
		p.validate(purposeRange)
		return
	}
	p.rangeOK = false
	p.startList(ListEarliest, 0, purposeClassify)
}

// onDiverging handles an in-band DivergingEpoch for the fetch in flight:
// the leader's answer for the position's epoch, as if validated.
func (p *Partition) onDiverging(e DivergingEpoch) {
	if !p.answers(e.Req, ActFetch) {
		return
	}
	p.inflight, p.infKind = 0, 0
	if !p.pos.HasEpoch() {
		// We sent no LastFetchedEpoch; a conforming broker cannot say
		// this. Fetch again after the backoff: a broker that says it
		// every time would otherwise be asked again at once, forever.
		p.retryLater()
		return
	}
	p.state = StateAwaitingValidation
	p.vpurpose = purposeValidate
	p.check = p.pos
	p.narrowing = false
	if compare(p.check, e.End, &p.lineage).out == outConsistent {
		// The leader flags a divergence that its own answer does not
		// show (a broker that is not Kafka's): do not ask it again for
		// this position, or it would say the same forever.
		p.noLastEpochAt = p.pos.Offset
	}
	p.resolve(e.End)
}
