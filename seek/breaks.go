package seek

// Breaks of the consumed lineage: reports and the policy.

// diverged reports a located divergence at d and applies the policy.
// pruned marks a divergence found from an answer about an epoch the leader
// no longer has (Truncation.EpochPruned).
func (p *Partition) diverged(d, resume Position, exact, pruned bool) {
	d, resume = normal(d), normal(resume)
	p.narrowing = false
	p.vpurpose = purposeNone
	replaced := Range{From: d.Offset, To: p.pos.Offset}
	if from, ok := p.lineage.consumedFrom(); ok && from > d.Offset {
		replaced.From = from // nothing below was consumed in this lineage
	}
	t := Truncation{
		Kind:        Diverged,
		Consumed:    p.pos,
		Divergent:   d,
		Resume:      resume,
		Exact:       exact,
		EpochPruned: pruned,
		Replaced:    replaced,
		Skipped:     Range{From: p.pos.Offset, To: p.pos.Offset},
	}
	if p.cfg.Policy == PolicyNone {
		t.Then = ThenHalt
		p.report(t)
		return
	}
	t.Then = ThenRewind
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	// Move to the divergence point itself, validated by the answer just
	// received; nothing more of the old lineage is delivered.
	p.pos = resume
	p.lineage.truncate(resume.Offset, resume.Epoch, exact)
	p.regressAt = NoOffset
	// A new lineage from here: even at the offset where a leader's
	// DivergingEpoch could not be acted on, fetches carry the
	// position's epoch again.
	p.noLastEpochAt = NoOffset
	p.state = StateFetching
	p.send()
}

// broken reports a break that has no divergence point and applies the
// policy: halt, or reset by policy.
func (p *Partition) broken(kind BreakKind, replaced, skipped Range) {
	p.narrowing = false
	p.vpurpose = purposeNone
	if skipped.Empty() {
		skipped = Range{From: p.pos.Offset, To: p.pos.Offset}
	}
	t := Truncation{
		Kind:      kind,
		Consumed:  p.pos,
		Divergent: Position{Offset: NoOffset, Epoch: NoEpoch},
		Resume:    Position{Offset: NoOffset, Epoch: NoEpoch},
		Replaced:  replaced,
		Skipped:   skipped,
	}
	if p.cfg.Policy == PolicyNone {
		t.Then = ThenHalt
		p.report(t)
		return
	}
	t.Then = ThenReset
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	spec := ListEarliest
	if p.cfg.Policy == PolicyLatest && kind != Recreated {
		// A recreated topic diverges at its very start: kepoch's stance
		// is the divergence point, whatever the policy.
		spec = ListLatest
	}
	p.forget()
	p.startList(spec, 0, purposeReset)
}

// brokenAt is broken when the log start is already known: under
// PolicyEarliest the position moves there without another ListOffsets.
func (p *Partition) brokenAt(kind BreakKind, replaced, skipped Range, logStart int64) {
	if p.cfg.Policy != PolicyEarliest || logStart < 0 {
		p.broken(kind, replaced, skipped)
		return
	}
	if skipped.Empty() {
		skipped = Range{From: p.pos.Offset, To: p.pos.Offset}
	}
	p.acts = append(p.acts, Action{Kind: ActReport, Report: Truncation{
		Kind:      kind,
		Consumed:  p.pos,
		Divergent: Position{Offset: NoOffset, Epoch: NoEpoch},
		Resume:    Position{Offset: NoOffset, Epoch: NoEpoch},
		Replaced:  replaced,
		Skipped:   skipped,
		Then:      ThenReset,
	}})
	p.forget()
	p.setPosition(Position{Offset: logStart, Epoch: NoEpoch})
	p.send()
}

// report emits a PolicyNone break and halts, keeping the position.
func (p *Partition) report(t Truncation) {
	p.acts = append(p.acts, Action{Kind: ActReport, Report: t})
	p.halt(HaltBreak, CodeNone)
	p.broke = true
	p.brokeAt = t.Consumed
}
