package metadata

import (
	"math/rand/v2"
	"time"
)

// Clock is the refresher's source of time. The default is the system
// clock; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has elapsed, and a
	// function that stops the timer (reporting whether it was stopped
	// before firing).
	Timer(d time.Duration) (<-chan time.Time, func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Opt configures a Refresher. No value of an option is refused: each
// option's doc says what its out-of-range values mean (zero or less
// disables MaxAge, Backoff and RequestTimeout; a negative Confirmations is
// 0; a nil clock or jitter keeps the default).
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	maxAge         time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	requestTimeout time.Duration
	confirmations  int
	clock          Clock
	jitter         func() float64
	tombstones     int // the most tombstones kept (see compact)
}

func defaultCfg() cfg {
	return cfg{
		maxAge:         5 * time.Minute,
		minBackoff:     100 * time.Millisecond,
		maxBackoff:     time.Second,
		requestTimeout: 10 * time.Second,
		confirmations:  5,
		clock:          systemClock{},
		jitter:         rand.Float64,
		tombstones:     maxTombstones,
	}
}

// MaxAge sets how old the cache may get before a refresh is sent without
// any trigger (default 5 minutes, as Java's metadata.max.age.ms). Zero or
// less disables periodic refreshes.
func MaxAge(d time.Duration) Opt { return opt(func(c *cfg) { c.maxAge = d }) }

// Backoff sets the spacing between round trips (defaults 100 ms and 1 s).
// After a round trip, the next one starts no sooner than lo·2^k later,
// capped at hi, with ±20% jitter, where k counts the consecutive round
// trips that failed or, asked for by a trigger, changed nothing. k resets
// when a round trip changes a leader or an epoch, or when the refresher has
// been idle for hi. With k = 0 the spacing is about lo: triggers arriving
// within it share one round trip. lo ≤ 0 disables spacing and backoff.
func Backoff(lo, hi time.Duration) Opt {
	return opt(func(c *cfg) { c.minBackoff, c.maxBackoff = lo, hi })
}

// RequestTimeout bounds one Metadata round trip (default 10 s). Zero or
// less sets no bound of the refresher's own: a round trip then ends with
// its answer, the transport's own timeouts, or Close.
func RequestTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.requestTimeout = d }) }

// Confirmations sets how many consecutive Metadata answers must report a
// lower leader epoch for a partition before it is believed, how many must
// report a topic unknown before its partitions are dropped, and how many
// must name a new topic ID that no broker was seen moving to before it is
// adopted (default 5, as franz-go). 0 means never: lower epochs are always
// rejected (Java's rule), topics are never dropped, and a new topic ID is
// adopted only once a broker that answered the cached one answers it.
// The refresher asks again by itself, spaced by the backoff, while a new
// topic ID or a topic's removal awaits its confirmations.
func Confirmations(n int) Opt {
	return opt(func(c *cfg) {
		if n < 0 {
			n = 0
		}
		c.confirmations = n
	})
}

// maxTombstones is the default bound on the tombstones a refresher keeps:
// entries of topics removed (or never answered with partitions) that no
// caller watches, each a topic ID and its partitions' epoch floors.
const maxTombstones = 4096

// tombstoneLimit sets the bound on tombstones (for tests).
func tombstoneLimit(n int) Opt { return opt(func(c *cfg) { c.tombstones = n }) }

// WithClock replaces the system clock (for tests). A nil clock keeps the
// system clock.
func WithClock(clock Clock) Opt {
	return opt(func(c *cfg) {
		if clock != nil {
			c.clock = clock
		}
	})
}

// WithJitter replaces the source of backoff jitter, a function returning a
// value in [0, 1) (for tests; default math/rand/v2.Float64). A nil f keeps
// the default.
func WithJitter(f func() float64) Opt {
	return opt(func(c *cfg) {
		if f != nil {
			c.jitter = f
		}
	})
}
