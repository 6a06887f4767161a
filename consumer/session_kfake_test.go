package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// sessionChecker replays the Fetch requests each broker received and checks
// the client side of KIP-227: a full request opens a session, later requests
// are incremental and name only partitions whose fetch parameters changed
// (or that joined the session again after being forgotten).
type sessionChecker struct {
	t    *testing.T
	sent map[int32]map[int32]kmsg.FetchRequestTopicPartition // node → partition → last named
	full map[int32]int                                       // node → full requests
	nmd  map[int32]int                                       // partition → times named
	ids  map[int32]int32                                     // node → session its incremental requests named last
}

func newSessionChecker(t *testing.T) *sessionChecker {
	return &sessionChecker{t: t, sent: map[int32]map[int32]kmsg.FetchRequestTopicPartition{}, full: map[int32]int{}, nmd: map[int32]int{}, ids: map[int32]int32{}}
}

func same(a, b kmsg.FetchRequestTopicPartition) bool {
	return a.FetchOffset == b.FetchOffset && a.CurrentLeaderEpoch == b.CurrentLeaderEpoch &&
		a.LastFetchedEpoch == b.LastFetchedEpoch && a.PartitionMaxBytes == b.PartitionMaxBytes
}

func (s *sessionChecker) check(reqs []fetchSeen) {
	t := s.t
	t.Helper()
	for i, r := range reqs {
		if r.sessionEpoch == -1 {
			t.Fatalf("request %d to node %d is sessionless", i, r.node)
		}
		if r.sessionEpoch == 0 {
			// A full request closes the session it replaces, if
			// any (the one the node's last incremental request
			// named, or the one a failed full request closed).
			if r.sessionID != 0 && r.sessionID != s.ids[r.node] {
				t.Fatalf("request %d: full request with session id %d; node %d's session is %d", i, r.sessionID, r.node, s.ids[r.node])
			}
			s.full[r.node]++
			s.sent[r.node] = map[int32]kmsg.FetchRequestTopicPartition{}
		} else if r.sessionID == 0 {
			t.Fatalf("request %d: session epoch %d without a session id", i, r.sessionEpoch)
		} else {
			s.ids[r.node] = r.sessionID
		}
		cur := s.sent[r.node]
		if cur == nil {
			t.Fatalf("request %d: the first request to node %d is incremental (epoch %d)", i, r.node, r.sessionEpoch)
		}
		for _, p := range r.forgotten {
			if _, ok := cur[p]; !ok {
				t.Fatalf("request %d to node %d forgets partition %d, which is not in the session", i, r.node, p)
			}
			delete(cur, p)
		}
		for p, rp := range r.named {
			if prev, ok := cur[p]; ok && r.sessionEpoch > 0 && same(prev, rp) {
				t.Fatalf("request %d (node %d, epoch %d) names partition %d with unchanged parameters %+v", i, r.node, r.sessionEpoch, p, rp)
			}
			cur[p] = rp
			s.nmd[p]++
		}
	}
}

// TestFetchSessionIncremental: only the first request to each broker is
// full; every later one is incremental and names only the partitions whose
// position moved; partitions without data are named once in all; every
// record arrives once, in order. With one partition per broker, that
// partition is buffered after every answer and the broker is left with
// nothing to fetch for a while: the session must survive that too.
func TestFetchSessionIncremental(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int32
		data []int32
	}{
		{"20 partitions, data on 3", 20, []int32{0, 7, 13}},
		{"one partition per broker", 3, []int32{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.n)
			log := observeFetches(c)
			for _, p := range tc.data {
				produceRange(t, c, p, 0, 40)
			}
			cons := newConsumer(t, c)
			assignAll(t, cons, tc.n, consumer.At(0))
			recs, evs, errs := pollUntil(t, cons, 40*len(tc.data), 10*time.Second)
			// More rounds, so that incremental requests carry data too.
			grow := tc.data[1:]
			for round := int64(1); round <= 3; round++ {
				for _, p := range grow {
					produceRange(t, c, p, 40*round, 40*(round+1))
				}
				more, e, er := pollUntil(t, cons, 40*len(grow), 10*time.Second)
				recs, evs, errs = append(recs, more...), append(evs, e...), append(errs, er...)
			}
			if len(evs)+len(errs) > 0 {
				t.Fatalf("events %v errors %v", evs, errs)
			}
			from, to := map[int32]int64{}, map[int32]int64{}
			for _, p := range tc.data {
				from[p], to[p] = 0, 160
			}
			to[tc.data[0]] = 40
			checkInOrder(t, recs, from, to)

			// Let the fetch loops go round a few more times with nothing new.
			time.Sleep(200 * time.Millisecond)
			reqs := log.all()
			s := newSessionChecker(t)
			s.check(reqs)
			var incremental int
			for _, r := range reqs {
				if r.sessionEpoch > 0 {
					incremental++
				}
			}
			for node, full := range s.full {
				if full != 1 {
					t.Errorf("node %d got %d full requests; want 1 (no session error happened)", node, full)
				}
			}
			if incremental < 3*len(s.full) {
				t.Errorf("only %d incremental requests of %d", incremental, len(reqs))
			}
			for p := int32(0); p < tc.n; p++ {
				if _, ok := from[p]; ok {
					continue
				}
				if s.nmd[p] != 1 {
					t.Errorf("partition %d (no data) named in %d requests; want exactly 1", p, s.nmd[p])
				}
			}
		})
	}
}

// TestFetchSessionIDNotFoundRecovers: a broker that lost the session
// (FETCH_SESSION_ID_NOT_FOUND) gets a full request next, and nothing is
// lost or delivered twice.
func TestFetchSessionIDNotFoundRecovers(t *testing.T) {
	const n = 6
	c := newCluster(t, n)
	log := observeFetches(c)
	for p := int32(0); p < n; p++ {
		produceRange(t, c, p, 0, 30)
	}
	cons := newConsumer(t, c)
	assignAll(t, cons, n, consumer.At(0))
	recs, _, _ := pollUntil(t, cons, 30*n, 10*time.Second)

	// Fail the next two incremental requests, whichever brokers get them.
	h := c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Fetch}, TopLevel: true, Err: kerr.FetchSessionIDNotFound, Count: 2,
		When: func(kr kmsg.Request) bool { return kr.(*kmsg.FetchRequest).SessionEpoch > 0 },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	produceRange(t, c, 1, 30, 60)
	produceRange(t, c, 4, 30, 60)
	if err := h.Wait(ctx, 2); err != nil {
		t.Fatalf("the fault answered %d requests: %v", h.Hits(), err)
	}
	for p := int32(0); p < n; p++ {
		if p == 1 || p == 4 {
			produceRange(t, c, p, 60, 70)
		} else {
			produceRange(t, c, p, 30, 40)
		}
	}
	more, evs, errs := pollUntil(t, cons, 30*2+10*n, 10*time.Second)
	recs = append(recs, more...)
	if len(evs)+len(errs) > 0 {
		t.Fatalf("a session error surfaced: events %v errors %v", evs, errs)
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	for p := int32(0); p < n; p++ {
		from[p], to[p] = 0, 40
	}
	to[1], to[4] = 70, 70
	checkInOrder(t, recs, from, to)

	reqs := log.all()
	s := newSessionChecker(t)
	s.check(reqs)
	total := 0
	for _, f := range s.full {
		total += f
	}
	if total < len(s.full)+2 {
		t.Errorf("%d full requests to %d brokers after 2 session errors; want a new full request per error", total, len(s.full))
	}
	// The request right after a faulted one, to the same broker, is full.
	faulted := 0
	for i, r := range reqs {
		if r.sessionEpoch <= 0 {
			continue
		}
		for _, nx := range reqs[i+1:] {
			if nx.node != r.node {
				continue
			}
			if nx.sessionEpoch == 0 {
				faulted++
			}
			break
		}
	}
	if faulted != 2 {
		t.Errorf("%d incremental requests were followed by a full one; want the 2 faulted ones", faulted)
	}
}
