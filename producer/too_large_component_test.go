package producer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A broker whose message.max.bytes is below the producer's batches refuses
// them with MESSAGE_TOO_LARGE (kfake checks the batch's size before
// anything else): batches of several records are split until they fit,
// under the sequences they held; a record too large on its own fails alone
// with ErrMessageTooLarge (never ErrUnknownOutcome: the refusal comes
// before the append), and every other record of the partition is written
// once, in order.
func TestBrokerRefusesTooLargeBatches(t *testing.T) {
	for _, inFlight := range []int{1, 5} {
		t.Run(fmt.Sprintf("inflight%d", inFlight), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			p, rec := newRecorded(t, c, producer.BatchMaxBytes(16<<10), producer.Linger(5*time.Second), producer.MaxInFlight(inFlight),
				producer.RequestTimeout(time.Second), producer.DeliveryTimeout(20*time.Second))
			ctx := testCtx(t, 30*time.Second)
			mustOK(t, sendAll(t, ctx, p, prec(0, "a")))

			pad := strings.Repeat("x", 480)
			var rs []*producer.Record
			var want []string
			for i := range 60 {
				v := fmt.Sprintf("s%02d-%s", i, pad)
				if i == 30 {
					rs = append(rs, prec(0, "big-"+strings.Repeat("y", 8<<10)))
				}
				rs = append(rs, prec(0, v))
				want = append(want, v)
			}
			res := sendAll(t, ctx, p, rs...)
			for _, r := range res {
				big := strings.HasPrefix(string(r.Record.Value), "big-")
				switch {
				case big && !errors.Is(r.Err, errors.ErrMessageTooLarge):
					t.Fatalf("the record above message.max.bytes reported %v; want ErrMessageTooLarge", r.Err)
				case big && errors.Is(r.Err, errors.ErrUnknownOutcome):
					t.Fatalf("the refused record reported %v: it was refused before the append", r.Err)
				case !big && r.Err != nil:
					t.Fatalf("record %.3s: %v", r.Record.Value, r.Err)
				}
			}
			// The partition goes on.
			mustOK(t, sendAll(t, ctx, p, prec(0, "z")))
			wantLog(t, c, 0, append(append([]string{"a"}, want...), "z"))
			t.Logf("bumps %d, outcomes %s", p.Bumps(), kinds(rec.Outcomes()))
		})
	}
}

// A record whose batch would be larger than MaxRequestBytes is refused by
// Produce at once with ErrMessageTooLarge (a Produce request carries it
// whole: the broker would refuse it, or close the connection on a request
// above its socket.request.max.bytes and have it resent until its delivery
// timeout, with the other batches of the request); the records produced
// around it are written, in order.
func TestRecordAboveMaxRequestBytesRefused(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newRecorded(t, c, producer.BatchMaxBytes(1024), producer.MaxRequestBytes(4096))
	ctx := testCtx(t, 20*time.Second)
	big := prec(0, strings.Repeat("y", 4096))
	if err := p.Produce(ctx, big, func(producer.Result) { t.Error("the refused record was reported") }); !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("Produce of a record above MaxRequestBytes: %v; want ErrMessageTooLarge", err)
	}
	res, err := p.ProduceSync(ctx, prec(0, "a"), prec(0, strings.Repeat("z", 8192)), prec(0, "b"))
	if !errors.Is(err, errors.ErrMessageTooLarge) {
		t.Fatalf("ProduceSync: %v; want ErrMessageTooLarge", err)
	}
	if res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, errors.ErrMessageTooLarge) {
		t.Fatalf("reports %v, %v, %v; want the middle one only failed", res[0].Err, res[1].Err, res[2].Err)
	}
	// A record that fits alone (above BatchMaxBytes) is still sent.
	mustOK(t, sendAll(t, ctx, p, prec(0, strings.Repeat("w", 2048))))
	log := values(partitionLog(t, c, 0))
	if len(log) != 3 || log[0] != "a" || log[1] != "b" || len(log[2]) != 2048 {
		t.Fatalf("log %.20q", log)
	}
}

// Batches larger than BatchMaxBytes (a record above it goes alone) count at
// their size in a request's MaxRequestBytes, not at BatchMaxBytes: two of
// them from different partitions do not share a request they would take
// past the limit.
func TestLoneLargeRecordsKeepRequestsBounded(t *testing.T) {
	const parts = 6
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const limit = 4096
	hook := &requestSizeHook{}
	p := newProducer(t, c, producer.BatchMaxBytes(1024), producer.MaxRequestBytes(limit), producer.MaxInFlight(1),
		producer.TransportOpts(kgo.WithHooks(hook)))
	ctx := testCtx(t, 20*time.Second)
	var rs []*producer.Record
	for part := range int32(parts) {
		rs = append(rs, &producer.Record{Topic: topic, Partition: part, ExplicitPartition: true, Value: []byte(strings.Repeat("v", 2800))})
	}
	// The first request is held until every record is buffered: the
	// next requests choose among five partitions' batches.
	release, held := holdProduceSeen(c, 0)
	defer release()
	pr := sendAsync(t, ctx, p, rs...)
	onWire(t, held)
	release()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustOK(t, pr.wait(5*time.Second))
	if got := hook.Max(); got > limit+512 {
		t.Errorf("largest Produce request %d bytes, MaxRequestBytes %d", got, limit)
	}
}
