package seek

// Metadata: the leader, its epoch, the topic id.

// onLeader applies what metadata (or a KIP-951 hint) says about the leader.
func (p *Partition) onLeader(e LeaderChanged) {
	var zero TopicID
	if e.TopicID != zero {
		if p.topicID != zero && e.TopicID != p.topicID {
			p.recreated(e)
			return
		}
		p.topicID = e.TopicID
	}
	if e.Epoch < 0 {
		// No trustworthy epoch (Metadata below v9, or a leaderless
		// partition). "No leader" never replaces a known leader
		// (franz-go #1331); a leader named without an epoch is
		// followed, without one: its requests carry no
		// CurrentLeaderEpoch and nothing can be validated against it,
		// but the fetches still carry LastFetchedEpoch.
		if e.Leader < 0 || e.Leader == p.leader.ID {
			return
		}
		p.leader = Leader{ID: e.Leader, Epoch: NoEpoch}
		p.leaderInBand = e.InBand
		p.leaderMoved()
		return
	}
	if e.Epoch < p.lastSeen || e.Epoch < p.leader.Epoch {
		p.behind++
		if p.behind < p.cfg.MaxEpochWaits {
			if e.Epoch > p.leader.Epoch {
				// Newer than the leader we know, older than an epoch
				// a commit or seek told us of: adopt it, still wait.
				p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
				p.leaderInBand = e.InBand
				p.leaderMoved()
			}
			return
		}
		// Confirmed often enough: the epoch really went back.
		p.lastSeen = e.Epoch
		p.behind = 0
		if e.Epoch == p.leader.Epoch && e.Leader == p.leader.ID {
			// Already adopted while waiting: stop waiting.
			p.leaderInBand = e.InBand
			if p.inflight == 0 {
				p.send()
			}
			return
		}
	}
	p.behind = 0
	if e.Epoch == p.leader.Epoch && e.Leader == p.leader.ID {
		p.leaderInBand = e.InBand // what the consumer knows of it now
		return
	}
	p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
	p.leaderInBand = e.InBand
	p.raiseSeen(e.Epoch)
	p.leaderMoved()
}

// leaderMoved reacts to a new leader or leader epoch: anything in flight
// carries a stale CurrentLeaderEpoch and is superseded.
func (p *Partition) leaderMoved() {
	switch p.state {
	case StateFetching:
		if p.pos.HasEpoch() && p.leader.Epoch >= 0 && p.leader.ID >= 0 {
			// A new leader may have a different log: check before
			// accepting anything from it (Kafka's
			// maybeValidatePosition). In-band DivergingEpoch would
			// catch it too, but not every Kafka-compatible broker
			// implements it: only with InBandValidation, and a
			// leader known to check, is the first fetch the check.
			p.validate(p.checkPurpose())
			return
		}
		p.send()
	case StateAwaitingValidation:
		if p.narrowing {
			// A narrowing is only meaningful against one leader's log:
			// start over from the consumed position.
			p.narrowing = false
			p.check = p.pos
		}
		// (A validation by fetch is sent to the new leader if it too is
		// known to check LastFetchedEpoch, else becomes an
		// OffsetForLeaderEpoch: send decides.)
		p.send()
	case StateAwaitingReset:
		if p.lpurpose == purposeClassify && p.pos.HasEpoch() && p.leader.Epoch >= 0 {
			// The old leader vouched for the position's epoch; the
			// new one has not.
			p.rangeOK = false
			p.validate(purposeRange)
			return
		}
		p.send()
	}
}

// recreated handles a topic id change.
func (p *Partition) recreated(e LeaderChanged) {
	p.topicID = e.TopicID
	p.leader = Leader{ID: e.Leader, Epoch: e.Epoch}
	p.leaderInBand = e.InBand
	p.lastSeen = e.Epoch // epochs restart with the new topic
	p.behind = 0
	classifying := p.state == StateAwaitingReset && p.lpurpose == purposeClassify
	switch {
	case p.state == StateFetching, p.state == StateAwaitingValidation, classifying:
		// (An OFFSET_OUT_OF_RANGE being classified still has the
		// position consumed from the old topic.)
		if p.pos.Offset <= 0 && !p.pos.HasEpoch() {
			// Nothing consumed from the old topic.
			p.forget()
			p.setPosition(Position{Offset: 0, Epoch: NoEpoch})
			p.send()
			return
		}
		replaced := Range{From: 0, To: p.pos.Offset}
		if from, ok := p.lineage.consumedFrom(); ok {
			replaced.From = from // nothing below was consumed in this lineage
		}
		p.broken(Recreated, replaced, Range{})
	case p.state == StateAwaitingReset:
		p.send()
	}
}
