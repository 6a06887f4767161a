package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/kepoch/kepoch/errors"
)

// MaxPollInterval. Heartbeats run on the member loop's goroutines, not the
// application's, so an application stuck between Polls would otherwise
// keep its partitions (and their records unprocessed) for as long as the
// process lives. Poll marks when it is entered and left (pollBegin,
// pollEnd); the member loop, while it waits in a session, checks whether
// no Poll has run for MaxPollInterval and, if so, leaves (leaveForPoll):
//
//  1. the member's generation is dropped: every commit made or queued from
//     then on is refused when made or sent (not owned), autocommit
//     computes nothing;
//  2. it waits (a rebalance timeout at most) for the commit being sent to
//     be answered, so that no commit of the member reaches the
//     coordinator after it left;
//  3. its partitions are dropped as lost (OnLost, no commit: the records
//     Poll returned may still be being processed);
//  4. it leaves (classic LeaveGroup, KIP-848 epoch -1; a static member
//     sends no LeaveGroup, or KIP-848 epoch -2), and the next Poll is told
//     (*PollIntervalError, once);
//  5. it rejoins once a Poll begins after the leave.

// ErrMaxPollIntervalExceeded is matched by the error Poll returns (once, in
// Fetches.Errors) after the member left its group because the application
// did not call Poll for MaxPollInterval.
var ErrMaxPollIntervalExceeded = errors.New("kepoch: the member left its group: Poll was not called for MaxPollInterval")

// PollIntervalError reports that the member left its group because no Poll
// ran for MaxPollInterval. Lost names the partitions it gave up (OnLost ran
// for them; nothing was committed for them after Poll stopped). Poll
// returns it wrapped in a *GroupError (Op "poll").
type PollIntervalError struct {
	MaxPollInterval time.Duration
	// Since is how long no Poll had run when the member left.
	Since time.Duration
	Lost  []TopicPartition
}

func (e *PollIntervalError) Error() string {
	return fmt.Sprintf("kepoch: no Poll for %v (MaxPollInterval %v): the member left its group, %d partitions lost", e.Since.Round(time.Millisecond), e.MaxPollInterval, len(e.Lost))
}

// Is makes the error match ErrMaxPollIntervalExceeded.
func (e *PollIntervalError) Is(target error) bool { return target == ErrMaxPollIntervalExceeded }

// pollBegin records that Poll was entered.
func (g *group) pollBegin() {
	g.mu.Lock()
	g.polling++
	g.pollSeq++
	g.lastPoll = time.Now()
	g.mu.Unlock()
	select {
	case g.polled <- struct{}{}:
	default:
	}
}

// pollEnd records that Poll returned.
func (g *group) pollEnd() {
	g.mu.Lock()
	g.polling--
	g.lastPoll = time.Now()
	g.mu.Unlock()
}

// untilPollExpiry returns how long until MaxPollInterval passes without a
// Poll (≤ 0: it has), and how long no Poll has run. While a Poll runs it
// returns the whole interval.
func (g *group) untilPollExpiry() (left, since time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.polling > 0 {
		return g.cfg.maxPollInterval, 0
	}
	since = time.Since(g.lastPoll)
	return g.cfg.maxPollInterval - since, since
}

// pollTimer returns a timer that fires when MaxPollInterval would pass
// without a Poll.
func (g *group) pollTimer() *time.Timer {
	left, _ := g.untilPollExpiry()
	return time.NewTimer(max(left, time.Millisecond))
}

// pollExpired reports, when t fired, whether MaxPollInterval passed
// without a Poll; if not, it resets t for the new expiry.
func (g *group) pollExpired(t *time.Timer) (bool, time.Duration) {
	left, since := g.untilPollExpiry()
	if left <= 0 {
		return true, since
	}
	t.Reset(left)
	return false, 0
}

// errPollExpired ends a classic session whose member must leave for
// MaxPollInterval.
var errPollExpired = errors.New("kepoch: no Poll for MaxPollInterval")

// leaveForPoll leaves the group because no Poll ran for MaxPollInterval
// (since: how long), with leave sending the protocol's leave (nothing for
// a classic static member), then waits for the next Poll. It reports
// whether the member loop should go on (false: the consumer closes).
func (g *group) leaveForPoll(since time.Duration, leave func(context.Context)) bool {
	ctx := g.ctx
	g.mu.Lock()
	g.generation = -1
	g.mu.Unlock()
	// The commit being sent (and any queued, refused now) is answered
	// before the leave: none lands after it.
	bctx, cancel := context.WithTimeout(ctx, g.cfg.rebalanceTimeout)
	_ = g.commitWaitFor(bctx, func() map[TopicPartition]OffsetAndMetadata { return nil })
	cancel()
	owned := g.ownedSet()
	lost := owned.sorted()
	g.revokeParts(g.life(), owned, false, true)
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	leave(lctx)
	lcancel()
	g.mu.Lock()
	seq := g.pollSeq
	g.mu.Unlock()
	g.surface("poll", &PollIntervalError{MaxPollInterval: g.cfg.maxPollInterval, Since: since, Lost: lost})
	for {
		g.mu.Lock()
		polled := g.pollSeq != seq || g.polling > 0
		g.mu.Unlock()
		if polled {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-g.polled:
		}
	}
}
