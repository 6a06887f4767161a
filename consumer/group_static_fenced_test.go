package consumer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestStaticMemberFencedIsFatal: a classic static member whose instance ID
// another member took over is fenced (FENCED_INSTANCE_ID): its partitions
// are lost, its membership ends, and Poll says so once, as a GroupError
// whose cause is the broker's code (it was a GroupError wrapping another,
// "group: heartbeat: group: heartbeat: FENCED_INSTANCE_ID").
func TestStaticMemberFencedIsFatal(t *testing.T) {
	c := newClusterWith(t, 2)
	seq := 0
	opts := []consumer.Opt{consumer.GroupInstanceID("i1")}
	m1 := startMember(t, c, "m1", "static-fenced", &seq, opts...)
	waitFor(t, 10*time.Second, "m1 owns 2", func() bool { return m1.log.ownedCount() == 2 })
	m2 := startMember(t, c, "m2", "static-fenced", &seq, opts...)
	waitFor(t, 10*time.Second, "m2 owns 2", func() bool { return m2.log.ownedCount() == 2 })
	waitFor(t, 10*time.Second, "m1 told", func() bool { _, errs := m1.got(); return len(errs) > 0 })
	_, errs := m1.got()
	var ge *consumer.GroupError
	if len(errs) != 1 || !errors.As(errs[0], &ge) || ge.Op != "heartbeat" || ge.Err != kerr.FencedInstanceID {
		t.Fatalf("m1's errors %v; want one GroupError heartbeat: FENCED_INSTANCE_ID", errs)
	}
	if l := m1.log.log(); len(l) != 2 || l[1] != "lost [t[0] t[1]]" {
		t.Fatalf("m1's callbacks %v", l)
	}
	if gm := m1.cons.GroupMetadata(); gm.Generation != -1 || gm.MemberID != "" {
		t.Fatalf("m1 still a member: %+v", gm)
	}
}
