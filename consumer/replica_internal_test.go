package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/seek"
)

// TestReadReplicaStands: a read replica directs a partition's fetches only
// for the leader and epoch that named it, before it expires, and while
// metadata lists the broker.
func TestReadReplicaStands(t *testing.T) {
	now := time.Unix(1000, 0)
	r := readReplica{id: 2, leader: 1, epoch: 5, until: now.Add(time.Minute)}
	for _, tc := range []struct {
		name          string
		r             readReplica
		leader, epoch int32
		now           time.Time
		usable        bool
		want          bool
	}{
		{"as named", r, 1, 5, now, true, true},
		{"none named", noReplica, 1, 5, now, true, false},
		{"expired", r, 1, 5, now.Add(time.Minute), true, false},
		{"just before expiry", r, 1, 5, now.Add(time.Minute - time.Nanosecond), true, true},
		{"no expiry (max age ≤ 0)", readReplica{id: 2, leader: 1, epoch: 5}, 1, 5, now.Add(1000 * time.Hour), true, true},
		{"new leader", r, 3, 6, now, true, false},
		{"same leader, new epoch", r, 1, 6, now, true, false},
		{"leader unknown", r, seek.NoBroker, 5, now, true, false},
		{"replica left metadata (or offline)", r, 1, 5, now, false, false},
		{"leader without epochs", readReplica{id: 2, leader: 1, epoch: seek.NoEpoch}, 1, seek.NoEpoch, now, true, true},
	} {
		if got := tc.r.stands(tc.leader, tc.epoch, tc.now, tc.usable); got != tc.want {
			t.Errorf("%s: stands = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAfterReply: what each answer does to the read replica and how it is
// stepped into the machine.
func TestAfterReply(t *testing.T) {
	now := time.Unix(1000, 0)
	const age = 5 * time.Minute
	cur := readReplica{id: 2, leader: 1, epoch: 5, until: now.Add(-time.Second).Add(age)}
	named := readReplica{id: 2, leader: 1, epoch: 5, until: now.Add(age)}
	leader := func(a fetchReply) fetchReply { a.from, a.leader, a.epoch = 1, 1, 5; return a }
	replica := func(a fetchReply) fetchReply { a.from, a.leader, a.epoch = 2, 1, 5; return a }
	for _, tc := range []struct {
		name   string
		r      readReplica
		a      fetchReply
		maxAge time.Duration
		want   readReplica
		step   replicaStep
	}{
		// The leader's answers.
		{"leader names a known replica", noReplica, leader(fetchReply{named: 2, namedUsable: true}), age, named, stepAsIs},
		{"leader names a known replica, with records", noReplica, leader(fetchReply{named: 2, namedUsable: true, records: true}), age, named, stepAsIs},
		{"leader names one again: expiry restarts", cur, leader(fetchReply{named: 2, namedUsable: true}), age, named, stepAsIs},
		{"no max age: never expires", noReplica, leader(fetchReply{named: 2, namedUsable: true}), 0,
			readReplica{id: 2, leader: 1, epoch: 5}, stepAsIs},
		{"leader names none", cur, leader(fetchReply{named: seek.NoBroker}), age, noReplica, stepAsIs},
		{"leader names itself", noReplica, leader(fetchReply{named: 1, namedUsable: true}), age, noReplica, stepAsIs},
		{"leader names an unknown broker, no records", noReplica, leader(fetchReply{named: 9}), age, noReplica, stepUnusable},
		{"leader names an unknown broker, with records", noReplica, leader(fetchReply{named: 9, records: true}), age, noReplica, stepAsIs},
		{"leader error: its name is ignored", noReplica, leader(fetchReply{code: seek.CodeNotLeaderOrFollower, named: 2, namedUsable: true}), age, noReplica, stepAsIs},
		{"leader out of range: classified as ever", noReplica, leader(fetchReply{code: seek.CodeOffsetOutOfRange, named: seek.NoBroker}), age, noReplica, stepAsIs},
		{"leader DivergingEpoch: its name is ignored", noReplica, leader(fetchReply{diverging: true, named: 2, namedUsable: true}), age, noReplica, stepAsIs},
		{"unknown leader", noReplica, fetchReply{from: seek.NoBroker, leader: seek.NoBroker, named: 2, namedUsable: true}, age, noReplica, stepAsIs},

		// The replica's answers.
		{"replica records", cur, replica(fetchReply{records: true, named: seek.NoBroker}), age, cur, stepAsIs},
		{"replica nothing new (past its high watermark)", cur, replica(fetchReply{named: seek.NoBroker}), age, cur, stepAsIs},
		{"replica DivergingEpoch: judged like the leader's", cur, replica(fetchReply{diverging: true, named: seek.NoBroker}), age, cur, stepAsIs},
		{"replica names another: ignored", cur, replica(fetchReply{named: 3, namedUsable: true}), age, cur, stepAsIs},
		{"replica names the leader: ignored", cur, replica(fetchReply{named: 1, namedUsable: true}), age, cur, stepAsIs},
		{"replica out of range: refetch from the leader", cur, replica(fetchReply{code: seek.CodeOffsetOutOfRange, named: seek.NoBroker}), age, noReplica, stepRefetch},
		{"replica not leader or follower", cur, replica(fetchReply{code: seek.CodeNotLeaderOrFollower}), age, noReplica, stepAsIs},
		{"replica not available", cur, replica(fetchReply{code: seek.CodeReplicaNotAvailable}), age, noReplica, stepAsIs},
		{"replica fenced epoch", cur, replica(fetchReply{code: seek.CodeFencedLeaderEpoch}), age, noReplica, stepAsIs},
		{"replica unknown epoch", cur, replica(fetchReply{code: seek.CodeUnknownLeaderEpoch}), age, noReplica, stepAsIs},
		{"replica offset not available", cur, replica(fetchReply{code: seek.CodeOffsetNotAvailable}), age, noReplica, stepAsIs},
		{"replica storage error", cur, replica(fetchReply{code: seek.CodeKafkaStorageError}), age, noReplica, stepAsIs},
		{"replica transport error", cur, replica(fetchReply{code: seek.CodeNetworkException}), age, noReplica, stepAsIs},
		{"replica timeout", cur, replica(fetchReply{code: seek.CodeRequestTimedOut}), age, noReplica, stepAsIs},
	} {
		got, step := afterReply(tc.r, tc.a, now, tc.maxAge)
		if got != tc.want || step != tc.step {
			t.Errorf("%s: afterReply = %+v, %d; want %+v, %d", tc.name, got, step, tc.want, tc.step)
		}
	}
}

// TestAfterUnusable: a run of leader answers naming an unusable read
// replica, or of errors from the replica the leader named, is reported
// once, at the first answer extending it at least the bound after the
// run's first; the leader's own errors and its redirects to a usable
// replica neither end nor extend it; any other answer without error (the
// partition read) ends it, and a later run is reported again.
func TestAfterUnusable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const bound = 10 * time.Second
	type ans struct {
		at     time.Duration // after t0
		a      fetchReply
		report bool // the answer reports the run
	}
	at := func(d time.Duration, a fetchReply, report bool) ans { return ans{d, a, report} }
	leader := func(a fetchReply) fetchReply { a.from, a.leader, a.epoch = 1, 1, 5; return a }
	replica := func(a fetchReply) fetchReply { a.from, a.leader, a.epoch = 2, 1, 5; return a }
	unknown := leader(fetchReply{named: 9})
	unknown8 := leader(fetchReply{named: 8})
	none := leader(fetchReply{named: seek.NoBroker})
	known := leader(fetchReply{named: 2, namedUsable: true})
	for _, tc := range []struct {
		name  string
		bound time.Duration
		seq   []ans
		// want is the run the sequence leaves (since as an offset from
		// t0, -1: none).
		since    time.Duration
		replica  int32
		reported bool
	}{
		{"one redirect: a run, not yet reported", bound, []ans{at(0, unknown, false)}, 0, 9, false},
		{"reported at the first redirect past the bound, once", bound, []ans{
			at(0, unknown, false), at(5*time.Second, unknown, false), at(bound-time.Nanosecond, unknown, false),
			at(bound, unknown, true), at(bound+time.Second, unknown, false), at(time.Hour, unknown, false)}, 0, 9, true},
		{"bound 0: reported at the first redirect", 0, []ans{at(0, unknown, true), at(time.Second, unknown, false)}, 0, 9, true},
		{"another unusable replica: the same run, naming the last", bound, []ans{
			at(0, unknown, false), at(6*time.Second, unknown8, false), at(11*time.Second, unknown8, true)}, 0, 8, true},
		{"records end the run", bound, []ans{at(0, unknown, false), at(9*time.Second, leader(fetchReply{named: 9, records: true}), false),
			at(11*time.Second, unknown, false)}, 11 * time.Second, 9, false},
		{"the leader names none: the run ends", bound, []ans{at(0, unknown, false), at(9*time.Second, none, false),
			at(11*time.Second, unknown, false)}, 11 * time.Second, 9, false},
		{"the leader names a known replica: the run goes on", bound, []ans{at(0, unknown, false), at(9*time.Second, known, false),
			at(11*time.Second, unknown, true)}, 0, 9, true},
		{"a known replica's redirect alone starts no run", bound, []ans{at(0, known, false)}, -1, 0, false},
		{"the known replica's records end the run", bound, []ans{at(0, unknown, false), at(9*time.Second, known, false),
			at(9*time.Second, replica(fetchReply{records: true, named: seek.NoBroker}), false)}, -1, 0, false},
		{"the replica's answer: read", bound, []ans{at(0, unknown, false), at(9*time.Second, replica(fetchReply{named: seek.NoBroker}), false)}, -1, 0, false},
		{"a DivergingEpoch: read", bound, []ans{at(0, unknown, false), at(9*time.Second, leader(fetchReply{diverging: true, named: 9}), false)}, -1, 0, false},
		{"the leader's errors neither end nor extend the run", bound, []ans{
			at(0, unknown, false), at(3*time.Second, leader(fetchReply{code: seek.CodeNotLeaderOrFollower, named: seek.NoBroker}), false),
			at(6*time.Second, leader(fetchReply{code: seek.CodeNetworkException, named: seek.NoBroker}), false),
			at(12*time.Second, leader(fetchReply{code: seek.CodeOffsetOutOfRange, named: seek.NoBroker}), false),
			at(13*time.Second, unknown, true)}, 0, 9, true},
		{"a leader's error alone starts no run", bound, []ans{at(0, leader(fetchReply{code: seek.CodeReplicaNotAvailable, named: seek.NoBroker}), false)}, -1, 0, false},
		{"the replica failing, redirected to again: one run, reported", bound, []ans{
			at(0, known, false), at(0, replica(fetchReply{code: seek.CodeNetworkException, named: seek.NoBroker}), false),
			at(5*time.Second, known, false), at(5*time.Second, replica(fetchReply{code: seek.CodeNotLeaderOrFollower, named: seek.NoBroker}), false),
			at(bound, known, false), at(bound, replica(fetchReply{code: seek.CodeNetworkException, named: seek.NoBroker}), true),
			at(bound+time.Second, known, false), at(bound+time.Second, replica(fetchReply{code: seek.CodeOffsetOutOfRange, named: seek.NoBroker}), false),
		}, 0, 2, true},
		{"the replica failing, then an unusable one named: one run", bound, []ans{
			at(0, replica(fetchReply{code: seek.CodeNetworkException, named: seek.NoBroker}), false), at(bound, unknown, true)}, 0, 9, true},
		{"reported, read, redirected again: a new run, reported again", bound, []ans{
			at(0, unknown, false), at(bound, unknown, true), at(bound+time.Second, none, false),
			at(20*time.Second, unknown, false), at(29*time.Second, unknown, false), at(30*time.Second, unknown, true),
			at(31*time.Second, unknown, false)}, 20 * time.Second, 9, true},
	} {
		var u unusableRun
		for i, x := range tc.seq {
			_, step := afterReply(noReplica, x.a, t0.Add(x.at), time.Minute)
			var report bool
			u, report = afterUnusable(u, x.a, step, t0.Add(x.at), tc.bound)
			if report != x.report {
				t.Errorf("%s: answer %d (%+v at %v): report = %v, want %v", tc.name, i, x.a, x.at, report, x.report)
			}
		}
		want := unusableRun{}
		if tc.since >= 0 {
			want = unusableRun{since: t0.Add(tc.since), replica: tc.replica, leader: 1, reported: tc.reported}
			if last := tc.seq[len(tc.seq)-1].a; last.from != last.leader {
				want.failed = last.code
			}
		}
		if u != want {
			t.Errorf("%s: run = %+v, want %+v", tc.name, u, want)
		}
	}
}

// TestStaleAnswerLeavesReadReplica: an answer to a fetch the partition no
// longer awaits (it moved on meanwhile) changes nothing about where the
// partition is read from: a replica's stale error does not drop the
// replica, a leader's stale redirect does not set one; the awaited answer
// does.
func TestStaleAnswerLeavesReadReplica(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := New(SeedBrokers(c.ListenAddrs()...), FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	if err := cons.Assign(Assignment{Topic: "t", Partition: 0, Start: At(0)}); err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	var p *part
	for {
		cons.mu.Lock()
		p = cons.parts[tp]
		if p.flying != nil && p.fetch != nil {
			break // the mutex stays held: the fetch is in flight (an empty log: a long poll)
		}
		cons.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("no fetch in flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer cons.mu.Unlock()
	leader := p.fetch.Leader
	other := (leader + 1) % 3
	cur := inflight{p: p, req: p.fetch.Req, leader: leader, epoch: p.fetch.CurrentLeaderEpoch}
	stale := cur
	stale.req--
	named := readReplica{id: other, leader: leader, epoch: cur.epoch, until: time.Now().Add(time.Hour)}

	p.replica = named
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.ErrorCode = kerr.NotLeaderForPartition.Code
	(&fetcher{c: cons, id: other}).answerLocked(stale, &rp, 16, nil)
	if p.replica != named {
		t.Fatalf("a stale error from the replica changed it to %+v", p.replica)
	}

	p.replica = noReplica
	rp = kmsg.NewFetchResponseTopicPartition()
	rp.PreferredReadReplica = other
	(&fetcher{c: cons, id: leader}).answerLocked(stale, &rp, 16, nil)
	if p.replica != noReplica {
		t.Fatalf("a stale redirect set the replica %+v", p.replica)
	}
	// Below Fetch v11 the field does not exist, whatever it holds.
	(&fetcher{c: cons, id: leader}).answerLocked(cur, &rp, 10, nil)
	if p.replica != noReplica {
		t.Fatalf("a v10 answer set the replica %+v", p.replica)
	}
	if p.fetch == nil {
		t.Fatal("no fetch after the v10 answer")
	}
	cur = inflight{p: p, req: p.fetch.Req, leader: leader, epoch: p.fetch.CurrentLeaderEpoch}
	(&fetcher{c: cons, id: leader}).answerLocked(cur, &rp, 16, nil)
	if p.replica.id != other || p.replica.leader != leader {
		t.Fatalf("the awaited redirect left the replica %+v", p.replica)
	}
	if p.fetch == nil || cons.routeLocked(p, time.Now()) != other {
		t.Fatalf("the next fetch %+v does not go to the replica %d", p.fetch, other)
	}
}
