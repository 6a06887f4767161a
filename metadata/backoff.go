package metadata

import "time"

// backoff is the minimum delay between the end of one round trip and the
// start of the next, after streak consecutive round trips that failed or,
// triggered, changed nothing: lo·2^streak, capped at hi, then scaled by a
// jitter factor in [0.8, 1.2) drawn from r in [0, 1), and never above hi.
// streak 0 gives about lo: the window in which concurrent triggers coalesce.
func backoff(streak int, lo, hi time.Duration, r float64) time.Duration {
	if lo <= 0 {
		return 0
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 0; i < streak && d < hi; i++ {
		d *= 2
	}
	if d > hi {
		d = hi
	}
	if r < 0 {
		r = 0
	} else if r >= 1 {
		r = 0.999999
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*r))
	if d > hi {
		d = hi
	}
	return d
}
