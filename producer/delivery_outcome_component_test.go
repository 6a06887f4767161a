package producer_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// A non-idempotent producer whose batch is answered with an error a broker
// sends after appending (REQUEST_TIMED_OUT: kfake appends, then answers it)
// until the delivery deadline passes: the record is in the log, so its
// report must say the outcome is unknown (ErrUnknownOutcome), never a
// clean failure.
func TestPlainAppendedThenErrorIsUnknownOutcome(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			p := newProducer(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence(),
				producer.RequestTimeout(100*time.Millisecond), producer.DeliveryTimeout(300*time.Millisecond))
			ctx := testCtx(t, 10*time.Second)
			f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: code, Count: -1})
			res := sendAsync(t, ctx, p, prec(0, "a")).wait(5 * time.Second)
			f.Remove()
			if res[0].Err == nil {
				t.Fatalf("acknowledged: %+v", res[0])
			}
			if n := endOffset(t, c, 0, false); n < 1 {
				t.Fatalf("log end %d: kfake did not append", n)
			}
			if !errors.Is(res[0].Err, errors.ErrUnknownOutcome) {
				t.Fatalf("record is in the log, but its report %v does not say ErrUnknownOutcome", res[0].Err)
			}
		})
	}
}

// A producer that must take a new producer ID (INVALID_PRODUCER_EPOCH) and
// is then refused one for good (CLUSTER_AUTHORIZATION_FAILED: fatal) fails
// what waits for that identity with ErrProducerFatal at once, like every
// other pending record, not at its delivery deadline.
func TestFatalNewProducerIDFailsWaitingBatches(t *testing.T) {
	c := newCluster(t, 1)
	p, _ := newRecorded(t, c, producer.RequestTimeout(time.Second), producer.DeliveryTimeout(4*time.Second))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ClusterAuthorizationFailed, Count: -1})
	c.Fault(produceFault(0, kerr.InvalidProducerEpoch))
	r := sendAsync(t, ctx, p, prec(0, "b")).wait(10 * time.Second)[0]
	if err := p.Produce(ctx, prec(0, "c"), nil); !errors.Is(err, producer.ErrProducerFatal) {
		t.Fatalf("Produce after the fatal InitProducerId: %v", err)
	}
	// Reported at its delivery deadline it would say ErrDeliveryTimeout.
	if !errors.Is(r.Err, producer.ErrProducerFatal) {
		t.Fatalf("pending record reported with %v; want ErrProducerFatal", r.Err)
	}
}

// A non-idempotent producer's batch waiting for its retry when the
// partition loses its leader (metadata names none) must still fail at its
// delivery deadline.
func TestPlainRetryExpiresWithoutLeader(t *testing.T) {
	c := newCluster(t, 1)
	ctx := testCtx(t, 10*time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	base, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var leaderless atomic.Bool
	c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !leaderless.Load() {
			return nil, nil, false
		}
		resp := *base
		resp.Version = kr.GetVersion()
		resp.Topics = nil
		for _, t := range base.Topics {
			t.Partitions = slices.Clone(t.Partitions)
			for i := range t.Partitions {
				t.Partitions[i].Leader = -1
				t.Partitions[i].LeaderEpoch++
			}
			resp.Topics = append(resp.Topics, t)
		}
		return &resp, nil, true
	})
	p := newProducer(t, c, producer.RequiredAcks(producer.AcksLeader), producer.DisableIdempotence(),
		producer.RequestTimeout(100*time.Millisecond), producer.DeliveryTimeout(500*time.Millisecond),
		producer.MetadataMaxAge(100*time.Millisecond))
	mustOK(t, sendAll(t, ctx, p, prec(0, "a")))
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotLeaderForPartition, Count: -1, When: func(kmsg.Request) bool {
		leaderless.Store(true)
		return true
	}})
	pr := sendAsync(t, ctx, p, prec(0, "b"))
	r := pr.wait(4 * time.Second)[0]
	// NOT_LEADER_OR_FOLLOWER may follow an append (KAFKA-13574): the
	// outcome is unknown.
	if !errors.Is(r.Err, producer.ErrDeliveryTimeout) || !errors.Is(r.Err, errors.ErrUnknownOutcome) {
		t.Fatalf("report %+v; want ErrDeliveryTimeout with ErrUnknownOutcome", r)
	}
}
