package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/internal/gcreserve"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/seek"
)

// Consumer reads assigned partitions with KIP-320 semantics: every record
// carries its leader epoch, every position is validated against the leader
// when its lineage may have changed, and every break of the consumed
// lineage is reported once, before any record of the new lineage.
//
// Poll, Assign, Seek, SeekToNearest, Pause, Resume and Position may be
// called from any goroutine. All partition state is stepped under one lock;
// the goroutines that do I/O (one fetch loop per broker, one for offset
// requests, one for metadata events, one ticker) are owned by the Consumer
// and stopped by Close.
type Consumer struct {
	cfg       cfg
	cl        *kgo.Client
	ownClient bool
	meta      *metadata.Refresher
	ownMeta   bool
	sub       *metadata.Subscription

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeDone chan struct{} // closed when the first Close returns

	mu       sync.Mutex
	closed   bool
	closing  bool // Close has begun: Poll returns nothing more
	ids      seek.RequestIDs
	parts    map[TopicPartition]*part
	watching map[string]func() // topic → unwatch
	fetchers map[int32]*fetcher
	// loops counts the fetch loops running (tests: none outlives its
	// retirement or Close).
	loops    atomic.Int32
	offsets  *offsetRequests
	ready    []*part // partitions with a buffered fetch answer, in arrival order
	buffered int     // bytes of buffered fetch answers
	reserved int     // bytes reserved for the answers of fetches in flight
	events   []TruncationEvent
	errs     []error
	wake     chan struct{} // closed and replaced when Poll has something new
	rounds   uint64        // metadata round trips last seen by the ticker
	dec      *compress.Decompressor

	// fetchVersions is the Fetch version each broker last answered
	// (ValidateInBand: v12 and above check LastFetchedEpoch).
	fetchVersions map[int32]int16
	// bufferFull is set when a fetch loop waits for buffer space.
	bufferFull bool
	// peakBuffered is the most buffered ever was (for tests).
	peakBuffered int
	// metaErr: the refresher shared with WithMetadata was closed while the
	// consumer runs; Poll returns it.
	metaErr error
	// brokers are the brokers metadata named at brokersAt (replicaUsableLocked).
	brokers   map[int32]bool
	brokersAt metadata.Version

	grp *group // group membership and commits (Group option); nil without

	// The OffsetCommit requests the transport wrote to a connection, those
	// whose answer was then read or given up on, and those given up on (a
	// broken connection, a read deadline, a cancel while the answer was
	// awaited): counted by its hook (commitHook) when kepoch created the
	// transport.
	commitsWritten, commitsEnded, commitsLost atomic.Uint64

	// sendFetch, when set (by tests, before the first Assign), sends each
	// Fetch in place of the transport; send is the transport's own.
	sendFetch func(ctx context.Context, broker int32, req kmsg.Request, send func(context.Context, kmsg.Request) (kmsg.Response, error)) (kmsg.Response, error)

	reserve *gcreserve.Hold // the GC reserve (GCReserve), released by Close
}

// New creates a consumer. It assigns nothing; call Assign.
func New(opts ...Opt) (*Consumer, error) {
	c := &Consumer{cfg: defaultCfg()}
	for _, o := range opts {
		o.apply(&c.cfg)
	}
	if err := c.cfg.validate(); err != nil {
		return nil, err
	}
	if c.cfg.client != nil {
		c.cl = c.cfg.client
	} else {
		kopts := append([]kgo.Opt{kgo.SeedBrokers(c.cfg.seeds...)}, c.cfg.transportOpts...)
		kopts = append(kopts, kgo.WithHooks(commitHook{c}))
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			return nil, fmt.Errorf("consumer: transport: %w", err)
		}
		c.cl, c.ownClient = cl, true
	}
	if c.cfg.meta != nil {
		c.meta = c.cfg.meta
	} else {
		c.meta = metadata.NewRefresher(c.cl, metadata.MaxAge(c.cfg.metadataMaxAge))
		c.ownMeta = true
	}
	c.dec = c.decompressor()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.parts = map[TopicPartition]*part{}
	c.watching = map[string]func(){}
	c.fetchers = map[int32]*fetcher{}
	c.fetchVersions = map[int32]int16{}
	c.wake = make(chan struct{})
	c.closeDone = make(chan struct{})
	c.offsets = newOffsetRequests(c)
	c.sub = c.meta.Subscribe()
	c.goFn(c.metadataLoop)
	c.goFn(c.tickLoop)
	c.goFn(c.offsets.loop)
	if c.cfg.group.id != "" {
		c.grp = newGroup(c)
	}
	c.reserve = gcreserve.Take(c.cfg.reserve())
	return c, nil
}

// goFn starts a goroutine owned by the consumer; Close waits for it.
func (c *Consumer) goFn(fn func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// Close stops fetching, waits for every goroutine of the consumer to end
// (or ctx to expire), asks each broker to drop the consumer's fetch session
// (a second at most), and closes the transport and refresher it created.
// Records buffered and not yet polled are dropped, and from the moment
// Close begins Poll returns errors.ErrClosed: a record returned during
// Close would be committed by nobody. Close is idempotent.
//
// A group member commits every position Poll returned (with autocommit),
// lets a revocation under way finish with its commit, runs OnRevoked and
// leaves. The error joins every commit made meanwhile that failed
// (*errors.PartitionError per partition), or says that ctx ended before
// Close could commit: the records since the last successful commit will
// be delivered again. The consumer is closed either way.
func (c *Consumer) Close(ctx context.Context) error {
	if ctx == nil {
		return nilContext("Close")
	}
	first := false
	c.closeOnce.Do(func() { first = true })
	if !first {
		// Another Close runs (or ran): it commits, leaves and stops
		// everything; this one must not cut that short.
		select {
		case <-c.closeDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(c.closeDone)
	defer c.reserve.Release()
	c.mu.Lock()
	c.closing = true
	c.signalLocked()
	c.mu.Unlock()
	var gerr error
	if c.grp != nil {
		gerr = c.grp.close(ctx) // commits, revokes and leaves while the consumer still runs
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return gerr
	}
	c.closed = true
	for _, unwatch := range c.watching {
		unwatch()
	}
	c.signalLocked()
	c.mu.Unlock()
	c.cancel()
	c.sub.Close()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
		c.closeSessions(ctx)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if c.ownMeta {
		c.meta.Close()
	}
	if c.ownClient {
		c.cl.Close()
	}
	if gerr != nil && err != nil && errors.Is(gerr, err) {
		return gerr // ctx ended before the group could commit
	}
	return errors.Join(gerr, err)
}

// Assign replaces the assignment: partitions not listed are dropped (with
// their buffered records), listed ones start at their Start. A partition
// listed again restarts at its new Start. A partition listed twice in one
// call is refused (a *PartitionError wrapping ErrDuplicateAssignment for
// each), and the assignment is left as it was. So is an entry with an
// empty topic, a negative partition or an invalid Start (an error matching
// errors.ErrInvalidArgument naming it), and any Assign on a consumer
// subscribed to its group (ErrAssignmentMode).
func (c *Consumer) Assign(as ...Assignment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.ErrClosed
	}
	if c.grp != nil && c.grp.isSubscribed() {
		return fmt.Errorf("consumer: Assign on a subscribed consumer: %w", ErrAssignmentMode)
	}
	want := map[TopicPartition]Start{}
	var dups []error
	for i, a := range as {
		switch {
		case a.Topic == "":
			return invalidArgument("Assign", fmt.Sprintf("#%d Topic", i), `"" is empty`)
		case a.Partition < 0:
			return invalidArgument("Assign", fmt.Sprintf("#%d Partition", i), fmt.Sprintf("%d of %q is negative", a.Partition, a.Topic))
		}
		if problem := startProblem(a.Start); problem != "" {
			return invalidArgument("Assign", fmt.Sprintf("#%d Start", i), fmt.Sprintf("%s[%d]: %s", a.Topic, a.Partition, problem))
		}
		tp := TopicPartition{a.Topic, a.Partition}
		if s, dup := want[tp]; dup {
			if s.Kind != 0 { // reported once, however often it is listed
				dups = append(dups, &errors.PartitionError{Op: "assign", Topic: a.Topic, Partition: a.Partition,
					Offset: -1, LeaderEpoch: -1, Err: ErrDuplicateAssignment})
				want[tp] = Start{}
			}
			continue
		}
		want[tp] = a.Start
	}
	if len(dups) > 0 {
		return errors.Join(dups...)
	}
	for tp, p := range c.parts {
		if _, ok := want[tp]; !ok {
			p.revoke()
			c.dropBufferLocked(p)
			delete(c.parts, tp)
		}
	}
	c.wakeIdleFetchersLocked()
	topics := map[string]bool{}
	for tp := range want {
		topics[tp.Topic] = true
	}
	for t, unwatch := range c.watching {
		if !topics[t] {
			unwatch()
			delete(c.watching, t)
		}
	}
	for t := range topics {
		if _, ok := c.watching[t]; !ok {
			c.watching[t] = c.meta.Watch(t)
		}
	}
	for tp, start := range want {
		if err := c.startPartLocked(tp, start); err != nil {
			return err
		}
	}
	c.meta.Trigger(metadata.ReasonWatch)
	return nil
}

// startPartLocked (re)starts tp at start. A new partition first learns its
// leader from metadata; an assigned one is repositioned.
func (c *Consumer) startPartLocked(tp TopicPartition, start Start) error {
	p := c.parts[tp]
	if p == nil {
		var err error
		if p, err = c.newPart(tp); err != nil {
			return err
		}
		c.parts[tp] = p
		if mp, err := c.meta.Lookup(tp.Topic, tp.Partition); err == nil || mp.Leader >= 0 || mp.LeaderEpoch >= 0 {
			c.stepLocked(p, c.leaderChangedLocked(mp.Leader, mp.LeaderEpoch, mp.TopicID))
		}
	}
	c.repositionLocked(p)
	c.stepLocked(p, seek.Assigned{Start: start})
	return nil
}

// repositionLocked readies p for a position set anew (a start, a seek):
// its buffered answer is dropped, and a waiting SeekToNearest is over.
func (c *Consumer) repositionLocked(p *part) {
	c.dropBufferLocked(p)
	p.supersedeNearest()
}

// startProblem says what makes s refused as a start position, naming the
// refused value; "" when s is valid.
func startProblem(s Start) string {
	switch s.Kind {
	case seek.StartAt, seek.StartNearest, seek.StartHistory:
		if s.Offset < 0 {
			return fmt.Sprintf("offset %d is negative", s.Offset)
		}
		if s.Epoch < seek.NoEpoch {
			return fmt.Sprintf("epoch %d is below -1 (no epoch)", s.Epoch)
		}
	case seek.StartTimestamp:
		if s.Timestamp < 0 {
			// ListOffsets reads negative timestamps as -1 latest, -2
			// earliest, -3 max timestamp…: not "the first offset ≥ ms".
			return fmt.Sprintf("timestamp %d is negative", s.Timestamp)
		}
	case seek.StartEarliest, seek.StartLatest:
	default:
		return fmt.Sprintf("kind %d is not a start position (use At, AtEpoch, AtHistory, NearestTo, Earliest, Latest or AtTimestamp)", s.Kind)
	}
	return ""
}

// leaderChangedLocked is the LeaderChanged step of a leader and epoch
// metadata gives for a partition of topic id.
func (c *Consumer) leaderChangedLocked(leader, epoch int32, id metadata.TopicID) seek.LeaderChanged {
	return seek.LeaderChanged{Leader: leader, Epoch: epoch, TopicID: seek.TopicID(id), InBand: c.inBandLocked(leader)}
}

// inBandLocked reports whether broker id is known to check a fetch's
// LastFetchedEpoch: its last Fetch answer to this consumer was v12 or
// above.
func (c *Consumer) inBandLocked(id int32) bool {
	v, ok := c.fetchVersions[id]
	return ok && v >= 12
}

// Assigned returns the assigned partitions.
func (c *Consumer) Assigned() []TopicPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TopicPartition, 0, len(c.parts))
	for tp := range c.parts {
		out = append(out, tp)
	}
	return out
}

func (c *Consumer) part(topic string, partition int32) (*part, error) {
	if c.closed {
		return nil, errors.ErrClosed
	}
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return nil, &errors.PartitionError{Op: "seek", Topic: topic, Partition: partition, Offset: -1, LeaderEpoch: -1,
			Err: ErrNotAssigned}
	}
	return p, nil
}

// ErrSeekSuperseded ends a SeekToNearest that was still waiting for the
// leader when the partition was sought again (Seek, SeekTo or another
// SeekToNearest): the later seek decides the position.
var ErrSeekSuperseded = errors.New("kepoch: seek superseded by a later seek of the partition")

// Seek moves a partition's position to offset without an epoch: the
// position is not validated against the leader (Kafka's seek(tp, offset)).
// Records buffered for the partition are dropped. After a truncation report
// with PolicyNone, seeking to the reported consumed offset continues from
// there, accepting the loss (KIP-320). A negative offset is refused with an
// error matching errors.ErrInvalidArgument, as is an invalid Start given to
// SeekTo or a negative offset to SeekToNearest.
func (c *Consumer) Seek(topic string, partition int32, offset int64) error {
	if offset < 0 {
		return invalidArgument("Seek", "offset", fmt.Sprintf("%d is negative", offset))
	}
	return c.SeekTo(topic, partition, At(offset))
}

// SeekTo moves a partition's position to any Start (an offset with its
// epoch is validated before anything is fetched).
func (c *Consumer) SeekTo(topic string, partition int32, s Start) error {
	if problem := startProblem(s); problem != "" {
		return invalidArgument("SeekTo", "start", problem)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.part(topic, partition)
	if err != nil {
		return err
	}
	c.repositionLocked(p)
	c.stepLocked(p, seek.Seek{Start: s})
	c.signalLocked()
	return nil
}

// SeekToNearest moves a partition to a stored position with the meaning
// KIP-320 gives it: the offset itself if it still exists in that leader
// epoch, else the first offset of the next larger epoch. It blocks until
// the leader answered and returns the position the partition moved to. A
// stored position without an epoch, or at offset 0, is used as is, and so
// is every stored position when the leader's metadata carries no epochs.
// When the leader cannot locate the epoch, or asking it finds another
// break (the topic recreated), the partition's truncation policy decides,
// the break is reported by Poll, and SeekToNearest returns the report's
// error (a *LogTruncationError for an epoch the leader cannot locate). A
// later seek of the partition ends a waiting SeekToNearest with
// ErrSeekSuperseded; its revocation, with a *PartitionError.
func (c *Consumer) SeekToNearest(ctx context.Context, topic string, partition int32, om OffsetAndMetadata) (Position, error) {
	if ctx == nil {
		return Position{}, nilContext("SeekToNearest")
	}
	if om.Offset < 0 {
		return Position{}, invalidArgument("SeekToNearest", "om", fmt.Sprintf("offset %d is negative", om.Offset))
	}
	if om.LeaderEpoch < seek.NoEpoch {
		return Position{}, invalidArgument("SeekToNearest", "om", fmt.Sprintf("leader epoch %d is below -1 (no epoch)", om.LeaderEpoch))
	}
	c.mu.Lock()
	p, err := c.part(topic, partition)
	if err != nil {
		c.mu.Unlock()
		return Position{}, err
	}
	c.repositionLocked(p)
	done := make(chan nearestResult, 1)
	p.nearest = done
	c.stepLocked(p, seek.Seek{Start: NearestTo(om.Offset, om.LeaderEpoch)})
	c.mu.Unlock()
	select {
	case r := <-done:
		return r.pos, r.err
	case <-ctx.Done():
		c.mu.Lock()
		if p.nearest == done {
			p.nearest = nil
		}
		c.mu.Unlock()
		return Position{}, ctx.Err()
	case <-c.ctx.Done():
		return Position{}, errors.ErrClosed
	}
}

// Pause stops fetching the partitions; records already buffered for them are
// kept but not returned until Resume. Validation and truncation reports go on.
// A partition that is not assigned is not paused: the error names each (a
// *PartitionError wrapping ErrNotAssigned, joined), and the assigned
// partitions named with it are paused all the same. After Close it does
// nothing and returns ErrClosed.
func (c *Consumer) Pause(tps ...TopicPartition) error {
	return c.setPaused(tps, true)
}

// Resume undoes Pause. It returns the same errors as Pause.
func (c *Consumer) Resume(tps ...TopicPartition) error {
	return c.setPaused(tps, false)
}

// ErrDuplicateAssignment refuses an Assign that names a partition more
// than once (with two starts, which one stands would be a guess): a
// *PartitionError wrapping it names the partition, and nothing is
// assigned or revoked.
var ErrDuplicateAssignment = errors.New("kepoch: partition assigned twice in one Assign")

// ErrAssignmentMode refuses mixing the two ways a consumer gets its
// partitions: Assign on a consumer subscribed to its group, Subscribe on
// one that has partitions assigned by hand.
var ErrAssignmentMode = errors.New("kepoch: a consumer is assigned either by hand (Assign) or by its group (Subscribe), not both")

// ErrNotAssigned: the partition is not (or no longer) assigned to the
// consumer. A call naming it (Seek, SeekTo, SeekToNearest, Pause, Resume)
// returns a *PartitionError wrapping it; so does a SeekToNearest waiting
// when the partition is revoked.
var ErrNotAssigned = errors.New("kepoch: partition not assigned")

func (c *Consumer) setPaused(tps []TopicPartition, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.ErrClosed
	}
	op := "resume"
	if paused {
		op = "pause"
	}
	var errs []error
	for _, tp := range tps {
		p := c.parts[tp]
		if p == nil {
			errs = append(errs, &errors.PartitionError{Op: op, Topic: tp.Topic, Partition: tp.Partition, Offset: -1, LeaderEpoch: -1,
				Err: ErrNotAssigned})
			continue
		}
		if p.paused != paused {
			p.paused = paused
			c.stepLocked(p, seek.Paused{Paused: paused})
			if paused && p.buf != nil && c.bufferFull {
				// Its answer may be what keeps the others from being
				// fetched: the fetch loops drop it if so (build).
				c.wakeFetchersLocked()
			}
			if !paused && p.fetch != nil && !p.sent {
				// A fetch the machine asked for before the pause was
				// withheld, and the machine does not ask again: its
				// fetch loop must look at it now.
				c.fetchableLocked(p, c.routeLocked(p, time.Now()))
			}
		}
	}
	c.signalLocked()
	return errors.Join(errs...)
}

// Position returns the partition's position: the next offset Poll will
// return and the leader epoch of the last record it returned (the pair to
// commit). ok is false when the partition has no position yet (its start is
// being resolved) or is not assigned.
func (c *Consumer) Position(topic string, partition int32) (pos Position, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return Position{}, false
	}
	return p.m.Position()
}

// EpochHistory returns a copy of the partition's epoch history: the leader
// epochs of the record batches Poll delivered, as (epoch, first offset)
// entries, up to the position (its End). An application that stores its
// positions outside Kafka stores this next to the offset, atomically with
// its output (MarshalBinary), and restarts with AtHistory(offset, history):
// the epoch of the record before the offset is taken from the history and
// the position validated against the leader, even if the application
// stored only the offset of the last record it processed. Taken between
// Polls, from the goroutine that polls, its End is the partition's position.
//
// The history is cut at the divergence point of every truncation reported
// (and emptied by any other break), restarts when the position jumps
// forward, and keeps the newest EpochHistorySize epochs. It names the
// topic ID its batches were fetched under (EpochHistory.TopicID), so a
// restart from it after the topic was deleted and created again reports
// Recreated rather than validating an offset of the deleted log against
// the new one. ok is false when the partition is not assigned.
func (c *Consumer) EpochHistory(topic string, partition int32) (h *EpochHistory, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return nil, false
	}
	return p.epochs.Clone(), true
}

// ReadReplica says where a partition is read from (KIP-392, see Rack).
type ReadReplica struct {
	// Broker is the broker the partition's next fetch goes to: Leader,
	// or the replica Leader named (Preferred). -1 while no leader is
	// known.
	Broker int32
	// Leader is the partition's leader as the consumer knows it (-1:
	// none known). OffsetForLeaderEpoch and ListOffsets always go to it.
	Leader int32
	// Preferred is true when Broker is a replica the leader named rather
	// than the leader itself.
	Preferred bool
	// Until is when the leader is asked again (MetadataMaxAge after it
	// named the replica); zero when not Preferred, or with no max age.
	Until time.Time
	// LastFrom is the broker whose Fetch answer held the last record
	// batch Poll delivered of the partition (-1 before any): with Poll's
	// records in hand, the broker they were read from.
	LastFrom int32
}

// ReadReplica returns where the partition is read from: its leader, or a
// replica the leader named (KIP-392). ok is false when the partition is
// not assigned.
func (c *Consumer) ReadReplica(topic string, partition int32) (r ReadReplica, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return ReadReplica{}, false
	}
	r = ReadReplica{Broker: c.routeLocked(p, time.Now()), Leader: p.m.Leader().ID, LastFrom: p.lastFrom}
	if p.replica.id >= 0 {
		r.Preferred, r.Until = true, p.replica.until
	}
	return r, true
}

// State returns the partition's fetch state (for diagnostics).
func (c *Consumer) State(topic string, partition int32) (seek.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return 0, false
	}
	return p.m.State(), true
}

// signalLocked wakes every Poll waiting for something new.
func (c *Consumer) signalLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

// Poll returns what the consumer has for the application: records, the
// breaks detected since the last Poll, and partition errors. It blocks
// until there is something or ctx ends (then it returns empty Fetches and
// ctx's error). Once Close has begun it returns errors.ErrClosed, and
// once a refresher shared with WithMetadata is closed under the consumer,
// an error that matches errors.ErrClosed and says so. A subscribed
// member that was not polled for MaxPollInterval left its group; the next
// Poll rejoins it and returns that in Fetches.Errors once
// (ErrMaxPollIntervalExceeded).
func (c *Consumer) Poll(ctx context.Context) (Fetches, error) {
	if ctx == nil {
		return Fetches{}, nilContext("Poll")
	}
	if g := c.grp; g != nil {
		g.pollBegin() // MaxPollInterval: the application polls
		defer g.pollEnd()
	}
	var mk toMake
	for {
		if c.grp != nil {
			// The call says that what earlier Polls returned was
			// processed: recorded before the gate, which a revocation
			// may hold, so that its commit (made when sent) stores it.
			c.mu.Lock()
			c.grp.pollStartedLocked()
			c.mu.Unlock()
		}
		leave := c.enterPoll() // the session boundary, see group.go
		c.mu.Lock()
		if c.closed || c.closing {
			c.mu.Unlock()
			leave()
			return Fetches{}, errors.ErrClosed
		}
		if err := c.metaErr; err != nil {
			c.mu.Unlock()
			leave()
			return Fetches{}, err
		}
		f := c.collectLocked(&mk)
		wake := c.wake
		c.mu.Unlock()
		c.makeRecords(&f, &mk)
		if !f.Empty() {
			if fn := c.cfg.onTruncation; fn != nil {
				for _, e := range f.Truncations {
					fn(e)
				}
			}
			leave()
			return f, nil
		}
		leave()
		select {
		case <-ctx.Done():
			return Fetches{}, ctx.Err()
		case <-wake:
		}
	}
}

// tickLoop steps every partition's clock, and re-reports metadata to every
// partition after each metadata round trip (repeated reports confirm an
// epoch, see seek.LeaderChanged).
func (c *Consumer) tickLoop() {
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		rounds := c.meta.Stats().RoundTrips
		now := time.Now()
		c.mu.Lock()
		fresh := rounds != c.rounds
		c.rounds = rounds
		for _, p := range c.parts {
			if fresh && p.m.State() != seek.StateFetching {
				if mp, err := c.meta.Lookup(p.tp.Topic, p.tp.Partition); err == nil || mp.LeaderEpoch >= 0 {
					c.stepLocked(p, c.leaderChangedLocked(mp.Leader, mp.LeaderEpoch, mp.TopicID))
				}
			}
			if fresh || !p.missingSince.IsZero() {
				c.checkMissingLocked(p, now)
			}
			c.stepLocked(p, seek.Tick{})
			if p.replica.id >= 0 {
				// An expired read replica, or one metadata no longer
				// lists, is dropped even while nothing is sent there.
				c.routeLocked(p, now)
			}
		}
		c.wakeIdleFetchersLocked()
		c.mu.Unlock()
	}
}

// checkMissingLocked tells Poll, once, about an assigned partition that
// metadata has not had (its topic does not exist, was deleted, or has fewer
// partitions) for MissingPartitionReport: an error in Fetches.Errors,
// without halting it, since the partition is fetched as soon as metadata
// has it. It is told again only if it goes missing again after that.
func (c *Consumer) checkMissingLocked(p *part, now time.Time) {
	_, err := c.meta.Lookup(p.tp.Topic, p.tp.Partition)
	if err == nil || !errors.Is(err, errors.ErrUnknownTopicOrPartition) {
		p.missingSince, p.missingReported = time.Time{}, false
		return
	}
	if p.missingSince.IsZero() {
		p.missingSince = now
	}
	if p.missingReported || now.Sub(p.missingSince) < c.cfg.missingAfter {
		return
	}
	p.missingReported = true
	pos, _ := p.m.Position()
	c.errs = append(c.errs, &errors.PartitionError{Op: "lookup", Topic: p.tp.Topic, Partition: p.tp.Partition,
		Offset: pos.Offset, LeaderEpoch: pos.Epoch,
		Err: fmt.Errorf("%w (not in metadata for %v; the partition waits for it)", errors.ErrUnknownTopicOrPartition, now.Sub(p.missingSince).Round(time.Millisecond))})
	c.signalLocked()
}

// metadataLoop turns metadata events into LeaderChanged steps.
func (c *Consumer) metadataLoop() {
	for {
		evs, err := c.sub.Next(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				// The refresher ended under the consumer: a refresher
				// shared with WithMetadata, closed first. Without it a
				// partition whose leader moves would wait for ever,
				// unreported.
				c.mu.Lock()
				c.metaErr = fmt.Errorf("consumer: its metadata refresher was closed while the consumer runs (close a shared refresher after its consumers): %w", err)
				c.signalLocked()
				c.mu.Unlock()
			}
			return
		}
		c.mu.Lock()
		for _, ev := range evs {
			c.metadataEventLocked(ev)
		}
		c.wakeIdleFetchersLocked()
		c.mu.Unlock()
	}
}

// metadataEventLocked steps a metadata event into its partition's machine.
// Events wait in a queue, while the tick loop and seeks read metadata as it
// is now: an event from a round trip before the topic was recreated can
// come after the partition stepped the new incarnation, and stepped as it
// is, its old topic ID would be a false recreation (and the next event's,
// another). Metadata adopts topic IDs only forward, so an event that names
// another ID than metadata holds now is stepped as metadata has the
// partition now.
func (c *Consumer) metadataEventLocked(ev metadata.Event) {
	p := c.parts[TopicPartition{ev.Topic, ev.Partition}]
	if p == nil {
		return
	}
	if ev.TopicID != (metadata.TopicID{}) {
		if mp, err := c.meta.Lookup(ev.Topic, ev.Partition); err == nil && mp.TopicID != ev.TopicID {
			c.stepLocked(p, c.leaderChangedLocked(mp.Leader, mp.LeaderEpoch, mp.TopicID))
			return
		}
	}
	c.stepLocked(p, c.leaderChangedLocked(ev.Leader, ev.LeaderEpoch, ev.TopicID))
}
