package producer_test

// The public API under misuse, concurrency and lifecycle.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// ProduceSync honours its context: when the context ends while the
// records are held by the broker, it returns (the doc: "Flush, ProduceSync
// or CommitTransaction called from a callback return only when their
// context ends").
func TestProduceSyncHonoursContext(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	ctx := testCtx(t, 15*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "first")))
	release := holdProduce(c, 0)
	defer release()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.ProduceSync(short, prec(0, "held"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errors.ErrUnknownOutcome) {
			t.Fatalf("ProduceSync of a held record: %v; want DeadlineExceeded with ErrUnknownOutcome", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ProduceSync still blocked 3s after its 200ms context ended")
	}
}

// ProduceSync called from a delivery callback returns when its context
// ends (documented), instead of deadlocking the callback goroutine.
func TestProduceSyncFromCallback(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	ctx := testCtx(t, 15*time.Second)
	inner := make(chan error, 1)
	if err := p.Produce(ctx, prec(0, "outer"), func(res producer.Result) {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := p.ProduceSync(short, prec(0, "inner"))
		inner <- err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inner:
		// Its record's report can only run after this callback.
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ProduceSync from a callback: %v; want DeadlineExceeded", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ProduceSync from a callback still blocked 3s after its 200ms context ended: the callback goroutine is deadlocked")
	}
}

// badPartitioner returns a partition outside [0, n).
type badPartitioner struct{ part int32 }

func (b badPartitioner) Partition(*producer.Record, int32) int32 { return b.part }
func (badPartitioner) BatchClosed(string, int32)                 {}

// A partitioner that breaks its contract (a partition outside [0, n)) makes
// Produce return a *errors.PartitionError naming the partition it returned,
// matching ErrPartitionerOutOfRange and errors.ErrInvalidArgument; it
// neither panics nor queues the record on a partition that does not exist
// (nor on another), and the record's callback never runs.
func TestPartitionerOutOfRange(t *testing.T) {
	for _, part := range []int32{-1, 2} {
		c := newCluster(t, 2)
		p := newProducer(t, c, producer.WithPartitioner(badPartitioner{part}), producer.DeliveryTimeout(2*time.Second), producer.RequestTimeout(time.Second))
		ctx := testCtx(t, 10*time.Second)
		var perr error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("partition %d: Produce panicked: %v", part, r)
				}
			}()
			perr = p.Produce(ctx, &producer.Record{Topic: topic, Value: []byte("x")}, func(producer.Result) {
				t.Errorf("partition %d of 2: the refused record was reported", part)
			})
		}()
		pe, ok := errors.AsType[*errors.PartitionError](perr)
		if !ok || pe.Partition != part || !errors.Is(perr, producer.ErrPartitionerOutOfRange) || !errors.Is(perr, errors.ErrInvalidArgument) {
			t.Fatalf("partition %d of 2: Produce returned %v; want a *PartitionError for it matching ErrPartitionerOutOfRange", part, perr)
		}
		if want := fmt.Sprintf("returned %d for a topic of 2 partitions", part); !strings.Contains(perr.Error(), want) {
			t.Fatalf("partition %d of 2: %q does not say %q", part, perr, want)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A non-idempotent producer whose multi-record batch is refused as too
// large splits it, as the idempotent one does (and the Java client does for
// both): every record is delivered.
func TestPlainTooLargeSplits(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.DisableIdempotence(), producer.RequiredAcks(producer.AcksLeader), producer.Linger(time.Second))
	ctx := testCtx(t, 10*time.Second)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.MessageTooLarge, Count: -1,
		When: func(kr kmsg.Request) bool {
			b, ok := batchOf(kr.(*kmsg.ProduceRequest), 0)
			return ok && b.NumRecords > 3
		}})
	res := sendAll(t, ctx, p, precs(0, "v", 0, 10)...)
	mustOK(t, res)
	for i, r := range res {
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d", i, r.Offset)
		}
	}
	// A single record too large fails alone, with the broker's error.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.MessageTooLarge})
	res = sendAll(t, ctx, p, prec(0, "huge"))
	if !errors.Is(res[0].Err, kerr.MessageTooLarge) || errors.Is(res[0].Err, errors.ErrUnknownOutcome) {
		t.Fatalf("single record too large: %v", res[0].Err)
	}
	mustOK(t, sendAll(t, ctx, p, prec(0, "after")))
	wantLog(t, c, 0, append(vals("v", 0, 10), "after"))
}

// Produce, Flush and Close concurrently: every Produce either returns an
// error (and its callback never runs) or its callback runs exactly once by
// the time Close returns; no goroutine is left.
func TestProduceFlushCloseRace(t *testing.T) {
	for round := range 5 {
		c := newCluster(t, 3)
		p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.MaxBufferedBytes(8<<10), producer.BatchMaxBytes(2<<10), producer.Linger(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t, 20*time.Second)
		var accepted, called, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					var once atomic.Bool
					r := &producer.Record{Topic: topic, Value: []byte(fmt.Sprintf("g%d-%d-%0200d", g, i, 0))}
					if i%3 == 0 {
						r.Key = []byte{byte(i)}
					}
					err := p.Produce(ctx, r, func(producer.Result) {
						if !once.CompareAndSwap(false, true) {
							t.Errorf("callback ran twice")
						}
						called.Add(1)
					})
					if err != nil {
						refused.Add(1)
						if !errors.Is(err, errors.ErrClosed) {
							t.Errorf("Produce: %v", err)
						}
						return
					}
					accepted.Add(1)
					if i%50 == 0 {
						fctx, cancel := context.WithTimeout(ctx, time.Millisecond)
						p.Flush(fctx)
						cancel()
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+round*15) * time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, time.Duration(round)*5*time.Millisecond)
		p.Close(cctx)
		cancel()
		n := called.Load()
		wg.Wait()
		if a := accepted.Load(); n != a || called.Load() != a {
			t.Fatalf("round %d: %d accepted, %d callbacks when Close returned (%d now)", round, a, n, called.Load())
		}
		noLeak(t)
	}
}

// Unreachable seed brokers: Produce and Close respect their contexts, and
// no goroutine is left.
func TestUnreachableSeeds(t *testing.T) {
	noLeak(t)
	p, err := producer.New(producer.SeedBrokers("127.0.0.1:1"), producer.RequestTimeout(time.Second), producer.DeliveryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = p.Produce(ctx, &producer.Record{Topic: topic, Value: []byte("x")}, func(producer.Result) { t.Error("callback of a refused record") })
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("Produce: %v after %v", err, time.Since(start))
	}
	_, err = p.ProduceSync(ctx, &producer.Record{Topic: topic, Value: []byte("x")})
	if err == nil {
		t.Fatal("ProduceSync succeeded")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer ccancel()
	start = time.Now()
	p.Close(cctx)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	noLeak(t)
}

// A topic the broker refuses for good (TOPIC_AUTHORIZATION_FAILED,
// INVALID_TOPIC_EXCEPTION) fails Produce with that error, as the Java
// client does, instead of blocking until the context ends (forever with
// context.Background) and returning only the context's error.
func TestProduceToRefusedTopic(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.TopicAuthorizationFailed, kerr.InvalidTopicException} {
		t.Run(code.Message, func(t *testing.T) {
			c := newCluster(t, 1)
			const refused = "refused"
			c.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := kr.(*kmsg.MetadataRequest)
				if !slices.ContainsFunc(req.Topics, func(t kmsg.MetadataRequestTopic) bool { return t.Topic != nil && *t.Topic == refused }) {
					return nil, nil, false
				}
				resp := req.ResponseKind().(*kmsg.MetadataResponse)
				for i, addr := range c.ListenAddrs() {
					host, port, _ := net.SplitHostPort(addr)
					pn, _ := strconv.Atoi(port)
					b := kmsg.NewMetadataResponseBroker()
					b.NodeID, b.Host, b.Port = int32(i), host, int32(pn)
					resp.Brokers = append(resp.Brokers, b)
				}
				resp.ControllerID = 0
				for _, rt := range req.Topics {
					st := kmsg.NewMetadataResponseTopic()
					st.Topic = rt.Topic
					st.ErrorCode = code.Code
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			p := newProducer(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			err := p.Produce(ctx, &producer.Record{Topic: refused, Value: []byte("x")}, nil)
			if !errors.Is(err, code) {
				t.Fatalf("Produce to a %s topic after %v: %v", code.Message, time.Since(start).Round(time.Millisecond), err)
			}
		})
	}
}

// A Linger longer than the DeliveryTimeout leaves every batch that does not
// fill up to expire unsent: New refuses it (as Java refuses
// delivery.timeout.ms < linger.ms + request.timeout.ms).
func TestLingerBeyondDeliveryTimeout(t *testing.T) {
	c := newCluster(t, 1)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.RequestTimeout(500*time.Millisecond),
		producer.DeliveryTimeout(time.Second), producer.Linger(5*time.Second))
	if err == nil {
		ctx := testCtx(t, 10*time.Second)
		pr := sendAsync(t, ctx, p, prec(0, "x"))
		res := pr.wait(8 * time.Second)
		p.Close(ctx)
		t.Fatalf("New accepted Linger 5s with DeliveryTimeout 1s; the record's report: %v", res[0].Err)
	}
}
