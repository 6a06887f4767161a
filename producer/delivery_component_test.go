package producer_test

// Component tests of delivery timeouts and fatal errors on kfake.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// holdProduce makes the cluster hold every Produce request (after the
// first skip ones) until release is closed; held requests are then
// processed normally.
func holdProduce(c *kfake.Cluster, skip int32) (release func()) {
	release, _ = holdProduceSeen(c, skip)
	return release
}

// holdProduceSeen is holdProduce that also says when the first request it
// holds has arrived (the records in it are on the wire).
func holdProduceSeen(c *kfake.Cluster, skip int32) (release func(), held <-chan struct{}) {
	ch := make(chan struct{})
	seen := make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if k := n.Add(1); k > skip {
			if k == skip+1 {
				close(seen)
			}
			select {
			case <-ch:
			default:
				c.SleepControl(func() { <-ch })
			}
		}
		return nil, nil, false
	})
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(ch)
		}
	}, seen
}

// onWire waits until held (from holdProduceSeen) says a request is held.
func onWire(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("no Produce request reached the broker")
	}
}

// A leader that holds every Produce request: the batch on the wire fails at
// its delivery deadline with ErrDeliveryTimeout and ErrUnknownOutcome (it
// may be in the log); the batch queued behind it, never sent, fails with a
// clean ErrDeliveryTimeout. Afterwards the producer bumps its epoch (the
// maybe-written batch holds sequences it cannot give back) and goes on.
func TestDeliveryTimeoutOnTheWireVersusNeverSent(t *testing.T) {
	c := newCluster(t, 1)
	p, rec := newRecorded(t, c, producer.RequestTimeout(200*time.Millisecond), producer.DeliveryTimeout(700*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	release, held := holdProduceSeen(c, 0)
	defer release()
	first := sendAsync(t, ctx, p, prec(0, "a"))
	onWire(t, held) // the partition sends one batch at a time before its first ack
	queued := sendAsync(t, ctx, p, prec(0, "b"))
	start := time.Now()
	ra := first.wait(3 * time.Second)[0]
	rb := queued.wait(3 * time.Second)[0]
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Fatalf("failed after %v, before the delivery timeout", el)
	}
	if !errors.Is(ra.Err, producer.ErrDeliveryTimeout) || !errors.Is(ra.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("batch on the wire: %v; want ErrDeliveryTimeout and ErrUnknownOutcome", ra.Err)
	}
	if !errors.Is(rb.Err, producer.ErrDeliveryTimeout) || errors.Is(rb.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("batch never sent: %v; want a clean ErrDeliveryTimeout", rb.Err)
	}
	var pe *errors.PartitionError
	if !errors.As(rb.Err, &pe) || pe.Topic != topic || pe.Partition != 0 {
		t.Fatalf("error %v carries no partition", rb.Err)
	}
	// Once the last attempt of "a" times out, nothing can resolve its
	// sequences: the producer bumps its epoch (a late acknowledgement of
	// that attempt would have resolved them instead).
	eventually(t, time.Second, "no bump after a maybe-written batch expired", func() bool { return p.Bumps() == 1 })
	pc := sendAsync(t, ctx, p, prec(0, "c"))
	release()
	mustOK(t, pc.wait(5*time.Second))
	if p.Bumps() != 1 || p.ProducerID().Epoch != 1 {
		t.Fatalf("%d bumps, identity %v", p.Bumps(), p.ProducerID())
	}
	// "a" may be in the log (once: its resends were deduplicated), "b"
	// never, "c" once.
	got := values(partitionLog(t, c, 0))
	if !(len(got) == 1 && got[0] == "c") && !(len(got) == 2 && got[0] == "a" && got[1] == "c") {
		t.Fatalf("log %q", got)
	}
	// OnOutcome saw the batch that was on the wire fail, maybe written;
	// the one never sent is the I/O layer's alone.
	os := rec.Outcomes()
	if kinds(os) != "Failed" || !os[0].(producer.Failed).MaybeWritten || !errors.Is(os[0].(producer.Failed).Err, producer.ErrDeliveryTimeout) {
		t.Fatalf("outcomes %s %+v", kinds(os), os)
	}
}

// Errors that stop the producer for good: the batch that met it and every
// pending record fail with ErrProducerFatal (wrapping the code); Produce
// then returns it; records already acknowledged stay acknowledged.
func TestFatalErrorsFailEverythingPending(t *testing.T) {
	codes := []*kerr.Error{kerr.ProducerFenced, kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.UnsupportedVersion, kerr.UnsupportedForMessageFormat}
	for _, code := range codes {
		t.Run(code.Message, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			p, _ := newRecorded(t, c, producer.Linger(time.Minute))
			ctx := testCtx(t, 10*time.Second)
			// The first request (one batch per partition, sent by a
			// flush) is held while more records queue behind it, then
			// answered: partition 0 with the fatal code, the others
			// acknowledged.
			c.Fault(produceFault(0, code))
			release, held := holdProduceSeen(c, 0)
			defer release()
			first := sendAsync(t, ctx, p, prec(0, "a0"), prec(1, "b0"), prec(2, "c0"))
			go p.Flush(ctx)
			onWire(t, held)
			rest := sendAsync(t, ctx, p, prec(0, "a1"), prec(1, "b1"), prec(2, "c1"), prec(0, "a2"))
			release()
			r1 := first.wait(5 * time.Second)
			r2 := rest.wait(5 * time.Second)
			if !errors.Is(r1[0].Err, producer.ErrProducerFatal) || !errors.Is(r1[0].Err, code) {
				t.Fatalf("batch that met the error: %v", r1[0].Err)
			}
			mustOK(t, r1[1:])
			for _, r := range r2 {
				if !errors.Is(r.Err, producer.ErrProducerFatal) || !errors.Is(r.Err, code) {
					t.Fatalf("pending record %s: %v", r.Record.Value, r.Err)
				}
			}
			err = p.Produce(ctx, prec(1, "late"), nil)
			if !errors.Is(err, producer.ErrProducerFatal) || !errors.Is(err, code) {
				t.Fatalf("Produce after a fatal error: %v", err)
			}
			if _, err := p.ProduceSync(ctx, prec(2, "late")); !errors.Is(err, producer.ErrProducerFatal) {
				t.Fatalf("ProduceSync after a fatal error: %v", err)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatalf("Flush after a fatal error: %v", err)
			}
			wantLog(t, c, 0, nil)
			wantLog(t, c, 1, []string{"b0"})
			wantLog(t, c, 2, []string{"c0"})
		})
	}
}

// A fatal InitProducerId answer (not authorized) fails what waits for the
// producer ID.
func TestFatalInitProducerID(t *testing.T) {
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ClusterAuthorizationFailed, Count: -1})
	p, _ := newRecorded(t, c)
	ctx := testCtx(t, 10*time.Second)
	// Depending on which comes first, the record is refused by Produce
	// or fails in its report.
	var got error
	done := make(chan struct{})
	if err := p.Produce(ctx, prec(0, "x"), func(r producer.Result) { got = r.Err; close(done) }); err != nil {
		got = err
	} else {
		<-done
	}
	if !errors.Is(got, producer.ErrProducerFatal) || !errors.Is(got, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("record: %v", got)
	}
	if err := p.Produce(ctx, prec(0, "y"), nil); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("Produce: %v", err)
	}
}

// A batch that cannot be encoded (its records' timestamps are too far apart
// for a batch's delta) fails alone and is reported once; the batch of
// another partition picked for the same request is sent and acknowledged
// once.
func TestUnencodableBatchFailsAlone(t *testing.T) {
	c := newCluster(t, 6)
	a, b := int32(-1), int32(-1)
	for x := int32(0); x < 6 && b < 0; x++ {
		for y := x + 1; y < 6; y++ {
			if c.LeaderFor(topic, x) == c.LeaderFor(topic, y) {
				a, b = x, y
				break
			}
		}
	}
	if b < 0 {
		t.Fatal("no two partitions share a leader")
	}
	for _, okFirst := range []bool{false, true} {
		p := newProducer(t, c, producer.Linger(50*time.Millisecond))
		ctx := testCtx(t, 10*time.Second)
		far := []*producer.Record{
			{Topic: topic, Partition: a, ExplicitPartition: true, Value: []byte("past"), Timestamp: time.UnixMilli(-5e18)},
			{Topic: topic, Partition: a, ExplicitPartition: true, Value: []byte("future"), Timestamp: time.UnixMilli(5e18)},
		}
		ok := &producer.Record{Topic: topic, Partition: b, ExplicitPartition: true, Value: []byte("ok"), Timestamp: time.Now()}
		// The unencodable batch first in one round, last in the other.
		rs := append(far, ok)
		if okFirst {
			rs = []*producer.Record{ok, far[0], far[1]}
		}
		res := sendAsync(t, ctx, p, rs...).wait(5 * time.Second)
		for _, r := range res {
			switch string(r.Record.Value) {
			case "ok":
				if r.Err != nil {
					t.Fatalf("the encodable batch failed: %v", r.Err)
				}
			default:
				if r.Err == nil {
					t.Fatalf("record %s with an unencodable timestamp was acknowledged", r.Record.Value)
				}
				t.Logf("%s: %v", r.Record.Value, r.Err)
			}
		}
		time.Sleep(50 * time.Millisecond) // a second report would come now
	}
	wantLog(t, c, b, []string{"ok", "ok"})
}
