package consumer_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// partitionErrs returns the *PartitionErrors err holds (joined or not),
// failing unless every error in it is one of them wrapping want.
func partitionErrs(t *testing.T, err, want error) []*errors.PartitionError {
	t.Helper()
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var out []*errors.PartitionError
	for _, e := range errs {
		pe, ok := errors.AsType[*errors.PartitionError](e)
		if !ok || !errors.Is(e, want) {
			t.Fatalf("error %v (%T); want a *PartitionError wrapping %v", e, e, want)
		}
		out = append(out, pe)
	}
	return out
}

// Pause and Resume of a partition that is not assigned say so (a
// *PartitionError wrapping ErrNotAssigned for each), and still pause or
// resume the assigned partitions named with it; they were silently
// ignored, so a typo in a topic name left the application believing a
// partition paused. After Close they return ErrClosed.
func TestPauseResumeUnassigned(t *testing.T) {
	c := newCluster(t, 2)
	cons := newConsumer(t, c)
	assignAll(t, cons, 1, consumer.Latest())
	tp0 := consumer.TopicPartition{Topic: topic, Partition: 0}
	tp1 := consumer.TopicPartition{Topic: topic, Partition: 1}
	other := consumer.TopicPartition{Topic: "other", Partition: 0}
	if err := cons.Pause(tp0); err != nil {
		t.Fatalf("Pause of an assigned partition: %v", err)
	}
	if err := cons.Resume(tp0); err != nil {
		t.Fatalf("Resume of an assigned partition: %v", err)
	}
	for _, op := range []struct {
		name   string
		call   func(...consumer.TopicPartition) error
		paused bool
	}{{"pause", cons.Pause, true}, {"resume", cons.Resume, false}} {
		err := op.call(tp1, tp0, other)
		pes := partitionErrs(t, err, consumer.ErrNotAssigned)
		var got []consumer.TopicPartition
		for _, pe := range pes {
			if pe.Op != op.name {
				t.Errorf("%s: error %v has Op %q", op.name, pe, pe.Op)
			}
			got = append(got, consumer.TopicPartition{Topic: pe.Topic, Partition: pe.Partition})
		}
		if len(got) != 2 || !slices.Contains(got, tp1) || !slices.Contains(got, other) {
			t.Errorf("%s: errors name %v; want %v and %v", op.name, got, tp1, other)
		}
		if consumer.Paused(cons, tp0) != op.paused {
			t.Errorf("%s: the assigned partition named with unassigned ones is paused=%v", op.name, !op.paused)
		}
	}
	if err := cons.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := cons.Pause(tp0); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Pause after Close: %v; want ErrClosed", err)
	}
	if err := cons.Resume(tp0); !errors.Is(err, errors.ErrClosed) {
		t.Errorf("Resume after Close: %v; want ErrClosed", err)
	}
}

// Assign naming a partition twice (or more) is refused (one
// *PartitionError wrapping ErrDuplicateAssignment for it) and changes
// nothing; the last start named won, silently.
func TestAssignDuplicatePartition(t *testing.T) {
	c := newCluster(t, 2)
	cons := newConsumer(t, c)
	assignAll(t, cons, 1, consumer.Latest())
	err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(0)},
		consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()},
		consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.At(5)},
		consumer.Assignment{Topic: topic, Partition: 1, Start: consumer.Latest()})
	pes := partitionErrs(t, err, consumer.ErrDuplicateAssignment)
	if len(pes) != 1 || pes[0].Op != "assign" || pes[0].Topic != topic || pes[0].Partition != 1 {
		t.Fatalf("Assign with partition 1 twice: %v; want one assign error for %s[1]", err, topic)
	}
	if got := cons.Assigned(); len(got) != 1 || got[0] != (consumer.TopicPartition{Topic: topic, Partition: 0}) {
		t.Fatalf("after the refused Assign: assigned %v; want the earlier assignment, partition 0 alone", got)
	}
}
