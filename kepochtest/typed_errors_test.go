package kepochtest_test

import (
	"context"
	stderrors "errors"
	"testing"

	"github.com/kepoch/kepoch/kepochtest"
)

func TestTypedErrors(t *testing.T) {
	ctx := testCtx(t)
	c := kepochtest.New(t, kepochtest.Topic("t", 1))
	produce(t, c, "t", 0, values("a", 0, 5)...)
	ops := map[string]func(topic string, p int32) error{
		"Partition": func(tp string, p int32) error { _, err := c.Partition(ctx, tp, p); return err },
		"Records":   func(tp string, p int32) error { _, err := c.Records(ctx, tp, p); return err },
		"EpochEnd":  func(tp string, p int32) error { _, err := c.EpochEnd(ctx, tp, p, 0); return err },
		"Produce":   func(tp string, p int32) error { _, err := c.Produce(ctx, tp, p, "x"); return err },
		"Delete":    func(tp string, p int32) error { _, err := c.DeleteRecords(ctx, tp, p, 0); return err },
		"Clean":     func(tp string, p int32) error { _, err := c.CleanElection(ctx, tp, p); return err },
		"Unclean":   func(tp string, p int32) error { _, err := c.UncleanElection(ctx, tp, p, 0); return err },
		"LoseState": func(tp string, p int32) error { return c.LoseProducerState(ctx, tp, p) },
		"Recreate":  func(tp string, p int32) error { _, err := c.RecreateTopic(ctx, tp, 1); return err },
	}
	for name, op := range ops {
		for _, w := range []struct {
			topic string
			p     int32
		}{{"nope", 0}, {"t", 3}, {"t", -1}} {
			if name == "Recreate" && w.topic == "t" {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 3e9)
			_ = cctx
			err := op(w.topic, w.p)
			cancel()
			var he *kepochtest.Error
			if !stderrors.Is(err, kepochtest.ErrUnknownPartition) || !stderrors.As(err, &he) {
				t.Errorf("%s(%s, %d) = %v; want ErrUnknownPartition in an *Error", name, w.topic, w.p, err)
			}
		}
	}
}
