package consumer_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/seek"
)

// Commits racing a revocation, an autocommit or Close: each test makes one
// interleaving happen deterministically and checks what the group stores.

// blockCommits stops the consumer's commit goroutine until the returned
// function is called, as a slow answer to an earlier commit would: a
// CommitAsync of nothing whose done callback (which runs on that
// goroutine) waits. Holding an OffsetCommit in kfake would hold the
// coordinator connection too, which heartbeats and offset fetches share.
func blockCommits(t *testing.T, cons *consumer.Consumer) (release func()) {
	t.Helper()
	entered, wait := make(chan struct{}), make(chan struct{})
	cons.CommitAsync(map[consumer.TopicPartition]consumer.OffsetAndMetadata{}, func(map[consumer.TopicPartition]consumer.OffsetAndMetadata, error) {
		close(entered)
		<-wait
	})
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the commit goroutine never reached the blocking commit")
	}
	var once sync.Once
	release = func() { once.Do(func() { close(wait) }) }
	t.Cleanup(release) // before the consumer's Close
	return release
}

// commitsOf reports the partitions of topic (by name or ID) an OffsetCommit
// names, with their offsets.
func commitsOf(req *kmsg.OffsetCommitRequest, topic string, id [16]byte) map[int32]int64 {
	out := map[int32]int64{}
	for _, rt := range req.Topics {
		if rt.Topic != topic && rt.TopicID != id {
			continue
		}
		for _, rp := range rt.Partitions {
			out[rp.Partition] = rp.Offset
		}
	}
	return out
}

// refuseCommit answers an OffsetCommit with code for every partition.
func refuseCommit(req *kmsg.OffsetCommitRequest, code int16) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// committedOf reads the group's committed offsets of tps with a consumer of
// its own.
func committedOf(t *testing.T, c *kfake.Cluster, group string, tps ...consumer.TopicPartition) map[consumer.TopicPartition]consumer.OffsetAndMetadata {
	t.Helper()
	return committedBy(t, newConsumer(t, c, consumer.Group(group), consumer.DisableAutoCommit()), tps...)
}

// committedBy reads the committed offsets of tps in check's group (none for
// a group never committed to: kfake answers GROUP_ID_NOT_FOUND where Kafka
// answers offset -1).
func committedBy(t *testing.T, check *consumer.Consumer, tps ...consumer.TopicPartition) map[consumer.TopicPartition]consumer.OffsetAndMetadata {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := check.Committed(ctx, tps...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// closeKeepingRevoke runs a member that consumed offsets [0, 10) of t[0] and
// t[1] and polled again (so both are committable at 10), starts a
// revocation of both whose commit waits behind an earlier one, and closes
// the member while it waits. refuse, if not 0, is the code the coordinator
// answers commits of t with. It returns what Close returned.
func closeKeepingRevoke(t *testing.T, group string, refuse int16, opts ...consumer.Opt) (*kfake.Cluster, error) {
	t.Helper()
	c := newClusterWith(t, 2, kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	createTopic(t, c, "u", 1)
	for p := int32(0); p < 2; p++ {
		produceRange(t, c, p, 0, 10)
	}
	if refuse != 0 {
		id := c.TopicInfo(topic).TopicID
		c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			req := kr.(*kmsg.OffsetCommitRequest)
			if len(commitsOf(req, topic, id)) == 0 {
				return nil, nil, false
			}
			return refuseCommit(req, refuse), nil, true
		})
	}
	seq := 0
	m := startMember(t, c, "m", group, &seq, append([]consumer.Opt{consumer.AutoCommitInterval(time.Hour)}, opts...)...)
	waitFor(t, 10*time.Second, "20 records", func() bool { r, _ := m.got(); return len(r) == 20 })
	t0, t1 := consumer.TopicPartition{Topic: topic, Partition: 0}, consumer.TopicPartition{Topic: topic, Partition: 1}
	waitFor(t, 5*time.Second, "the next Poll begun", func() bool {
		p0, _ := consumer.Committable(m.cons, t0)
		p1, _ := consumer.Committable(m.cons, t1)
		return p0.Offset == 10 && p1.Offset == 10
	})
	release := blockCommits(t, m.cons)
	// The application moves to topic u: t's partitions are revoked, and
	// their commit waits in the queue.
	if err := m.cons.Subscribe("u"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the revoke commit queued", func() bool { return consumer.QueuedCommits(m.cons) == 1 })
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- m.cons.Close(ctx)
	}()
	waitFor(t, 5*time.Second, "Close begun", func() bool { return consumer.GroupClosing(m.cons) })
	release()
	return c, <-closed
}

// TestCloseKeepsRevokeCommit: Close during a rebalance must not cancel the
// commit of the partitions being revoked: the member consumed them up to
// 10, and the next owner must start there, not re-read what was processed.
// Under every rebalance protocol: cooperative (classic), eager (classic),
// KIP-848.
func TestCloseKeepsRevokeCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []consumer.Opt
	}{
		{"cooperative", nil},
		{"eager", []consumer.Opt{consumer.Assignors(consumer.RangeAssignor)}},
		{"consumer", []consumer.Opt{consumer.WithGroupProtocol(consumer.ProtocolConsumer)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := "close-revoke-" + tc.name
			c, err := closeKeepingRevoke(t, group, 0, tc.opts...)
			if err != nil {
				t.Fatalf("close: %v", err)
			}
			t0, t1 := consumer.TopicPartition{Topic: topic, Partition: 0}, consumer.TopicPartition{Topic: topic, Partition: 1}
			got := committedOf(t, c, group, t0, t1)
			for _, tp := range []consumer.TopicPartition{t0, t1} {
				if om, ok := got[tp]; !ok || om.Offset != 10 || om.LeaderEpoch != 0 {
					t.Errorf("%v committed %+v (present %v) after Close during its revocation; want 10@0 (the next owner re-reads what was processed)", tp, om, ok)
				}
			}
		})
	}
}

// TestQueuedCommitNotUndone: the application commits what it processed
// (CommitAsync of Consumed, 10); while the coordinator has not answered,
// an autocommit or the commit of a revocation of the same partition, made
// from the position of the latest Poll (below 10), must not be stored
// after it: the next owner would re-read records already processed. The
// revocation is eager: it commits in the generation the application's
// commit was made in, before the member rejoins, so both are accepted.
func TestQueuedCommitNotUndone(t *testing.T) {
	for _, via := range []string{"autocommit", "revoke"} {
		t.Run(via, func(t *testing.T) {
			c := newCluster(t, 1)
			createTopic(t, c, "u", 1)
			produceRange(t, c, 0, 0, 10)
			id := c.TopicInfo(topic).TopicID
			// The coordinator holds the application's commit (offset 10
			// of t[0]) until released; until then it refuses the other
			// commits of t[0] (an autocommit stored before the
			// application's commit leaves nothing to race).
			arrived, release := make(chan struct{}), make(chan struct{})
			var released atomic.Bool
			var once sync.Once
			c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := kr.(*kmsg.OffsetCommitRequest)
				off, ok := commitsOf(req, topic, id)[0]
				switch {
				case !ok || released.Load():
				case off == 10:
					once.Do(func() {
						close(arrived)
						c.SleepControl(func() { <-release; released.Store(true) })
					})
				default:
					return refuseCommit(req, kerr.RebalanceInProgress.Code), nil, true
				}
				return nil, nil, false
			})
			interval := time.Hour
			if via == "autocommit" {
				interval = 20 * time.Millisecond
			}
			revoked := make(chan struct{})
			var revokedOnce sync.Once
			onRevoked := consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
				if slices.Contains(tps, consumer.TopicPartition{Topic: topic, Partition: 0}) {
					revokedOnce.Do(func() { close(revoked) })
				}
			})
			group := "undo-" + via
			cons := newConsumer(t, c, append(groupOpts(group), consumer.AutoCommitInterval(interval), onRevoked,
				consumer.Assignors(consumer.RangeAssignor))...)
			if err := cons.Subscribe(topic, "u"); err != nil {
				t.Fatal(err)
			}
			// The latest Poll returns the last of the 10 records.
			if recs, _, _ := pollUntil(t, cons, 10, 10*time.Second); len(recs) != 10 {
				t.Fatalf("%d records", len(recs))
			}
			tp := consumer.TopicPartition{Topic: topic, Partition: 0}
			done := make(chan error, 1)
			cons.CommitAsync(nil, func(_ map[consumer.TopicPartition]consumer.OffsetAndMetadata, err error) { done <- err })
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the application's commit never reached the coordinator")
			}
			if via == "revoke" {
				if err := cons.Subscribe("u"); err != nil {
					t.Fatal(err)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); consumer.QueuedCommits(cons) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no commit queued behind the application's: %s", consumer.DebugGroup(cons))
				}
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("the application's commit: %v", err)
			}
			if via == "revoke" {
				<-revoked
			} else {
				time.Sleep(300 * time.Millisecond) // many autocommit intervals
			}
			got := committedOf(t, c, group, tp)
			if om := got[tp]; om.Offset != 10 || om.LeaderEpoch != 0 {
				t.Fatalf("committed %+v after the application committed 10@0 (undone by a commit made before its answer)", got)
			}
		})
	}
}

// TestRevokeCommitsWhatPollSignalled: the application processed what its
// latest Poll returned and calls Poll again while a revocation waits to
// commit (behind an earlier commit): the Poll blocks until the revocation
// is over, but its call says the records were processed, so the revoke
// commit must store them; otherwise the next owner re-reads them. (Eager:
// a cooperative member rejoins right after, and the test's Close could
// come while it is in the rebalance, its final commit refused.)
func TestRevokeCommitsWhatPollSignalled(t *testing.T) {
	c := newCluster(t, 1)
	createTopic(t, c, "u", 1)
	produceRange(t, c, 0, 0, 10)
	revoked := make(chan struct{})
	var revokedOnce sync.Once
	onRevoked := consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
		if slices.Contains(tps, consumer.TopicPartition{Topic: topic, Partition: 0}) {
			revokedOnce.Do(func() { close(revoked) })
		}
	})
	cons := newConsumer(t, c, append(groupOpts("signalled"), consumer.AutoCommitInterval(time.Hour), onRevoked,
		consumer.Assignors(consumer.RangeAssignor))...)
	if err := cons.Subscribe(topic, "u"); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := pollUntil(t, cons, 10, 10*time.Second); len(recs) != 10 {
		t.Fatalf("%d records", len(recs))
	}
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	release := blockCommits(t, cons)
	if err := cons.Subscribe("u"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the revoke commit queued", func() bool { return consumer.QueuedCommits(cons) == 1 })
	polled := make(chan struct{})
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	go func() {
		defer close(polled)
		_, _ = cons.Poll(pctx)
	}()
	// Until that Poll is seen (it never is when Poll waits for the
	// revocation before recording its call).
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if pos, _ := consumer.Committable(cons, tp); pos.Offset == 10 {
			break
		}
	}
	release()
	<-revoked
	pcancel()
	<-polled
	if got := committedOf(t, c, "signalled", tp); got[tp].Offset != 10 || got[tp].LeaderEpoch != 0 {
		t.Fatalf("the revocation committed %+v; the application had polled again after processing 10 records", got)
	}
}

// TestNoCommitOfBrokenLineage: after a break of the consumed lineage (the
// topic recreated; a truncation found by the validation of a leader
// change), the position moves to the new lineage (its start; the
// divergence point); until the application polls again, autocommit must
// not store the position its latest Poll began at, which is an offset of
// the old lineage. For a recreated topic that is a silent skip: the next
// owner starts at that offset of the new topic and never reads the
// records below it.
func TestNoCommitOfBrokenLineage(t *testing.T) {
	for _, kind := range []string{"recreated", "diverged"} {
		t.Run(kind, func(t *testing.T) {
			c := newCluster(t, 1)
			produceRange(t, c, 0, 0, 20)
			// Commits are refused until the break has moved the position,
			// so that what is committed then is decided by the break alone.
			var allow atomic.Bool
			c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if allow.Load() {
					return nil, nil, false
				}
				return refuseCommit(kr.(*kmsg.OffsetCommitRequest), kerr.RebalanceInProgress.Code), nil, true
			})
			group := "broken-" + kind
			cons := newConsumer(t, c, consumer.Group(group), consumer.AutoCommitInterval(20*time.Millisecond),
				consumer.MetadataMaxAge(200*time.Millisecond))
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			if recs, _, _ := pollUntil(t, cons, 20, 10*time.Second); len(recs) != 20 {
				t.Fatalf("%d records", len(recs))
			}
			// The application processed them and polls again: 20@0 is
			// committable.
			pctx, pcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _ = cons.Poll(pctx)
			pcancel()
			var at int64
			switch kind {
			case "recreated":
				if err := c.DeleteTopic(topic); err != nil {
					t.Fatal(err)
				}
				if err := c.CreateTopic(topic, 1, nil); err != nil {
					t.Fatal(err)
				}
				produceRange(t, c, 0, 0, 25)
				at = 0
			case "diverged":
				truncate(c, 12) // the new leader's epoch 0 ends at 12
				if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
					t.Fatal(err)
				}
				at = 12
			}
			waitFor(t, 10*time.Second, "the position moved by the break", func() bool {
				st, _ := cons.State(topic, 0)
				pos, ok := cons.Position(topic, 0)
				return st == seek.StateFetching && ok && pos.Offset == at
			})
			allow.Store(true)
			time.Sleep(300 * time.Millisecond) // many autocommit intervals
			tp := consumer.TopicPartition{Topic: topic, Partition: 0}
			if om, ok := committedOf(t, c, group, tp)[tp]; ok && om.Offset > at {
				t.Fatalf("committed %+v, past the position %d the %s lineage resumes at", om, at, kind)
			}
			if kind != "recreated" {
				return
			}
			// The next owner starts from the group's commit.
			seq := 0
			next := startMember(t, c, "next", group, &seq)
			waitFor(t, 10*time.Second, "a record of the new topic", func() bool { r, _ := next.got(); return len(r) > 0 })
			if r, _ := next.got(); r[0].Offset != 0 {
				t.Fatalf("the next owner began at offset %d of the recreated topic: offsets below it never delivered", r[0].Offset)
			}
		})
	}
}

// TestCloseReportsFailedCommit: Close must say when the commits it made
// failed (its final commit; a revocation's commit made while it waited),
// since the records since the last commit will be delivered again.
func TestCloseReportsFailedCommit(t *testing.T) {
	t.Run("final", func(t *testing.T) {
		c := newCluster(t, 1)
		produceRange(t, c, 0, 0, 10)
		c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			return refuseCommit(kr.(*kmsg.OffsetCommitRequest), kerr.GroupAuthorizationFailed.Code), nil, true
		})
		cons := newOwnConsumer(t, c.ListenAddrs(), consumer.Group("close-fails"), consumer.AutoCommitInterval(time.Hour))
		if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
			t.Fatal(err)
		}
		if recs, _, _ := pollUntil(t, cons, 10, 10*time.Second); len(recs) != 10 {
			t.Fatalf("%d records", len(recs))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := cons.Close(ctx)
		var pe *errors.PartitionError
		if !errors.Is(err, kerr.GroupAuthorizationFailed) || !errors.As(err, &pe) || pe.Op != "commit" || pe.Offset != 10 {
			t.Fatalf("Close returned %v; its commit of 10 was refused", err)
		}
	})
	t.Run("revoke", func(t *testing.T) {
		// Eager: the revocation takes every partition, so Close itself
		// has nothing left to commit.
		_, err := closeKeepingRevoke(t, "close-revoke-fails", kerr.GroupAuthorizationFailed.Code, consumer.Assignors(consumer.RangeAssignor))
		if !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("Close returned %v; the commit of the partitions revoked while it waited was refused", err)
		}
	})
}

// TestNoDeliveryDuringClose: once Close has begun (and computed its final
// commit), Poll must not return records any more: they would never be
// committed, and the next owner would deliver them again.
func TestNoDeliveryDuringClose(t *testing.T) {
	c := newCluster(t, 1)
	produceRange(t, c, 0, 0, 10)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() {
			close(arrived)
			c.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})
	cons := newOwnConsumer(t, c.ListenAddrs(), consumer.Group("close-delivers"), consumer.AutoCommitInterval(time.Hour))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []consumer.Record
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	polling := make(chan struct{})
	go func() {
		defer close(polling)
		for {
			f, err := cons.Poll(context.Background())
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, f.Records...)
			mu.Unlock()
		}
	}()
	waitFor(t, 10*time.Second, "10 records", func() bool { return count() == 10 })
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- cons.Close(ctx)
	}()
	<-arrived // Close's commit (of 10) is being sent
	produceRange(t, c, 0, 10, 20)
	// Until the application stops polling, or long enough for Poll to
	// return the new records.
	select {
	case <-polling:
	case <-time.After(2 * time.Second):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-polling
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	committed := committedOf(t, c, "close-delivers", tp)[tp]
	mu.Lock()
	defer mu.Unlock()
	if last := got[len(got)-1].Offset; last >= committed.Offset {
		t.Fatalf("Poll returned offset %d during Close, which committed %+v: records returned and never committed", last, committed)
	}
}

// TestLostPartitionsNotCommitted: a member whose session expired (the
// coordinator stopped answering it) drops its partition as lost and must
// not commit it any more, not even with generation -1, which the
// coordinator accepts as a standalone commit once the group is empty.
// Meanwhile another member owned the partition, consumed further,
// committed and left: a late commit of the lost member's position takes
// the group's offset back, and the next owner re-reads those records.
func TestLostPartitionsNotCommitted(t *testing.T) {
	c := newClusterWith(t, 1, kfake.GroupMinSessionTimeout(time.Second))
	produceRange(t, c, 0, 0, 10)
	// Once refused, m1's commits are refused until uncut (then they reach
	// the coordinator); once cut, its group requests go unanswered.
	var refused, cut, uncut atomic.Bool
	var m1id atomic.Value
	m1id.Store("")
	mine := func(member string) bool { return member != "" && member == m1id.Load().(string) }
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup} {
		c.ControlKey(int16(key), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			var member string
			switch r := kr.(type) {
			case *kmsg.HeartbeatRequest:
				member = r.MemberID
			case *kmsg.JoinGroupRequest:
				member = r.MemberID
			case *kmsg.SyncGroupRequest:
				member = r.MemberID
			}
			if cut.Load() && mine(member) {
				return nil, errors.New("coordinator unreachable"), true
			}
			return nil, nil, false
		})
	}
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		if refused.Load() && !uncut.Load() && mine(req.MemberID) {
			return refuseCommit(req, kerr.RebalanceInProgress.Code), nil, true
		}
		return nil, nil, false
	})
	// A 2 s session: with 1 s, a loaded machine under -race (the whole
	// suite) once let m1's session lapse before the cut, m1 rejoined
	// under another member ID, and the refusals and the cut, aimed at
	// the first, missed it.
	timing := []consumer.Opt{consumer.SessionTimeout(2 * time.Second), consumer.RebalanceTimeout(2 * time.Second),
		consumer.HeartbeatInterval(100 * time.Millisecond), consumer.AutoCommitInterval(20 * time.Millisecond)}
	var m1log atomic.Pointer[rebalanceLog]
	lost, proceed := make(chan struct{}), make(chan struct{})
	var lostOnce sync.Once
	onLost := consumer.OnLost(func(_ context.Context, tps []consumer.TopicPartition) {
		m1log.Load().lost(tps)
		lostOnce.Do(func() {
			close(lost)
			<-proceed // the application's cleanup of the lost partition
		})
	})
	seq := 0
	group := "lost-commit"
	m1 := startMember(t, c, "m1", group, &seq, append(timing, onLost)...)
	m1log.Store(m1.log)
	m1id.Store(m1.cons.GroupMetadata().MemberID)
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	check := newConsumer(t, c, consumer.Group(group), consumer.DisableAutoCommit())
	waitFor(t, 10*time.Second, "m1 committed 10", func() bool {
		m1id.Store(m1.cons.GroupMetadata().MemberID)
		return committedBy(t, check, tp)[tp].Offset == 10
	})
	m1id.Store(m1.cons.GroupMetadata().MemberID)
	refused.Store(true)
	produceRange(t, c, 0, 10, 20)
	waitFor(t, 10*time.Second, "m1 got 20 records", func() bool { r, _ := m1.got(); return len(r) == 20 })
	if id := m1.cons.GroupMetadata().MemberID; id != m1id.Load().(string) {
		t.Fatalf("m1 rejoined as %s (was %s) before the cut: its session lapsed", id, m1id.Load())
	}
	cut.Store(true)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("m1 never lost its partition: callbacks %v, %+v, %s", m1.log.log(), m1.cons.GroupMetadata(), consumer.DebugGroup(m1.cons))
	}
	defer close(proceed)
	m2 := startMember(t, c, "m2", group, &seq, timing...)
	waitFor(t, 15*time.Second, "m2 got offsets 10-19", func() bool { r, _ := m2.got(); return len(r) >= 10 })
	produceRange(t, c, 0, 20, 30)
	waitFor(t, 10*time.Second, "m2 committed 30", func() bool { return committedBy(t, check, tp)[tp].Offset == 30 })
	m2.closeNow(t) // the group is empty again
	uncut.Store(true)
	time.Sleep(300 * time.Millisecond) // many autocommit intervals of m1, still in OnLost
	if om := committedBy(t, check, tp)[tp]; om.Offset != 30 {
		t.Fatalf("committed %+v after m2 committed 30 and left: the member that lost the partition committed it", om)
	}
}

// TestOnRevokedCommitsDuringClose: without autocommit, the application
// commits what it processed in OnRevoked, with the callback's ctx. If
// Close begins while the callback runs, that ctx must not end (it did, and
// the commit was dropped: the next owner re-read what was processed).
func TestOnRevokedCommitsDuringClose(t *testing.T) {
	c := newCluster(t, 1)
	createTopic(t, c, "u", 1)
	produceRange(t, c, 0, 0, 10)
	tp := consumer.TopicPartition{Topic: topic, Partition: 0}
	var cons atomic.Pointer[consumer.Consumer]
	entered, errc := make(chan struct{}), make(chan error, 1)
	onRevoked := consumer.OnRevoked(func(ctx context.Context, tps []consumer.TopicPartition) {
		if !slices.Contains(tps, tp) {
			return
		}
		close(entered)
		for deadline := time.Now().Add(5 * time.Second); !consumer.GroupClosing(cons.Load()) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		errc <- cons.Load().CommitSync(ctx, map[consumer.TopicPartition]consumer.OffsetAndMetadata{tp: {Offset: 10, LeaderEpoch: 0}})
	})
	cons.Store(newConsumer(t, c, append(groupOpts("revoked-close"), consumer.DisableAutoCommit(), onRevoked)...))
	if err := cons.Load().Subscribe(topic, "u"); err != nil {
		t.Fatal(err)
	}
	if recs, _, _ := pollUntil(t, cons.Load(), 10, 10*time.Second); len(recs) != 10 {
		t.Fatalf("%d records", len(recs))
	}
	if err := cons.Load().Subscribe("u"); err != nil {
		t.Fatal(err)
	}
	<-entered
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- cons.Load().Close(ctx)
	}()
	if err := <-errc; err != nil {
		t.Fatalf("OnRevoked's commit while Close waited: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if om := committedOf(t, c, "revoked-close", tp)[tp]; om.Offset != 10 {
		t.Fatalf("committed %+v; OnRevoked committed 10", om)
	}
}
