package seek

// Positions: assignments, seeks, and the position they set.

// seekTo handles Assigned (isSeek false) and Seek.
func (p *Partition) seekTo(s Start, isSeek bool) {
	ack := isSeek && p.state == StateHalted && p.broke && s.Kind == StartAt &&
		s.Offset == p.brokeAt.Offset && (s.Epoch < 0 || s.Epoch == p.brokeAt.Epoch)
	p.forget()
	p.lineage.reset()
	switch s.Kind {
	case StartAt, StartNearest:
		if s.Offset < 0 {
			p.startList(ListEarliest, 0, purposeStart)
			return
		}
		if s.Epoch < 0 || s.Offset == 0 || ack {
			// Nothing to validate, or the application accepted the
			// reported break: continue from here in whatever lineage
			// the leader has, without the epoch that diverged.
			p.setPosition(Position{Offset: s.Offset, Epoch: NoEpoch})
			if s.Kind == StartNearest {
				// Nothing to resolve, but the caller waits for where
				// it landed.
				p.acts = append(p.acts, Action{Kind: ActResolved, Resolved: Resolved{
					Requested: Position{Offset: s.Offset, Epoch: s.Epoch}, Position: p.pos}})
			}
			p.send()
			return
		}
		p.raiseSeen(s.Epoch)
		p.pos = Position{Offset: s.Offset, Epoch: s.Epoch}
		p.lineage.root(p.pos)
		pur := p.checkPurpose()
		if s.Kind == StartNearest {
			// Resolving needs the leader's answer about the epoch
			// itself, which only OffsetForLeaderEpoch gives.
			pur = purposeNearest
		}
		p.validate(pur)
	case StartHistory:
		switch {
		case s.Offset < 0:
			p.startList(ListEarliest, 0, purposeStart)
		case s.Epoch < 0:
			// The history cannot say which epoch record Offset-1 has:
			// nothing to validate with. Say so, and wait for the
			// application, rather than fetch from an unchecked offset.
			p.pos = Position{Offset: s.Offset, Epoch: NoEpoch}
			p.halt(HaltUnvalidated, CodeNone)
		default:
			p.pos = Position{Offset: s.Offset, Epoch: s.Epoch}
			p.lineage.seed(s.History, p.pos)
			if id := s.History.TopicID(); id != (TopicID{}) {
				if p.topicID != (TopicID{}) && id != p.topicID {
					// The history is of a deleted incarnation of the
					// topic: every stored offset was of a log that is
					// gone, and its epochs mean nothing in this one.
					p.broken(Recreated, Range{From: 0, To: s.Offset}, Range{})
					return
				}
				// Metadata naming another ID reports Recreated.
				p.topicID = id
			}
			p.raiseSeen(s.Epoch)
			p.validate(p.checkPurpose())
		}
	case StartEarliest:
		p.startList(ListEarliest, 0, purposeStart)
	case StartLatest:
		p.startList(ListLatest, 0, purposeStart)
	case StartTimestamp:
		p.startList(ListTimestamp, s.Timestamp, purposeStart)
	default:
		p.state = StateInitializing
	}
}

// setPosition makes pos the valid position and roots the lineage there.
func (p *Partition) setPosition(pos Position) {
	p.pos = normal(pos)
	p.lineage.root(pos)
	p.state = StateFetching
}

// validate checks the position against the leader.
func (p *Partition) validate(pur purpose) {
	p.state = StateAwaitingValidation
	p.vpurpose = pur
	p.check = p.pos
	p.narrowing = false
	p.send()
}

// checkPurpose is how a position whose lineage may have changed (a leader
// or leader-epoch change, an AtEpoch or AtHistory start) is checked: by
// the next fetch with Config.InBandValidation (send falls back to
// OffsetForLeaderEpoch when that fetch cannot make the check), else by
// OffsetForLeaderEpoch first.
func (p *Partition) checkPurpose() purpose {
	if p.cfg.InBandValidation {
		return purposeFetch
	}
	return purposeValidate
}

// fetchValidates reports whether the fetch the partition sends (or has in
// flight) is the position's validation.
func (p *Partition) fetchValidates() bool {
	return p.state == StateAwaitingValidation && p.vpurpose == purposeFetch
}

// checkedInBand ends a validation by a fetch whose answer the broker
// checked: it found the position's epoch ending at or after the position
// in its log (Kafka's Partition.readRecords answers DivergingEpoch
// otherwise), the same proof as an OffsetForLeaderEpoch answer compare
// finds consistent. The fetch goes on.
func (p *Partition) checkedInBand() {
	p.state = StateFetching
	p.vpurpose = purposeNone
}

// raiseSeen records an epoch learned from any source.
func (p *Partition) raiseSeen(e int32) {
	if e > p.lastSeen {
		p.lastSeen = e
	}
}

// skipValidation ends a validation that cannot be made (no leader epoch,
// or a broker without OffsetForLeaderEpoch v3).
func (p *Partition) skipValidation() {
	if p.narrowing {
		p.diverged(p.cand, p.candResume, false, false)
		return
	}
	if p.vpurpose == purposeRange {
		p.rangeOK = false
		p.startList(ListEarliest, 0, purposeClassify)
		return
	}
	p.state = StateFetching
	p.vpurpose = purposeNone
	p.send()
}

// normal drops the epoch of a position at offset 0: there is no record
// before it to have one (and a leader asked about it would answer
// DivergingEpoch forever).
func normal(pos Position) Position {
	if pos.Offset <= 0 {
		pos.Epoch = NoEpoch
	}
	return pos
}
