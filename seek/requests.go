package seek

// Requests: sending what the state needs, waiting for metadata, retrying.

// send sends the request the current state needs, with a fresh id, or waits
// for metadata if it cannot. Whatever was in flight is superseded.
func (p *Partition) send() {
	p.inflight, p.infKind, p.backoff = 0, 0, 0
	switch p.state {
	case StateInitializing, StateHalted:
		return
	case StateFetching:
		if p.paused {
			return
		}
	}
	if p.leader.ID < 0 {
		p.waitMetadata(RefreshLeaderUnknown)
		return
	}
	if p.leader.Epoch >= 0 && p.leader.Epoch < p.lastSeen {
		p.waitMetadata(RefreshBehind)
		return
	}
	switch p.state {
	case StateFetching:
		p.emitFetch(false)
	case StateAwaitingValidation:
		if p.leader.Epoch < 0 {
			// Metadata without epochs: nothing to validate against
			// (Kafka's validatePosition needs both epochs).
			p.skipValidation()
			return
		}
		if p.vpurpose == purposeFetch {
			if p.canFetchValidate() {
				p.emitFetch(true)
				return
			}
			// The fetch cannot carry the check (the leader is not
			// known to make it, the fetch would carry no
			// LastFetchedEpoch, the partition is paused): validate
			// first, as without InBandValidation.
			p.vpurpose = purposeValidate
		}
		p.emit(ActValidate)
		p.acts[len(p.acts)-1].Validate = ValidateRequest{
			Req:                p.inflight,
			Leader:             p.leader.ID,
			Epoch:              p.check.Epoch,
			CurrentLeaderEpoch: p.leader.Epoch,
		}
	case StateAwaitingReset:
		p.emit(ActListOffsets)
		p.acts[len(p.acts)-1].List = ListRequest{
			Req:                p.inflight,
			Leader:             p.leader.ID,
			Spec:               p.listSpec,
			Timestamp:          p.listTS,
			CurrentLeaderEpoch: p.leader.Epoch,
		}
	}
}

// emitFetch emits the Fetch of the position from the leader; validates
// marks the fetch whose answer is the position's validation.
func (p *Partition) emitFetch(validates bool) {
	p.emit(ActFetch)
	f := &p.acts[len(p.acts)-1].Fetch
	*f = FetchRequest{
		Req:                p.inflight,
		Leader:             p.leader.ID,
		Offset:             p.pos.Offset,
		CurrentLeaderEpoch: p.leader.Epoch,
		LastFetchedEpoch:   p.pos.Epoch,
		Validates:          validates,
	}
	if p.noLastEpochAt == p.pos.Offset {
		f.LastFetchedEpoch = NoEpoch
	}
}

// canFetchValidate reports whether a fetch can validate the position being
// checked (purposeFetch): the leader is known to check LastFetchedEpoch, the
// fetch would carry the position's epoch as LastFetchedEpoch and is checked
// at the position's offset, and the partition is not paused (no fetch would
// be sent).
func (p *Partition) canFetchValidate() bool {
	return p.leaderInBand && !p.paused && !p.narrowing && p.check == p.pos &&
		p.pos.HasEpoch() && p.noLastEpochAt != p.pos.Offset
}

// emit appends a request action of kind k with a fresh id, which becomes the
// one in flight.
func (p *Partition) emit(k ActionKind) {
	p.inflight, p.infKind = p.ids.next(), k
	p.acts = append(p.acts, Action{Kind: k})
}

// waitMetadata asks for metadata and schedules another attempt.
func (p *Partition) waitMetadata(r RefreshReason) {
	p.refresh(r)
	p.retryLater()
}

// refresh asks for metadata, once per Step.
func (p *Partition) refresh(r RefreshReason) {
	if p.refreshed {
		return
	}
	p.refreshed = true
	p.acts = append(p.acts, Action{Kind: ActRefreshMetadata, Refresh: r})
}

// retryLater schedules the current request again after the backoff.
func (p *Partition) retryLater() {
	p.inflight, p.infKind = 0, 0
	p.backoff = p.cfg.RetryTicks
}

// failed handles a retriable or fatal error code of the request in flight.
// It returns false for codes the caller must handle itself.
func (p *Partition) failed(c Code) bool {
	switch classify(c) {
	case clsFenced:
		// We are behind: newer metadata will resend at once (onLeader);
		// until then retry, in case the metadata we have is the newest.
		p.waitMetadata(RefreshFenced)
	case clsUnknownEpoch:
		// The broker is behind: the same request, later.
		p.retryLater()
	case clsTopicID:
		p.waitMetadata(RefreshTopicID)
	case clsFatal:
		p.halt(HaltError, c)
	case clsRetry:
		p.waitMetadata(RefreshError)
	default:
		return false
	}
	return true
}

// halt stops the partition until the application seeks.
func (p *Partition) halt(r HaltReason, c Code) {
	p.forget()
	p.state = StateHalted
	p.acts = append(p.acts, Action{Kind: ActHalt, Halt: Halt{Reason: r, Code: c}})
}
