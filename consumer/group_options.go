package consumer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kepoch/kepoch/seek"
)

// GroupProtocol selects how a consumer group is managed.
type GroupProtocol uint8

const (
	// ProtocolClassic is the classic group protocol (JoinGroup, SyncGroup,
	// Heartbeat, LeaveGroup), with client-side assignment by the group
	// leader. Every Kafka version supports it.
	ProtocolClassic GroupProtocol = iota + 1
	// ProtocolConsumer is KIP-848's consumer group protocol
	// (ConsumerGroupHeartbeat), with server-side assignment and
	// incremental reconciliation; Kafka 4.0+.
	ProtocolConsumer
)

func (p GroupProtocol) String() string {
	switch p {
	case ProtocolClassic:
		return "classic"
	case ProtocolConsumer:
		return "consumer"
	}
	return fmt.Sprintf("GroupProtocol(%d)", uint8(p))
}

// groupCfg is the configuration of group membership and commits.
type groupCfg struct {
	id                 string
	instanceID         *string
	protocol           GroupProtocol
	assignors          []string
	serverAssignor     string
	sessionTimeout     time.Duration
	rebalanceTimeout   time.Duration
	heartbeatInterval  time.Duration
	autoCommit         bool
	autoCommitInterval time.Duration
	maxPollInterval    time.Duration
	noCommitStart      Start
	leaveOnClose       bool
	onAssigned         func(context.Context, []TopicPartition)
	onRevoked          func(context.Context, []TopicPartition)
	onLost             func(context.Context, []TopicPartition)
	onEpochless        func(TopicPartition, OffsetAndMetadata)
	refuseEpochless    bool
}

func defaultGroupCfg() groupCfg {
	return groupCfg{
		protocol:           ProtocolClassic,
		assignors:          []string{CooperativeStickyAssignor},
		sessionTimeout:     45 * time.Second,
		rebalanceTimeout:   60 * time.Second,
		heartbeatInterval:  3 * time.Second,
		autoCommit:         true,
		autoCommitInterval: 5 * time.Second,
		maxPollInterval:    5 * time.Minute,
		noCommitStart:      Earliest(),
		leaveOnClose:       true,
	}
}

func (g *groupCfg) validate() error {
	if g.id == "" {
		if g.instanceID != nil {
			return invalidOption("GroupInstanceID", fmt.Sprintf("%q given without Group", *g.instanceID))
		}
		return nil
	}
	switch {
	case !validGroupString(g.id):
		return invalidOption("Group", fmt.Sprintf("an id of %d bytes is longer than %d", len(g.id), math.MaxInt16))
	case g.instanceID != nil && *g.instanceID == "":
		return invalidOption("GroupInstanceID", `"" is empty`)
	case g.instanceID != nil && !validGroupString(*g.instanceID):
		return invalidOption("GroupInstanceID", fmt.Sprintf("an id of %d bytes is longer than %d", len(*g.instanceID), math.MaxInt16))
	case g.protocol != ProtocolClassic && g.protocol != ProtocolConsumer:
		return invalidOption("WithGroupProtocol", fmt.Sprintf("%d is not a protocol", g.protocol))
	case len(g.assignors) == 0:
		return invalidOption("Assignors", "none given")
	case g.sessionTimeout < time.Second:
		return invalidOption("SessionTimeout", fmt.Sprintf("%v is less than 1s", g.sessionTimeout))
	case g.rebalanceTimeout < time.Second:
		return invalidOption("RebalanceTimeout", fmt.Sprintf("%v is less than 1s", g.rebalanceTimeout))
	case g.heartbeatInterval < 10*time.Millisecond || g.heartbeatInterval >= g.sessionTimeout:
		return invalidOption("HeartbeatInterval", fmt.Sprintf("%v is not in [10ms, SessionTimeout %v)", g.heartbeatInterval, g.sessionTimeout))
	case g.autoCommit && g.autoCommitInterval < 10*time.Millisecond:
		return invalidOption("AutoCommitInterval", fmt.Sprintf("%v is less than 10ms", g.autoCommitInterval))
	case g.maxPollInterval <= 0:
		return invalidOption("MaxPollInterval", fmt.Sprintf("%v is not positive", g.maxPollInterval))
	}
	seen := map[string]bool{}
	for _, n := range g.assignors {
		if _, ok := assignorByName(n); !ok {
			return invalidOption("Assignors", fmt.Sprintf("%q is not an assignor (use %q, %q or %q)", n, RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor))
		}
		if seen[n] {
			return invalidOption("Assignors", fmt.Sprintf("%q is listed twice", n))
		}
		seen[n] = true
	}
	if problem := startProblem(g.noCommitStart); problem != "" {
		return invalidOption("NoCommitStart", problem)
	}
	if g.noCommitStart.Kind == seek.StartNearest {
		return invalidOption("NoCommitStart", fmt.Sprintf("%v is a NearestTo, which needs a stored position", g.noCommitStart))
	}
	return nil
}

// Group makes the consumer a member of consumer group id: Subscribe then
// lets the group assign partitions, and commits (CommitSync, CommitAsync,
// autocommit) store positions with their leader epochs in the group.
// Without Subscribe, partitions are assigned by hand (Assign) and commits
// are stored under the group id as a standalone consumer's (generation -1).
func Group(id string) Opt { return optFunc(func(c *cfg) { c.group.id = id }) }

// GroupInstanceID makes the member static (KIP-345): a restart within the
// session timeout keeps its assignment without a rebalance. A static member
// does not leave the group on Close (its session expires instead) unless
// LeaveGroupOnClose(true) is given.
func GroupInstanceID(id string) Opt {
	return optFunc(func(c *cfg) {
		c.group.instanceID = &id
		c.group.leaveOnClose = false
	})
}

// LeaveGroupOnClose sets whether Close leaves the group at once (triggering
// a rebalance) rather than letting the session expire. Default true for
// dynamic members, false for static ones.
func LeaveGroupOnClose(leave bool) Opt { return optFunc(func(c *cfg) { c.group.leaveOnClose = leave }) }

// WithGroupProtocol selects the group protocol: ProtocolClassic (default) or
// ProtocolConsumer (KIP-848, Kafka 4.0+).
func WithGroupProtocol(p GroupProtocol) Opt { return optFunc(func(c *cfg) { c.group.protocol = p }) }

// Assignors lists the classic-protocol assignors this member supports, most
// preferred first (default cooperative-sticky). The coordinator picks one
// every member supports. As in the Java client, the member rebalances
// cooperatively only if every listed assignor is cooperative; listing an
// eager one (range, roundrobin) makes it revoke everything before each
// rebalance.
func Assignors(names ...string) Opt {
	return optFunc(func(c *cfg) { c.group.assignors = append([]string(nil), names...) })
}

// ServerAssignor names the server-side assignor for ProtocolConsumer
// ("uniform" or "range" on Apache Kafka); empty, the default, lets the
// broker choose.
func ServerAssignor(name string) Opt { return optFunc(func(c *cfg) { c.group.serverAssignor = name }) }

// SessionTimeout is how long the coordinator waits for a heartbeat before
// it evicts the member (classic protocol; default 45s).
func SessionTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.group.sessionTimeout = d }) }

// RebalanceTimeout is how long the coordinator waits for every member to
// rejoin during a rebalance, which bounds the revoke callback (default 60s).
func RebalanceTimeout(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.group.rebalanceTimeout = d })
}

// HeartbeatInterval is the interval between heartbeats (classic protocol;
// default 3s; the KIP-848 coordinator sets its own).
func HeartbeatInterval(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.group.heartbeatInterval = d })
}

// AutoCommitInterval sets the autocommit interval (default 5s).
func AutoCommitInterval(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.group.autoCommitInterval = d })
}

// MaxPollInterval is the longest the application may go without calling
// Poll while subscribed (default 5m, as Java's max.poll.interval.ms; 0 or
// less is refused). Heartbeats run on their own goroutine, so without it
// an application stuck between Polls would keep its partitions forever.
// Past it, the member leaves the group so that its partitions go to other
// members: nothing more is committed for them (not even what Poll
// returned, which the application may still be processing; commits
// queued are refused), they are dropped as lost (OnLost, not OnRevoked),
// and the member leaves (LeaveGroup, or a KIP-848 heartbeat with member
// epoch -1; a static member sends no LeaveGroup, its session expires, and
// a KIP-848 static member sends epoch -2). The next Poll rejoins and
// returns, once, a *GroupError (Op "poll") wrapping a *PollIntervalError,
// which matches ErrMaxPollIntervalExceeded. Time inside Poll (waiting for
// records, or for a rebalance's callbacks) does not count. OnLost runs
// before the leave is sent.
func MaxPollInterval(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.group.maxPollInterval = d })
}

// DisableAutoCommit turns autocommit off: positions are committed only by
// CommitSync and CommitAsync.
func DisableAutoCommit() Opt { return optFunc(func(c *cfg) { c.group.autoCommit = false }) }

// NoCommitStart is where a partition the group assigns starts when the
// group has no committed offset for it (default Earliest).
func NoCommitStart(s Start) Opt { return optFunc(func(c *cfg) { c.group.noCommitStart = s }) }

// OnAssigned is called with the partitions the group assigned to this
// member, after their start positions were read from the group's commits
// and before Poll returns any of their records; it may seek them.
// OnRevoked is called with partitions the member must give up, after
// autocommit committed them and before they are dropped: once it is called,
// Poll never returns another record of them (a hard boundary), and it may
// commit them. OnLost is called with partitions the member lost without a
// chance to commit (its generation was fenced, its session expired, or it
// left the group because Poll was not called for MaxPollInterval).
//
// The three callbacks run one at a time on the group's goroutine, never
// concurrently with each other, and Poll blocks while one runs. They may
// call Position, SeekTo, Pause, Resume, CommitSync and CommitAsync, but
// must not call Poll or Close. ctx ends when the consumer closes: once
// Close is done, or gave up waiting for the group (its own ctx ended). A
// rebalance under way when Close begins completes, its commits included.
func OnAssigned(fn func(ctx context.Context, assigned []TopicPartition)) Opt {
	return optFunc(func(c *cfg) { c.group.onAssigned = fn })
}

// OnRevoked sets the revoke callback; see OnAssigned.
func OnRevoked(fn func(ctx context.Context, revoked []TopicPartition)) Opt {
	return optFunc(func(c *cfg) { c.group.onRevoked = fn })
}

// OnLost sets the lost-partitions callback; see OnAssigned.
func OnLost(fn func(ctx context.Context, lost []TopicPartition)) Opt {
	return optFunc(func(c *cfg) { c.group.onLost = fn })
}

// OnCommitWithoutEpoch is called for every offset committed without a
// leader epoch (LeaderEpoch -1): such a commit cannot be validated when a
// consumer restarts from it, so a truncation that happens meanwhile goes
// unnoticed (KAFKA-20507). It runs on the committing goroutine and must not
// block.
func OnCommitWithoutEpoch(fn func(TopicPartition, OffsetAndMetadata)) Opt {
	return optFunc(func(c *cfg) { c.group.onEpochless = fn })
}

// RefuseCommitsWithoutEpoch makes commits of offsets without a leader
// epoch fail with ErrCommitWithoutEpoch (autocommit skips them) instead of
// storing them.
func RefuseCommitsWithoutEpoch() Opt { return optFunc(func(c *cfg) { c.group.refuseEpochless = true }) }
