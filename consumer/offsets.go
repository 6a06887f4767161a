package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/seek"
)

// offsetRequests batches the machines' ActValidate and ActListOffsets
// actions into one OffsetForLeaderEpoch and one ListOffsets request per
// leader, sends them, and steps the answers back. Each leader has at most
// one request of each kind in flight, and what its partitions ask for
// meanwhile waits for the next; leaders do not wait for each other (a
// leader that does not answer holds only its own partitions, until the
// request timeout). The requests run on goroutines owned by the Consumer,
// so nothing outlives Close.
type offsetRequests struct {
	c        *Consumer
	wake     chan struct{}
	validate map[int32]map[TopicPartition]seek.ValidateRequest // guarded by Consumer.mu
	list     map[int32]map[TopicPartition]seek.ListRequest     // guarded by Consumer.mu
	// busyValidate and busyList are the leaders with a request of that
	// kind in flight (guarded by Consumer.mu).
	busyValidate, busyList map[int32]bool
}

func newOffsetRequests(c *Consumer) *offsetRequests {
	return &offsetRequests{
		c:            c,
		wake:         make(chan struct{}, 1),
		validate:     map[int32]map[TopicPartition]seek.ValidateRequest{},
		list:         map[int32]map[TopicPartition]seek.ListRequest{},
		busyValidate: map[int32]bool{},
		busyList:     map[int32]bool{},
	}
}

func (o *offsetRequests) addValidate(tp TopicPartition, v seek.ValidateRequest) {
	m := o.validate[v.Leader]
	if m == nil {
		m = map[TopicPartition]seek.ValidateRequest{}
		o.validate[v.Leader] = m
	}
	m[tp] = v
	o.signal()
}

func (o *offsetRequests) addList(tp TopicPartition, l seek.ListRequest) {
	m := o.list[l.Leader]
	if m == nil {
		m = map[TopicPartition]seek.ListRequest{}
		o.list[l.Leader] = m
	}
	m[tp] = l
	o.signal()
}

func (o *offsetRequests) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *offsetRequests) loop() {
	c := o.c
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-o.wake:
		}
		c.mu.Lock()
		// Started while this loop runs (it is one of the Consumer's
		// goroutines), so Close waits for them too.
		startIdle(c, o.validate, o.busyValidate, o.sendValidate)
		startIdle(c, o.list, o.busyList, o.sendList)
		c.mu.Unlock()
	}
}

// startIdle sends what waits in pending to each leader that has no request
// of that kind in flight (busy), on a goroutine of c. c.mu must be held.
func startIdle[R any](c *Consumer, pending map[int32]map[TopicPartition]R, busy map[int32]bool, send func(int32, map[TopicPartition]R)) {
	for broker, ps := range pending {
		if !busy[broker] {
			delete(pending, broker)
			busy[broker] = true
			c.goFn(func() { send(broker, ps) })
		}
	}
}

// doneLocked ends broker's request of one kind: what its partitions asked
// for meanwhile is sent next.
func (o *offsetRequests) doneLocked(busy map[int32]bool, broker int32, waiting int) {
	delete(busy, broker)
	if waiting > 0 {
		o.signal()
	}
}

// topicSlot returns the index of topic's entry in *topics (idx maps names to
// indexes), appending the one mk makes when there is none yet.
func topicSlot[T any](idx map[string]int, topics *[]T, topic string, mk func() T) int {
	i, ok := idx[topic]
	if !ok {
		*topics = append(*topics, mk())
		i = len(*topics) - 1
		idx[topic] = i
	}
	return i
}

func (o *offsetRequests) sendValidate(broker int32, ps map[TopicPartition]seek.ValidateRequest) {
	c := o.c
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	for tp, v := range ps {
		i := topicSlot(idx, &req.Topics, tp.Topic, func() kmsg.OffsetForLeaderEpochRequestTopic {
			t := kmsg.NewOffsetForLeaderEpochRequestTopic()
			t.Topic = tp.Topic
			return t
		})
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition = tp.Partition
		rp.CurrentLeaderEpoch = v.CurrentLeaderEpoch
		rp.LeaderEpoch = v.Epoch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.requestTimeout)
	resp, err := req.RequestWith(ctx, c.cl.Broker(int(broker)))
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() { o.doneLocked(o.busyValidate, broker, len(o.validate[broker])) }()
	answered := map[TopicPartition]bool{}
	leaderAnswered(c, "validate", broker, ps, err)
	if err == nil {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				stepAnswerLocked(c, ps, answered, TopicPartition{t.Topic, rp.Partition}, func(v seek.ValidateRequest) seek.Event {
					return seek.EpochEndOffset{Req: v.Req, Code: seek.Code(rp.ErrorCode), End: seek.EpochEnd{Epoch: rp.LeaderEpoch, EndOffset: rp.EndOffset}}
				})
			}
		}
	}
	code := failureCode(err)
	stepUnansweredLocked(c, ps, answered, func(v seek.ValidateRequest) seek.Event {
		return seek.EpochEndOffset{Req: v.Req, Code: code, End: seek.EpochEnd{Epoch: seek.NoEpoch, EndOffset: seek.NoOffset}}
	})
}

func (o *offsetRequests) sendList(broker int32, ps map[TopicPartition]seek.ListRequest) {
	c := o.c
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if c.cfg.readCommitted {
		req.IsolationLevel = 1
	}
	idx := map[string]int{}
	for tp, l := range ps {
		i := topicSlot(idx, &req.Topics, tp.Topic, func() kmsg.ListOffsetsRequestTopic {
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = tp.Topic
			return t
		})
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = tp.Partition
		rp.CurrentLeaderEpoch = l.CurrentLeaderEpoch
		switch l.Spec {
		case seek.ListEarliest:
			rp.Timestamp = -2
		case seek.ListLatest:
			rp.Timestamp = -1
		default:
			rp.Timestamp = l.Timestamp
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.requestTimeout)
	resp, err := req.RequestWith(ctx, c.cl.Broker(int(broker)))
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() { o.doneLocked(o.busyList, broker, len(o.list[broker])) }()
	answered := map[TopicPartition]bool{}
	leaderAnswered(c, "list offsets", broker, ps, err)
	if err == nil {
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				stepAnswerLocked(c, ps, answered, TopicPartition{t.Topic, rp.Partition}, func(l seek.ListRequest) seek.Event {
					return seek.ListedOffset{Req: l.Req, Code: seek.Code(rp.ErrorCode), Offset: rp.Offset, Epoch: rp.LeaderEpoch}
				})
			}
		}
	}
	code := failureCode(err)
	stepUnansweredLocked(c, ps, answered, func(l seek.ListRequest) seek.Event {
		return seek.ListedOffset{Req: l.Req, Code: code, Offset: seek.NoOffset, Epoch: seek.NoEpoch}
	})
}

// leaderAnswered applies the outcome of a request sent to broker for the
// partitions of ps (err: the request's error) to their runs of requests
// their leader left unanswered (leaderAnsweredLocked): an answer, whatever
// its codes, ends the run of each; a failure with no answer (not a Kafka
// code, the consumer not closing) starts or extends it for those whose
// leader broker still is.
func leaderAnswered[T any](c *Consumer, op string, broker int32, ps map[TopicPartition]T, err error) {
	if c.ctx.Err() != nil {
		return // closing
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		err = nil // answered, with a code for the whole request
	}
	now := time.Now()
	for tp := range ps {
		if p := c.parts[tp]; p != nil && (err == nil || p.m.Leader().ID == broker) {
			c.leaderAnsweredLocked(p, op, broker, err, now)
		}
	}
}

// stepAnswerLocked steps the answer for tp, if tp was asked in ps and not
// answered yet (a duplicate entry in an answer is ignored), into tp's
// machine, and marks it answered.
func stepAnswerLocked[T any](c *Consumer, ps map[TopicPartition]T, answered map[TopicPartition]bool, tp TopicPartition, event func(T) seek.Event) {
	v, ok := ps[tp]
	if !ok || answered[tp] {
		return
	}
	answered[tp] = true
	if p := c.parts[tp]; p != nil {
		c.stepLocked(p, event(v))
	}
}

// stepUnansweredLocked steps a failure into every partition of ps that the
// answer left out (or all of them when the request failed): the machine
// retries them.
func stepUnansweredLocked[T any](c *Consumer, ps map[TopicPartition]T, answered map[TopicPartition]bool, event func(T) seek.Event) {
	for tp, v := range ps {
		if answered[tp] {
			continue
		}
		if p := c.parts[tp]; p != nil {
			c.stepLocked(p, event(v))
		}
	}
}

// failureCode is the code stepped for a partition a request did not answer:
// the request's own error code, or a network error (retried).
func failureCode(err error) seek.Code {
	if ke, ok := err.(*kerr.Error); ok {
		return seek.Code(ke.Code)
	}
	if err != nil {
		return seek.CodeNetworkException
	}
	return seek.CodeRequestTimedOut // answered, but without this partition
}
