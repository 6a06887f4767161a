package consumer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/metadata"
)

// DebugPartition describes a partition's machine and fetch state (tests).
func DebugPartition(c *Consumer, topic string, partition int32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return "unassigned"
	}
	return fmt.Sprintf("%s fetch=%+v sent=%v replica=%+v buffered=%v", p.m.String(), p.fetch, p.sent, p.replica, p.buf != nil)
}

// GCReserveHeld returns the bytes of GC reserve c holds (GCReserve).
func GCReserveHeld(c *Consumer) int { return c.reserve.Size() }

// BufferedBytes returns the bytes of fetch answers buffered for Poll now,
// and the most there ever were.
func BufferedBytes(c *Consumer) (now, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buffered, c.peakBuffered
}

// DebugConsumer describes the consumer's buffer and every partition (tests).
func DebugConsumer(c *Consumer) string {
	c.mu.Lock()
	s := fmt.Sprintf("buffered=%d reserved=%d full=%v ready=%d", c.buffered, c.reserved, c.bufferFull, len(c.ready))
	for id, f := range c.fetchers {
		s += fmt.Sprintf("\n fetcher %d reserved=%d wake=%d", id, f.reserved, len(f.wake))
	}
	var tps []TopicPartition
	for tp := range c.parts {
		tps = append(tps, tp)
	}
	c.mu.Unlock()
	for _, tp := range tps {
		s += "\n " + tp.String() + " " + DebugPartition(c, tp.Topic, tp.Partition)
	}
	return s
}

// ReturnedBuffers counts the decompression buffers that came back to the
// process's recycler by themselves (nothing referred to them any more).
func ReturnedBuffers() int64 { return recycled.returned.Load() }

// CollectUntil runs the collector until cond holds, for up to d
// (collectUntil).
func CollectUntil(d time.Duration, cond func() bool) bool { return collectUntil(d, cond) }

// PollBuffers returns the decompression buffers f's Release hands back.
func PollBuffers(f *Fetches) [][]byte {
	if f.mem == nil {
		return nil
	}
	return f.mem.bufs
}

// QueuedCommits returns how many commits wait in the commit queue (the one
// being sent is not counted).
func QueuedCommits(c *Consumer) int {
	g := c.grp
	g.commits.mu.Lock()
	defer g.commits.mu.Unlock()
	return len(g.commits.q)
}

// DebugGroup describes the group's commit state (tests).
func DebugGroup(c *Consumer) string {
	g := c.grp
	c.mu.Lock()
	s := fmt.Sprintf("autoBusy=%v committable=%v committed=%v", g.autoBusy, g.committable, g.committed)
	c.mu.Unlock()
	g.mu.Lock()
	s += fmt.Sprintf(" generation=%d owned=%v", g.generation, g.owned)
	g.mu.Unlock()
	return s + fmt.Sprintf(" queued=%d", QueuedCommits(c))
}

// GroupClosing reports whether Close has begun ending the group membership.
func GroupClosing(c *Consumer) bool { return c.grp.ctx.Err() != nil }

// Committable returns the position autocommit and the revoke commit would
// store for tp (as of the latest Poll).
func Committable(c *Consumer, tp TopicPartition) (Position, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos, ok := c.grp.committable[tp]
	return pos, ok
}

// StepMetadataEvent steps ev into c as its metadata loop does.
func StepMetadataEvent(c *Consumer, ev metadata.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metadataEventLocked(ev)
}

// InterceptFetches makes fn send every Fetch c sends from now on, in place
// of the transport (call it before the first Assign); send sends it
// through the transport.
func InterceptFetches(c *Consumer, fn func(ctx context.Context, broker int32, req *kmsg.FetchRequest, send func(context.Context) (kmsg.Response, error)) (kmsg.Response, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sendFetch = func(ctx context.Context, broker int32, req kmsg.Request, send func(context.Context, kmsg.Request) (kmsg.Response, error)) (kmsg.Response, error) {
		fr, ok := req.(*kmsg.FetchRequest)
		if !ok {
			fr = req.(fetchByName).FetchRequest
		}
		return fn(ctx, broker, fr, func(ctx context.Context) (kmsg.Response, error) { return send(ctx, req) })
	}
}

// Paused reports whether tp is assigned and paused.
func Paused(c *Consumer, tp TopicPartition) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[tp]
	return p != nil && p.paused
}

// BeforeCommitSend makes fn run on c's commit goroutine after each commit
// passed its checks, just before it is sent (call it before committing).
func BeforeCommitSend(c *Consumer, fn func()) { c.grp.beforeSend = fn }

// MetadataTopicID returns the topic ID c's metadata holds for topic.
func MetadataTopicID(c *Consumer, topic string) [16]byte {
	tm, _ := c.meta.Topic(topic)
	return tm.ID
}

// FetchLoops returns the brokers c has a fetch loop for, sorted, and how
// many fetch loop goroutines run.
func FetchLoops(c *Consumer) ([]int32, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []int32
	for id := range c.fetchers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, int(c.loops.Load())
}

// BufferShare returns the share of MaxBufferedBytes each fetch loop may
// ask for (build).
func BufferShare(c *Consumer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shareLocked()
}
