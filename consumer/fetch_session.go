package consumer

// fetchSession is the client side of one KIP-227 incremental fetch session
// with one broker. It decides which partitions a Fetch request must name and
// which it must tell the broker to forget; it does no I/O.
//
// The broker keeps, per session, each partition's last requested fetch
// parameters and answers an incremental request for every partition of the
// session, named or not, leaving out partitions with nothing new. So:
//
//   - a partition whose parameters changed (every partition that received
//     data has a new fetch offset) is named again;
//   - a partition kepoch does not want fetched now (its data waits for Poll,
//     it is paused, validating, or moved to another leader) is forgotten, or
//     the broker would keep sending it data at a stale offset;
//   - any session error, or a request that failed, starts over with a full
//     request, which closes the session it replaces (KIP-227: a full
//     request naming a session ID closes that session on the broker), or
//     every restart would leave a session in the broker's cache, which all
//     its clients share, until it aged out.
type fetchSession struct {
	enabled bool
	// id is the broker's session: the one incremental requests name,
	// and the one the next full request closes (0: none).
	id    int32
	epoch int32 // the epoch of the next request; 0 = full request, -1 = sessionless
	sent  map[TopicPartition]fetchParams
}

// fetchParams are the per-partition fields the broker caches in a session.
type fetchParams struct {
	topicID            [16]byte
	offset             int64
	currentLeaderEpoch int32
	lastFetchedEpoch   int32
	maxBytes           int32
}

func newFetchSession(enabled bool) *fetchSession {
	s := &fetchSession{enabled: enabled}
	s.reset()
	return s
}

// reset drops the session: the next request is a full one that closes it
// and asks for a new session (or a sessionless one when sessions are
// disabled).
func (s *fetchSession) reset() {
	s.epoch = 0
	if !s.enabled {
		s.id, s.epoch = 0, -1
	}
	s.sent = map[TopicPartition]fetchParams{}
}

// lost drops a session the broker no longer has (FETCH_SESSION_ID_NOT_FOUND,
// or it answered session ID 0): the next full request names no session to
// close, since the broker may have given the ID to another client.
func (s *fetchSession) lost() {
	s.reset()
	s.id = 0
}

// plan is one request's session fields.
type plan struct {
	sessionID    int32
	sessionEpoch int32
	send         []TopicPartition // partitions the request names
	forget       []TopicPartition // partitions the request tells the broker to forget
	// replaced are partitions named again under a new topic ID (the topic
	// was recreated): the broker keys session entries by topic ID, so the
	// entry under the old ID must be forgotten too (Java's "replaced").
	replaced []TopicPartition
	full     bool // a full request: names everything wanted
}

// plan returns what the next request must carry to fetch exactly want.
func (s *fetchSession) plan(want map[TopicPartition]fetchParams) plan {
	p := plan{sessionID: s.id, sessionEpoch: s.epoch}
	if s.epoch <= 0 {
		// Full: with epoch 0 and the session's ID, the broker closes
		// that session and opens a new one.
		p.full = true
		for tp := range want {
			p.send = append(p.send, tp)
		}
		return p
	}
	for tp, w := range want {
		if prev, ok := s.sent[tp]; !ok || prev != w {
			p.send = append(p.send, tp)
			if ok && prev.topicID != w.topicID && prev.topicID != ([16]byte{}) && w.topicID != ([16]byte{}) {
				p.replaced = append(p.replaced, tp)
			}
		}
	}
	for tp := range s.sent {
		if _, ok := want[tp]; !ok {
			p.forget = append(p.forget, tp)
		}
	}
	return p
}

// answered records a successful answer to the request planned with p for
// want: the broker's session id (0 when it created none).
func (s *fetchSession) answered(p plan, want map[TopicPartition]fetchParams, sessionID int32) {
	if !s.enabled {
		return
	}
	if p.full {
		s.sent = make(map[TopicPartition]fetchParams, len(want))
	}
	for _, tp := range p.forget {
		delete(s.sent, tp)
	}
	for _, tp := range p.send {
		s.sent[tp] = want[tp]
	}
	if sessionID == 0 {
		// The broker keeps no session (too many sessions, or it closed
		// ours): stay with full requests.
		s.lost()
		return
	}
	if p.full {
		s.id = sessionID
		s.epoch = 1
		return
	}
	if sessionID != s.id {
		// An incremental request answered for another session: the
		// broker's view is unknown; start over.
		s.reset()
		return
	}
	s.epoch++
	if s.epoch < 1 { // wrapped past MaxInt32
		s.epoch = 1
	}
}
