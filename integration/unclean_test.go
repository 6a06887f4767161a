package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestUncleanElectionTruncatesAcknowledgedWrites proves that the harness
// produces the core fault every truncation claim rests on: a real unclean
// leader election on Apache Kafka that removes writes the old leader had
// acknowledged. Everything it asserts comes from raw requests to the brokers.
func TestUncleanElectionTruncatesAcknowledgedWrites(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	u, err := EngineerUncleanElection(ctx, c, UncleanPlan{Prefix: "unclean", Before: 10, Lost: 10, After: 5, Log: step})
	if err != nil {
		t.Fatal(err)
	}

	// The broker's own word: the old epoch ends, on the new leader, below the
	// offsets the old leader acknowledged.
	end, err := c.OffsetForLeaderEpoch(ctx, u.NewLeader, u.Topic, 0, u.OldEpoch)
	if err != nil {
		t.Fatal(err)
	}
	step("OffsetForLeaderEpoch(epoch %d) on new leader %d: end offset %d, epoch %d", u.OldEpoch, u.NewLeader, end.EndOffset, end.LeaderEpoch)
	if end.EndOffset != int64(u.Before) || end.LeaderEpoch != u.OldEpoch {
		t.Fatalf("OffsetForLeaderEpoch(%d) = %+v; want end offset %d in epoch %d", u.OldEpoch, end, u.Before, u.OldEpoch)
	}
	lastAcked := u.LostOffsets[len(u.LostOffsets)-1]
	if end.EndOffset > u.LostOffsets[0] || end.EndOffset > lastAcked {
		t.Fatalf("old epoch ends at %d, not below the acknowledged offsets %v", end.EndOffset, u.LostOffsets)
	}

	// The old leader, restarted, truncates its suffix and follows.
	if err := c.Start(ctx, u.OldLeader); err != nil {
		t.Fatal(err)
	}
	newEnd := int64(u.Before + u.After)
	if _, err := c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool { return slices.Contains(s.ISR, u.OldLeader) }); err != nil {
		t.Fatalf("old leader never rejoined the ISR: %v", err)
	}
	oldOffsets, err := c.ReplicaOffsets(ctx, u.OldLeader, u.Topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	step("old leader %d restarted: log end %d (was %d before the election)", u.OldLeader, oldOffsets.LogEnd, u.OldLogEnd)
	if oldOffsets.LogEnd != newEnd {
		t.Fatalf("old leader log end = %d after rejoining; want %d (truncated to %d, then %d new records)", oldOffsets.LogEnd, newEnd, u.Before, u.After)
	}

	// The acknowledged offsets now hold different records.
	got, err := c.FetchAll(ctx, u.NewLeader, u.Topic, u.TopicID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < u.Before; i++ {
		want = append(want, fmt.Sprintf("a%d", i))
	}
	for i := 0; i < u.After; i++ {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	var values []string
	for i, r := range got {
		values = append(values, r.Value)
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d", i, r.Offset)
		}
	}
	if !slices.Equal(values, want) {
		t.Fatalf("log after the election = %v; want %v", values, want)
	}
	for i, off := range u.LostOffsets {
		if off >= newEnd {
			continue
		}
		if got[off].Value == u.LostValues[i] {
			t.Fatalf("offset %d still holds acknowledged %q", off, u.LostValues[i])
		}
		if got[off].LeaderEpoch != u.NewEpoch {
			t.Fatalf("offset %d has epoch %d; want the new epoch %d", off, got[off].LeaderEpoch, u.NewEpoch)
		}
	}
	step("offsets %d..%d acknowledged as %q..%q under epoch %d now hold %q..%q under epoch %d; offsets %d..%d are gone",
		u.LostOffsets[0], newEnd-1, u.LostValues[0], u.LostValues[newEnd-1-u.LostOffsets[0]], u.OldEpoch,
		got[u.LostOffsets[0]].Value, got[newEnd-1].Value, u.NewEpoch, newEnd, lastAcked)
}

// UncleanPlan sizes an engineered unclean election.
type UncleanPlan struct {
	Prefix string
	Before int // records on both replicas (acks=all), offsets [0, Before)
	Lost   int // records acknowledged by the old leader alone (acks=1)
	After  int // records written by the new leader after the election
	// Log, when set, receives one line per step.
	Log func(format string, args ...any)
	// Write, when set, writes the values instead of ProduceValues (phase is
	// "before", "lost" or "after"; acks is what the phase needs).
	Write func(ctx context.Context, phase string, acks Acks, topic string, values []string) ([]int64, error)
	// BeforeStop, when set, runs after the Before records are on both
	// replicas and before the follower is stopped (a consumer can read them
	// there, from either replica).
	BeforeStop func(ctx context.Context, topic string) error
	// BeforeKill, when set, runs after the Lost records are acknowledged and
	// before the old leader is killed (a consumer can read them there).
	BeforeKill func(ctx context.Context, topic string) error
}

// Unclean is what an engineered unclean election did.
type Unclean struct {
	Topic                string
	TopicID              [16]byte
	OldLeader, NewLeader int32
	OldEpoch, NewEpoch   int32
	Before, After        int      // the plan's record counts
	OldLogEnd            int64    // the old leader's log end before it died
	LostOffsets          []int64  // offsets the old leader acknowledged alone
	LostValues           []string // what they held
}

// truth returns what u's new leader answers a raw OffsetForLeaderEpoch for
// the old epoch, which it logs with logf: the divergence point a
// truncation report must name.
func (u Unclean) truth(ctx context.Context, t testing.TB, c *Cluster, logf func(string, ...any)) EpochEnd {
	t.Helper()
	truth, err := c.OffsetForLeaderEpoch(ctx, u.NewLeader, u.Topic, 0, u.OldEpoch)
	if err != nil {
		t.Fatal(err)
	}
	logf("new leader %d answers OffsetForLeaderEpoch(%d) = end offset %d, epoch %d", u.NewLeader, u.OldEpoch, truth.EndOffset, truth.LeaderEpoch)
	return truth
}

// EngineerUncleanElection makes a real unclean leader election on a fresh
// topic with one partition, replication factor 2 and min.insync.replicas=1:
// Before records on both replicas, the first half under the topic's first
// epoch and the second half after a clean leader change (so the old epoch is
// never 0, the zero value an unset epoch field would also hold, and the
// consumed lineage has two epochs); the follower stopped; Lost records
// acknowledged by the leader alone; the leader killed (SIGKILL); the follower
// started and elected uncleanly (ElectLeaders UNCLEAN); After new records
// written by the new leader. The old leader is left down: the caller decides
// when it returns (Heal at cleanup restarts it anyway).
func EngineerUncleanElection(ctx context.Context, c *Cluster, p UncleanPlan) (Unclean, error) {
	logf := p.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// Broker 1 leads first; a clean leader change moves leadership to 2,
	// which is the leader that later acknowledges the Lost records alone.
	u := Unclean{Topic: TopicName(p.Prefix), OldLeader: 2, NewLeader: 1, Before: p.Before, After: p.After}
	var err error
	u.TopicID, err = c.CreateTopic(ctx, u.Topic, [][]int32{{u.NewLeader, u.OldLeader}}, map[string]string{
		"min.insync.replicas":            "1",
		"unclean.leader.election.enable": "false",
	})
	if err != nil {
		return u, err
	}
	st, err := c.Describe(ctx, u.Topic, 0)
	if err != nil {
		return u, err
	}
	logf("created %s: %v", u.Topic, st)

	values := func(prefix string, n int) []string {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return vs
	}
	write := func(phase string, acks Acks, vs []string) ([]int64, error) {
		if p.Write != nil {
			return p.Write(ctx, phase, acks, u.Topic, vs)
		}
		return ProduceValues(ctx, acks, u.Topic, 0, vs...)
	}
	firstEpoch := st.LeaderEpoch
	before := values("a", p.Before)
	half := p.Before / 2
	if _, err := write("before", AcksAll, before[:half]); err != nil {
		return u, err
	}
	// A clean leader change (controlled shutdown of the first leader), so
	// that the rest is written under a later, non-zero epoch.
	if err := c.Stop(ctx, u.NewLeader); err != nil {
		return u, err
	}
	if st, err = c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool {
		return s.Leader == u.OldLeader && s.LeaderEpoch > firstEpoch
	}); err != nil {
		return u, fmt.Errorf("leadership never moved to %d in a new epoch: %w", u.OldLeader, err)
	}
	if err := c.Start(ctx, u.NewLeader); err != nil {
		return u, err
	}
	if st, err = c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool {
		return s.Leader == u.OldLeader && slices.Contains(s.ISR, u.NewLeader)
	}); err != nil {
		return u, fmt.Errorf("broker %d never rejoined the ISR: %w", u.NewLeader, err)
	}
	logf("%d records under epoch %d, then a clean leader change: %v", half, firstEpoch, st)
	if _, err := write("before", AcksAll, before[half:]); err != nil {
		return u, err
	}
	if err := waitLogEnd(ctx, c, u.NewLeader, u.Topic, int64(p.Before)); err != nil {
		return u, fmt.Errorf("follower never replicated the first %d records: %w", p.Before, err)
	}
	logf("%d records acks=all at offsets 0..%d, on both replicas", p.Before, p.Before-1)
	if p.BeforeStop != nil {
		if err := p.BeforeStop(ctx, u.Topic); err != nil {
			return u, err
		}
	}

	if err := c.Stop(ctx, u.NewLeader); err != nil {
		return u, err
	}
	if st, err = c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool { return slices.Equal(s.ISR, []int32{u.OldLeader}) }); err != nil {
		return u, fmt.Errorf("ISR never shrank to the leader: %w", err)
	}
	logf("follower %d stopped: %v", u.NewLeader, st)

	u.LostValues = values("b", p.Lost)
	if u.LostOffsets, err = write("lost", AcksLeader, u.LostValues); err != nil {
		return u, err
	}
	if len(u.LostOffsets) != p.Lost || p.Lost == 0 {
		return u, fmt.Errorf("%d offsets acknowledged for %d lost records; an unclean election needs at least one", len(u.LostOffsets), p.Lost)
	}
	for i, off := range u.LostOffsets {
		if off != int64(p.Before+i) {
			return u, fmt.Errorf("acks=1 record %d acknowledged at offset %d; want %d", i, off, p.Before+i)
		}
	}
	o, err := c.ReplicaOffsets(ctx, u.OldLeader, u.Topic, 0)
	if err != nil {
		return u, err
	}
	u.OldLogEnd = o.LogEnd
	if st, err = c.Describe(ctx, u.Topic, 0); err != nil {
		return u, err
	}
	u.OldEpoch = st.LeaderEpoch
	if u.OldEpoch <= firstEpoch || u.OldEpoch <= 0 {
		return u, fmt.Errorf("old epoch %d: want it above the first epoch %d (and not 0)", u.OldEpoch, firstEpoch)
	}
	logf("%d records acks=1 acknowledged by leader %d alone at offsets %d..%d (log end %d, high watermark %d, epoch %d)",
		p.Lost, u.OldLeader, u.LostOffsets[0], u.LostOffsets[len(u.LostOffsets)-1], o.LogEnd, o.HighWater, u.OldEpoch)
	if o.LogEnd != int64(p.Before+p.Lost) || o.HighWater != o.LogEnd {
		return u, fmt.Errorf("old leader offsets %+v; want log end and high watermark %d", o, p.Before+p.Lost)
	}
	if p.BeforeKill != nil {
		if err := p.BeforeKill(ctx, u.Topic); err != nil {
			return u, err
		}
	}

	if err := c.Kill(ctx, u.OldLeader); err != nil {
		return u, err
	}
	if st, err = c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool { return s.Leader == -1 }); err != nil {
		return u, fmt.Errorf("partition never went leaderless: %w", err)
	}
	logf("leader %d killed: %v", u.OldLeader, st)

	if err := c.Start(ctx, u.NewLeader); err != nil {
		return u, err
	}
	if st, err = c.Describe(ctx, u.Topic, 0); err != nil {
		return u, err
	}
	if st.Leader != -1 {
		return u, fmt.Errorf("partition got leader %d before the unclean election: %v", st.Leader, st)
	}
	logf("follower %d restarted; still leaderless: %v", u.NewLeader, st)

	if err := c.ElectUnclean(ctx, u.Topic, 0); err != nil {
		return u, err
	}
	if st, err = c.WaitPartition(ctx, u.Topic, 0, func(s PartitionState) bool { return s.Leader == u.NewLeader }); err != nil {
		return u, fmt.Errorf("unclean election did not make %d leader: %w", u.NewLeader, err)
	}
	u.NewEpoch = st.LeaderEpoch
	if u.NewEpoch <= u.OldEpoch {
		return u, fmt.Errorf("new leader epoch %d is not above the old %d", u.NewEpoch, u.OldEpoch)
	}
	logf("unclean election: %v", st)

	// The new leader never had the Lost records: its log ends at Before
	// (checked before anything is written, so it does not depend on
	// After > 0).
	if no, err := c.ReplicaOffsets(ctx, u.NewLeader, u.Topic, 0); err != nil {
		return u, err
	} else if no.LogEnd != int64(p.Before) {
		return u, fmt.Errorf("new leader %d log end %d after the election; want %d", u.NewLeader, no.LogEnd, p.Before)
	}
	offs, err := write("after", AcksAll, values("c", p.After))
	if err != nil {
		return u, err
	}
	if len(offs) != p.After {
		return u, fmt.Errorf("%d offsets for %d records written after the election", len(offs), p.After)
	}
	for i, off := range offs {
		if off != int64(p.Before+i) {
			return u, fmt.Errorf("record %d after the election at offset %d; want %d", i, off, p.Before+i)
		}
	}
	logf("%d records written by new leader %d at offsets %d..%d", p.After, u.NewLeader, p.Before, p.Before+p.After-1)
	return u, nil
}

// waitLogEnd waits until broker's replica of topic/0 has log end ≥ want.
func waitLogEnd(ctx context.Context, c *Cluster, broker int32, topic string, want int64) error {
	return poll(ctx, 100*time.Millisecond, func() (bool, error) {
		o, err := c.ReplicaOffsets(ctx, broker, topic, 0)
		return err == nil && o.LogEnd >= want, nil
	})
}
