package metadata

import (
	"context"
	"sync"

	"github.com/kepoch/kepoch/errors"
)

// Subscription receives the refresher's events without polling and without
// ever blocking the refresher.
//
// Events are appended to the subscription's own queue, in the order they
// happened, and C is signalled; the refresher never waits for a reader.
// The queue is unbounded: a subscriber that stops reading only costs memory,
// one Event per leader or epoch change of the topics it follows. Read with
// Next (blocking) or with C and Events (in a select loop). Close releases
// it.
type Subscription struct {
	r      *Refresher
	topics map[string]bool // nil: every topic

	mu     sync.Mutex
	queue  []Event
	closed bool
	ch     chan struct{} // capacity 1: "events are queued"
}

// Subscribe returns a subscription to the events of the given topics, or of
// every topic when none is given. Subscribing does not watch the topics.
func (r *Refresher) Subscribe(topics ...string) *Subscription {
	s := &Subscription{r: r, ch: make(chan struct{}, 1)}
	if len(topics) > 0 {
		s.topics = make(map[string]bool, len(topics))
		for _, t := range topics {
			s.topics[t] = true
		}
	}
	r.subsMu.Lock()
	r.subs[s] = struct{}{}
	r.subsMu.Unlock()
	return s
}

// C is signalled (it has capacity 1, so signals merge) when events are
// queued. After a receive, call Events.
func (s *Subscription) C() <-chan struct{} { return s.ch }

// Events removes and returns the queued events, nil if there are none. It
// never blocks.
func (s *Subscription) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// Next waits for events and returns them all. It returns ctx's error when ctx
// ends first, and ErrClosed once the subscription or the refresher is closed
// and no events remain.
func (s *Subscription) Next(ctx context.Context) ([]Event, error) {
	if ctx == nil {
		return nil, nilContext("Subscription.Next")
	}
	for {
		s.mu.Lock()
		q, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		if len(q) > 0 {
			return q, nil
		}
		if closed {
			return nil, errors.ErrClosed
		}
		select {
		case <-s.ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.r.done:
			if q := s.Events(); len(q) > 0 {
				return q, nil
			}
			return nil, errors.ErrClosed
		}
	}
}

// Close ends the subscription: no more events are queued, and Next returns
// ErrClosed once the queue is drained. Idempotent.
func (s *Subscription) Close() {
	s.r.subsMu.Lock()
	delete(s.r.subs, s)
	s.r.subsMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *Subscription) push(events []Event) {
	s.mu.Lock()
	n := len(s.queue)
	if !s.closed {
		for _, e := range events {
			if s.topics == nil || s.topics[e.Topic] {
				s.queue = append(s.queue, e)
			}
		}
	}
	added := len(s.queue) > n
	s.mu.Unlock()
	if added {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
}

// dispatch hands events to every subscription. The caller holds r.writeMu,
// so subscribers see events in the order the state changed.
func (r *Refresher) dispatch(events []Event) {
	if len(events) == 0 {
		return
	}
	r.subsMu.Lock()
	subs := make([]*Subscription, 0, len(r.subs))
	for s := range r.subs {
		subs = append(subs, s)
	}
	r.subsMu.Unlock()
	for _, s := range subs {
		s.push(events)
	}
}
