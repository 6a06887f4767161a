package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// TestProducerAcrossTopicRecreation: an idempotent kepoch producer writes a
// steady stream to a partition while its topic is deleted and created again
// under the same name. Afterwards every record's result is checked against
// the new topic's log as the broker serves it: a record the new log holds is
// there once, in the order it was produced, at the offset its result gave; a
// record reported failed (the old incarnation's, ErrTopicIDChanged) is not
// in it; a record acknowledged and absent from it was acknowledged by the
// old incarnation, before every record the new log holds; nothing is
// reported as a gap (ProvenGap: writes lost), because none were — the old
// topic's records went with it.
func TestProducerAcrossTopicRecreation(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	topic := TopicName("producer-recreate")
	if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2, 3}}, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var outcomes []producer.Outcome
	p := newProducer(t, producer.OnOutcome(func(o producer.Outcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}))

	results := map[int]producer.Result{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	produced := 0
	wg.Add(1) // the writer itself
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				mu.Lock()
				produced = i
				mu.Unlock()
				wg.Done()
				return
			case <-tick.C:
			}
			wg.Add(1)
			r := &producer.Record{Topic: topic, Partition: 0, ExplicitPartition: true, Value: []byte("v" + strconv.Itoa(i))}
			var once sync.Once
			report := func(res producer.Result) {
				once.Do(func() {
					mu.Lock()
					results[i] = res
					mu.Unlock()
					wg.Done()
				})
			}
			if err := p.Produce(ctx, r, report); err != nil {
				report(producer.Result{Err: err})
			}
		}
	}()
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(results)
	}
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) { return acked() >= 100, nil }); err != nil {
		t.Fatal(err)
	}
	newID, err := c.RecreateTopic(ctx, topic, [][]int32{{2, 3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	logf("deleted and created again after %d results", acked())
	before := acked()
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) { return acked() >= before+200, nil }); err != nil {
		t.Fatalf("the producer never went on writing to the new topic: %v", err)
	}
	close(stop)
	wg.Wait()
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}

	st, err := c.WaitPartition(ctx, topic, 0, func(s PartitionState) bool { return s.Leader >= 0 })
	if err != nil {
		t.Fatal(err)
	}
	log, err := c.FetchAll(ctx, st.Leader, topic, newID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != produced {
		t.Fatalf("%d results for %d records", len(results), produced)
	}
	inNew := map[int]int64{}
	last := -1
	for _, f := range log {
		i, err := strconv.Atoi(strings.TrimPrefix(f.Value, "v"))
		if err != nil || !strings.HasPrefix(f.Value, "v") {
			t.Fatalf("new log holds %q at %d", f.Value, f.Offset)
		}
		if _, dup := inNew[i]; dup {
			t.Fatalf("record %d twice in the new log (again at %d)", i, f.Offset)
		}
		if i <= last {
			t.Fatalf("record %d at %d after record %d: out of order", i, f.Offset, last)
		}
		inNew[i], last = f.Offset, i
	}
	firstNew := produced
	for i := range inNew {
		firstNew = min(firstNew, i)
	}
	changed := 0
	for i := 0; i < produced; i++ {
		res := results[i]
		off, there := inNew[i]
		switch {
		case res.Err == nil && there:
			if res.Offset != off {
				t.Fatalf("record %d acknowledged at %d; the new log holds it at %d", i, res.Offset, off)
			}
		case res.Err == nil:
			if i >= firstNew {
				t.Fatalf("record %d acknowledged at %d, absent from the new log although record %d (later or earlier) is there", i, res.Offset, firstNew)
			}
		case there:
			t.Fatalf("record %d reported failed (%v) and in the new log at %d", i, res.Err, off)
		case errors.Is(res.Err, errors.ErrTopicIDChanged):
			changed++
		default:
			t.Fatalf("record %d failed: %v", i, res.Err)
		}
	}
	for _, o := range outcomes {
		if _, gap := o.(producer.ProvenGap); gap {
			t.Fatalf("outcome %+v: no write was lost, the topic was recreated", o)
		}
	}
	logf("%d records: %d in the new log (from record %d), %d acknowledged by the old topic, %d reported ErrTopicIDChanged; outcomes %v",
		produced, len(inNew), firstNew, produced-len(inNew)-changed, changed, outcomes)
}
