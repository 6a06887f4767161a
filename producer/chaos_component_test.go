package producer_test

// A randomized fault-injection test of the idempotent producer's I/O on
// kfake: numbered records to a few partitions, up to five requests in flight
// per broker, while a proxy in front of kfake's Produce handling drops
// connections before and after the append, delays and reorders answers
// across brokers, answers refusals (NOT_LEADER_OR_FOLLOWER,
// OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, MESSAGE_TOO_LARGE)
// before the append and errors after it (REQUEST_TIMED_OUT,
// NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND), turns
// deduplicated answers into DUPLICATE_SEQUENCE_NUMBER, and moves leaders.
// The partition logs are then read back and checked against every report.
//
// The proxy never lies about the log: a batch is in the log exactly when
// kfake appended it (the proxy forwards the request to kfake on its own
// connection to the same broker, then answers the producer as it chose).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	kerrors "github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// chaosSideMarker marks the proxy's own Produce requests (TimeoutMillis), so
// that the control lets kfake handle them.
const chaosSideMarker = 7777

type chaosIdent struct {
	part  int32
	pid   int64
	epoch int16
	seq   int32
	n     int32
}

// chaosProxy answers every Produce request of the producer: it decides
// faults with its own seeded generator, forwards what it lets through to
// kfake on a side client, and answers.
type chaosProxy struct {
	t    *testing.T
	c    *kfake.Cluster
	side *kgo.Client

	mu       sync.Mutex
	rng      *rand.Rand
	appended map[chaosIdent]int64 // identities kfake acknowledged (appended or deduplicated), with their offset
	counts   map[string]int
	longWait time.Duration
	stopped  bool
	// stallUntil: a broker that answers nothing until then (longer than a
	// request timeout, up to past the delivery timeout).
	stallUntil map[int32]time.Time
	stallMax   time.Duration
	scale      float64 // multiplies every fault's probability
}

func (x *chaosProxy) pct(p float64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rng.Float64()*100 < p*x.scale
}

func (x *chaosProxy) dur(max time.Duration) time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	return time.Duration(x.rng.Int64N(int64(max)))
}

func (x *chaosProxy) count(what string) {
	x.mu.Lock()
	x.counts[what]++
	x.mu.Unlock()
}

var errChaosDrop = errors.New("chaos: connection dropped")

func (x *chaosProxy) install() {
	x.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		x.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if req.TimeoutMillis == chaosSideMarker {
			return nil, nil, false // the proxy's own request: kfake handles it
		}
		x.mu.Lock()
		stopped := x.stopped
		x.mu.Unlock()
		if stopped {
			return nil, nil, false
		}
		node := x.c.CurrentNode()
		var (
			resp    *kmsg.ProduceResponse
			drop    bool
			sideErr error
		)
		x.c.SleepControl(func() {
			resp, drop, sideErr = x.handle(node, req)
		})
		if sideErr != nil {
			// The side request failed (cluster closing): answer nothing.
			return nil, errChaosDrop, true
		}
		if drop {
			return nil, errChaosDrop, true
		}
		return resp, nil, true
	})
}

// handle decides the request's fate; it runs while the producer's
// connection sleeps (kfake serves the side client meanwhile).
func (x *chaosProxy) handle(node int32, req *kmsg.ProduceRequest) (*kmsg.ProduceResponse, bool, error) {
	x.mu.Lock()
	if x.stallMax > 0 && x.rng.Float64() < 0.01 {
		d := x.stallMax/2 + time.Duration(x.rng.Int64N(int64(x.stallMax/2)))
		x.stallUntil[node] = time.Now().Add(d)
		x.counts["stall"]++
	}
	until := x.stallUntil[node]
	x.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
	switch {
	case x.pct(15):
		time.Sleep(x.dur(20 * time.Millisecond))
	case x.pct(1):
		x.count("long-delay")
		time.Sleep(x.longWait) // past the producer's request timeout
	}
	if x.pct(2) {
		x.count("drop-before")
		return nil, true, nil
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	side := kmsg.NewPtrProduceRequest()
	side.Acks = req.Acks
	side.TimeoutMillis = chaosSideMarker
	side.TransactionID = req.TransactionID
	type local struct {
		topic   string
		topicID [16]byte
		part    kmsg.ProduceResponseTopicPartition
	}
	var answered []local
	idents := map[int32]chaosIdent{}
	for _, rt := range req.Topics {
		st := kmsg.NewProduceRequestTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			var b kmsg.RecordBatch
			if err := b.ReadFrom(rp.Records); err == nil {
				idents[rp.Partition] = chaosIdent{rp.Partition, b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.NumRecords}
			}
			code := int16(0)
			var logStart int64 = -1
			switch {
			case x.pct(3):
				code = kerr.NotLeaderForPartition.Code
			case x.pct(0.7):
				code = kerr.OutOfOrderSequenceNumber.Code
			case x.pct(0.5):
				code = kerr.UnknownProducerID.Code
				if x.pct(50) {
					logStart = 0
				}
			case x.pct(1.5):
				code = kerr.MessageTooLarge.Code
			}
			if code != 0 {
				x.count("pre-" + kerr.ErrorForCode(code).(*kerr.Error).Message)
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				sp.BaseOffset = -1
				sp.LogStartOffset = logStart
				answered = append(answered, local{rt.Topic, rt.TopicID, sp})
				continue
			}
			st.Partitions = append(st.Partitions, rp)
		}
		if len(st.Partitions) > 0 {
			side.Topics = append(side.Topics, st)
		}
	}
	if len(side.Topics) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sresp, err := side.RequestWith(ctx, x.side.Broker(int(node)))
		cancel()
		if err != nil {
			return nil, false, err
		}
		resp.Topics = sresp.Topics
		resp.Brokers = sresp.Brokers
		resp.ThrottleMillis = sresp.ThrottleMillis
	}
	// Record what kfake took, before deciding what to tell the producer.
	for ti := range resp.Topics {
		for pi := range resp.Topics[ti].Partitions {
			sp := &resp.Topics[ti].Partitions[pi]
			id, ok := idents[sp.Partition]
			if !ok || sp.ErrorCode != 0 {
				continue
			}
			x.mu.Lock()
			prev, seen := x.appended[id]
			if !seen {
				x.appended[id] = sp.BaseOffset
			}
			x.mu.Unlock()
			switch {
			case seen && prev == sp.BaseOffset && x.pct(50):
				x.count("dup-seq")
				sp.ErrorCode = kerr.DuplicateSequenceNumber.Code
				sp.BaseOffset = -1
			case x.pct(3):
				x.count("post-timeout")
				sp.ErrorCode, sp.BaseOffset = kerr.RequestTimedOut.Code, -1
			case x.pct(2):
				x.count("post-notleader")
				sp.ErrorCode, sp.BaseOffset = kerr.NotLeaderForPartition.Code, -1
			case x.pct(1):
				x.count("post-nerafter")
				sp.ErrorCode, sp.BaseOffset = kerr.NotEnoughReplicasAfterAppend.Code, -1
			}
		}
	}
	for _, a := range answered {
		i := slices.IndexFunc(resp.Topics, func(t kmsg.ProduceResponseTopic) bool { return t.Topic == a.topic })
		if i < 0 {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = a.topic, a.topicID
			resp.Topics = append(resp.Topics, st)
			i = len(resp.Topics) - 1
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, a.part)
	}
	if x.pct(2) {
		x.count("drop-after")
		return nil, true, nil
	}
	if x.pct(15) {
		time.Sleep(x.dur(20 * time.Millisecond)) // answers of brokers reorder
	}
	return resp, false, nil
}

func chaosSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("KEPOCH_CHAOS_SEEDS"); s != "" {
		var out []uint64
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	return []uint64{1, 2, 3}
}

func TestIdempotentChaos(t *testing.T) {
	if raceEnabled {
		t.Skip("kfake's SleepControl races under -race (see raceEnabled); scripts/test.sh runs this test without it")
	}
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runIdempotentChaos(t, seed) })
	}
}

type chaosResult struct {
	res   producer.Result
	calls int
}

func runIdempotentChaos(t *testing.T, seed uint64) {
	const parts = 5
	perPart := 1200
	if testing.Short() {
		perPart = 300
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	side, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	rng := rand.New(rand.NewPCG(seed, 0x6b65706f6368))
	requestTO := 500 * time.Millisecond
	deliveryTO := time.Duration(3+rng.IntN(6)) * time.Second
	linger := time.Duration(rng.IntN(3)) * time.Millisecond
	x := &chaosProxy{t: t, c: c, side: side, rng: rand.New(rand.NewPCG(seed, 1)), appended: map[chaosIdent]int64{},
		counts: map[string]int{}, longWait: requestTO + 200*time.Millisecond, stallUntil: map[int32]time.Time{},
		scale: 1 + 2*rng.Float64()}
	if rng.IntN(2) == 0 {
		x.stallMax = deliveryTO + time.Second
	}
	x.install()
	// Metadata that names no leader now and then, and InitProducerId
	// refused retriably.
	pick := func(pct int) func(kmsg.Request) bool {
		var mu sync.Mutex
		r := rand.New(rand.NewPCG(seed, uint64(pct)))
		return func(kmsg.Request) bool { mu.Lock(); defer mu.Unlock(); return r.IntN(100) < pct }
	}
	metaFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: -1, When: pick(5)},
		kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.CoordinatorLoadInProgress, Count: -1, When: pick(30)})
	closeEarly := rng.IntN(4) == 0

	var (
		omu      sync.Mutex
		outcomes []producer.Outcome
		lost     []producer.AckedWritesLost
	)
	p, err := producer.New(producer.SeedBrokers(c.ListenAddrs()...), producer.RetryBackoff(10*time.Millisecond),
		producer.MaxInFlight(5), producer.BatchMaxBytes(1024), producer.RequestTimeout(requestTO),
		producer.DeliveryTimeout(deliveryTO), producer.Linger(linger),
		producer.OnOutcome(func(o producer.Outcome) { omu.Lock(); outcomes = append(outcomes, o); omu.Unlock() }),
		producer.OnAckedWritesLost(func(l producer.AckedWritesLost) { omu.Lock(); lost = append(lost, l); omu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			p.Close(ctx)
			cancel()
		}
	}()

	// Leader moves while producing.
	stopMoves := make(chan struct{})
	movesDone := make(chan struct{})
	go func() {
		defer close(movesDone)
		mr := rand.New(rand.NewPCG(seed, 2))
		for {
			select {
			case <-stopMoves:
				return
			case <-time.After(time.Duration(50+mr.IntN(250)) * time.Millisecond):
			}
			part := int32(mr.IntN(parts))
			if err := c.MoveTopicPartition(topic, part, int32(mr.IntN(3))); err != nil {
				t.Errorf("move: %v", err)
				return
			}
		}
	}()

	var rmu sync.Mutex
	results := make([][]chaosResult, parts)
	for i := range results {
		results[i] = make([]chaosResult, perPart)
	}
	next := make([]int, parts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	for total := 0; total < parts*perPart; {
		part := rng.IntN(parts)
		if next[part] == perPart {
			continue
		}
		n := next[part]
		next[part]++
		total++
		r := &producer.Record{Topic: topic, Partition: int32(part), ExplicitPartition: true, Value: fmt.Appendf(nil, "p%d-%06d", part, n)}
		if err := p.Produce(ctx, r, func(res producer.Result) {
			rmu.Lock()
			results[part][n].res = res
			results[part][n].calls++
			rmu.Unlock()
		}); err != nil {
			t.Fatalf("Produce: %v", err)
		}
		if rng.IntN(50) == 0 {
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
	}
	produced := time.Now()
	var ferr error
	if closeEarly {
		// Close while requests are on the wire: every record still
		// gets one report, and one failed without "unknown outcome"
		// must not be in the log.
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		cctx, ccancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Millisecond)
		p.Close(cctx)
		ccancel()
		closed = true
	} else {
		fctx, fcancel := context.WithTimeout(context.Background(), deliveryTO+3*time.Second)
		ferr = p.Flush(fctx)
		fcancel()
	}
	flushed := time.Since(produced)
	close(stopMoves)
	<-movesDone
	metaFaults.Remove()
	x.mu.Lock()
	x.stopped = true
	counts := fmt.Sprint(x.counts)
	x.mu.Unlock()
	t.Logf("seed %d: fault scale %.1f, delivery timeout %v, linger %v, stalls up to %v, close early %v, produced in %v, flushed in %v, %d bumps; faults %s",
		seed, x.scale, deliveryTO, linger, x.stallMax, closeEarly, produced.Sub(start), flushed, p.Bumps(), counts)
	if ferr != nil {
		t.Errorf("Flush: %v after %v (delivery timeout %v): hang", ferr, flushed, deliveryTO)
	}
	if !closed {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.Close(cctx)
		ccancel()
		closed = true
	}
	noLeak(t)

	omu.Lock()
	outs := slices.Clone(outcomes)
	ls := slices.Clone(lost)
	omu.Unlock()
	if len(ls) > 0 {
		t.Errorf("acknowledged writes reported lost (kfake loses nothing): %+v", ls)
	}
	pd := map[producer.TopicPartition][]producer.PossibleDuplicate{}
	kindCount := map[string]int{}
	for _, o := range outs {
		kindCount[fmt.Sprintf("%T", o)]++
		if d, ok := o.(producer.PossibleDuplicate); ok {
			pd[d.TP] = append(pd[d.TP], d)
		}
	}
	t.Logf("outcomes %v", kindCount)

	failures := 0
	fail := func(format string, args ...any) {
		failures++
		if failures <= 30 {
			t.Errorf(format, args...)
		}
	}
	stats := map[string]int{}
	for part := range int32(parts) {
		log := partitionLog(t, c, part)
		occ := map[int][]*kgo.Record{}
		lastFirst := -1
		for _, r := range log {
			pp, ns, _ := strings.Cut(strings.TrimPrefix(string(r.Value), "p"), "-")
			n, err := strconv.Atoi(ns)
			if err != nil || pp != strconv.Itoa(int(part)) || n < 0 || n >= perPart {
				fail("partition %d offset %d: foreign value %q", part, r.Offset, r.Value)
				continue
			}
			if len(occ[n]) == 0 {
				if n <= lastFirst {
					fail("partition %d offset %d: record %d after record %d (reordered)", part, r.Offset, n, lastFirst)
				}
				lastFirst = max(lastFirst, n)
			}
			occ[n] = append(occ[n], r)
		}
		rmu.Lock()
		rs := slices.Clone(results[part])
		rmu.Unlock()
		for n, cr := range rs {
			res := cr.res
			if cr.calls != 1 {
				fail("partition %d record %d: %d reports", part, n, cr.calls)
				continue
			}
			o := occ[n]
			unknown := res.Err != nil && errors.Is(res.Err, kerrors.ErrUnknownOutcome)
			_, dupOK := res.Recovery.(producer.PossibleDuplicate)
			switch {
			case res.Err == nil:
				stats["acked"]++
				if len(o) == 0 {
					fail("partition %d record %d acknowledged at %d, not in the log", part, n, res.Offset)
				}
				if res.Offset >= 0 && !slices.ContainsFunc(o, func(r *kgo.Record) bool { return r.Offset == res.Offset }) {
					var at []int64
					for _, r := range o {
						at = append(at, r.Offset)
					}
					fail("partition %d record %d acknowledged at offset %d, in the log at %v", part, n, res.Offset, at)
				}
			case unknown:
				stats["unknown"]++
			default:
				stats["failed"]++
				if len(o) > 0 {
					fail("partition %d record %d failed (%v, recovery %T) without unknown outcome, yet in the log at %d (%d/%d)",
						part, n, res.Err, res.Recovery, o[0].Offset, o[0].ProducerID, o[0].ProducerEpoch)
				}
			}
			if len(o) > 1 {
				stats["duplicated"]++
				if !dupOK {
					fail("partition %d record %d in the log %d times (first at %d), report err=%v recovery=%T", part, n, len(o), o[0].Offset, res.Err, res.Recovery)
					continue
				}
				// OnOutcome's PossibleDuplicates lead from the first copy's
				// identity to the last copy's (several rewrites may lie
				// between them: one outcome leaves the first identity, one
				// reaches the last).
				from, to := false, false
				last := o[len(o)-1]
				for _, d := range pd[producer.TopicPartition{Topic: topic, Partition: part}] {
					from = from || d.From.Producer.ID == o[0].ProducerID && d.From.Producer.Epoch == o[0].ProducerEpoch
					to = to || d.To.Producer.ID == last.ProducerID && d.To.Producer.Epoch == last.ProducerEpoch
				}
				if !from || !to {
					fail("partition %d record %d duplicated (%d/%d then %d/%d) without a matching PossibleDuplicate outcome",
						part, n, o[0].ProducerID, o[0].ProducerEpoch, last.ProducerID, last.ProducerEpoch)
				}
			}
		}
	}
	t.Logf("records %v", stats)
	if failures > 30 {
		t.Errorf("... %d failures in all", failures)
	}
}
