package producer

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/errors"
	recbatch "github.com/kepoch/kepoch/internal/batch"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/metadata"
)

// Record is one record to produce.
type Record struct {
	// Topic, Key and Value come first: they fill the first 64 bytes, the
	// only ones of the record that encoding its batch reads.
	Topic string
	Key   []byte
	Value []byte
	// Partition is used when ExplicitPartition is set; otherwise the
	// partitioner chooses.
	Partition         int32
	ExplicitPartition bool
	Headers           []Header
	// Timestamp defaults to the time of Produce.
	Timestamp time.Time
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Result is a record's delivery report.
type Result struct {
	Record    *Record
	Partition int32
	// Offset is the record's offset; -1 when unknown (acks=0, or a broker
	// that only said the batch was a duplicate).
	Offset int64
	// LeaderEpoch is the partition leader epoch the producer's metadata
	// named when the batch was sent: the epoch the batch was written under
	// unless leadership moved away and back while it was in flight. -1 if
	// unknown.
	LeaderEpoch int32
	// Err is nil when the record was acknowledged. A record whose Err
	// matches errors.ErrUnknownOutcome may nevertheless be in the log. One
	// whose Err matches errors.ErrTopicIDChanged was acknowledged by a
	// topic incarnation deleted since (its answer came after the producer
	// learned of the new one): it is not in the topic now and is not sent
	// again; the *errors.PartitionError's Offset is its batch's offset in
	// the deleted log.
	Err error
	// Recovery is the last KIP-360 outcome of the record's batch, if a
	// recovery touched it (ResequencedNoLoss or PossibleDuplicate): a
	// PossibleDuplicate record may be in the log twice, or, when its
	// Cause.Err matches errors.ErrTopicIDChanged, may also have been in
	// the log of the topic incarnation deleted since (the record is
	// acknowledged by the new one; a consumer that read the deleted log
	// may have seen it there). A non-idempotent producer reports a
	// PossibleDuplicate for a record acknowledged after an attempt with
	// no definite answer.
	Recovery Outcome
}

// Producer writes records to Kafka with raw Produce requests. It is
// idempotent by default: one producer ID, per-partition sequence numbers, and
// KIP-360 recovery (safe epoch bumps) decided by a Sequencer, with every
// recovery outcome reported. It also keeps a ledger of acknowledged offsets
// and reports acknowledged writes that a leader change removed.
//
// All methods are safe for concurrent use.
type Producer struct {
	cfg     cfg
	cl      *kgo.Client
	meta    *metadata.Refresher
	ownMeta bool
	sub     *metadata.Subscription
	part    Partitioner
	avail   func(topic string, partition int32) bool // p.hasLeader, made once
	// availPart is part when it can leave leaderless partitions out
	// (asserted once, not per record).
	availPart availabilityPartitioner

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// closing ends when Close begins (ctx, when the producer's goroutines
	// stop): calls it interrupts, such as SendOffsetsToTransaction's
	// requests, return errors.ErrClosed.
	closing    context.Context
	closeBegin context.CancelFunc

	mu     sync.Mutex
	closed bool
	// closeErr is what calls return once closed: errors.ErrClosed, or
	// an error matching it that says the shared refresher was closed
	// under the producer (refresherClosed).
	closeErr     error
	clientOnce   sync.Once
	fatal        error
	seq          *Sequencer // nil when not idempotent
	ledger       *AckLedger
	parts        map[TopicPartition]*pstate
	byTopic      map[string][]*pstate // parts by topic, indexed by partition
	lastTopic    string               // Produce's fast path: the last topic's
	lastParts    []*pstate
	batches      map[BatchRef]*pbatch // assigned batches of the idempotent producer
	sinks        map[int32]*sink
	sinkByID     atomic.Pointer[map[int32]*sink] // a copy of sinks, for the write hook
	watching     map[string]func()
	watched      sync.Map                   // topic names in watching, read without the lock by Produce
	gone         map[string]bool            // topics metadata removed: their state is dropped once idle (dropGoneLocked)
	lastShape    atomic.Pointer[topicShape] // Produce's topic lookup fast path
	clock        clock                      // record timestamps
	buffered     int                        // bytes of records not yet finished
	spaceWaiters int                        // Produce calls waiting for buffer space
	spaceWake    chan struct{}              // closed and replaced when buffered bytes drop (if spaceWaiters > 0)
	batchNo      uint64                     // batches created so far (numbers them)
	undelivered  int                        // batches whose callbacks have not all run
	flushing     int                        // Flush calls waiting (linger is ignored meanwhile)
	committing   int                        // CommitTransaction calls under way: Produce refuses
	flushers     []*flushWaiter
	needPID      bool
	// pidErr is the last InitProducerId failure (a Kafka code, a
	// transport error, ErrNoProducerIdentity) since the last identity
	// adopted: what a record timing out while it waits for an identity,
	// or an InitTransactions whose context ends, was waiting on.
	pidErr     error
	pidWake    chan struct{}
	ledgerQ    []ledgerTask
	ledgerW    chan struct{}
	ledgerAPIs brokerAPIs // owned by ledgerLoop (unsupportedLedger), not under mu
	comp       *compress.Compressor

	// Callbacks, run in order by callbackLoop (see accumulator.go).
	events  []event
	eventsW chan struct{}
	cbStop  bool
	cbDone  chan struct{}

	// Transactional producers only.
	txn     *TxnState
	txnWake chan struct{}
	txnSend TxnRequest // request handed to the txn loop
	txnDone chan error // the waiting InitTransactions/Commit/Abort
	txnKind string     // which one txnDone answers (see txnOp)
	// txnLeft: the outcome channel of an operation whose caller's context
	// ended (txnLeftKind names it); a retry of the same operation waits on it.
	txnLeft     chan error
	txnLeftKind string
	// endTxnAttempts, offsetsAttempts (AddOffsetsToTxn and
	// TxnOffsetCommit) and addAttempts (AddPartitionsToTxn) count the
	// attempts of those requests the transport wrote (the write hook's
	// count; see attempts).
	endTxnAttempts  attempts
	offsetsAttempts attempts
	addAttempts     attempts
	// offsetsBusy: SendOffsetsToTransaction calls under way; Commit and
	// Abort wait for them (offsetsIdle is closed when the count drops to 0).
	offsetsBusy int
	offsetsIdle chan struct{}
	// txnIdle, made by a Close waiting for the transaction operations
	// under way (txnBusyLocked), is closed when none is any more.
	txnIdle chan struct{}
}

// New creates a producer. An idempotent producer asks for its producer ID
// before its first send.
func New(opts ...Opt) (*Producer, error) {
	p := &Producer{cfg: defaultCfg()}
	for _, o := range opts {
		o.apply(&p.cfg)
	}
	if err := p.cfg.validate(); err != nil {
		return nil, err
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(p.cfg.seeds...)}
	switch p.cfg.acks {
	case AcksLeader:
		kopts = append(kopts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case AcksNone:
		kopts = append(kopts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	}
	kopts = append(kopts, kgo.WithHooks(writeHook{p}))
	cl, err := kgo.NewClient(append(kopts, p.cfg.transportOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("producer: transport: %w", err)
	}
	p.cl = cl
	if p.cfg.meta != nil {
		p.meta = p.cfg.meta
	} else {
		p.meta = metadata.NewRefresher(cl, metadata.MaxAge(p.cfg.metaMaxAge))
		p.ownMeta = true
	}
	var copts []compress.CompressorOption
	if p.cfg.levelSet {
		copts = append(copts, compress.WithLevel(p.cfg.codec, p.cfg.level))
	}
	if p.comp, err = compress.NewCompressor(copts...); err != nil {
		cl.Close()
		return nil, fmt.Errorf("producer: %w", err)
	}
	p.part = p.cfg.partitioner
	p.avail = p.hasLeader
	if p.part == nil {
		p.part = DefaultPartitioner()
	}
	p.availPart, _ = p.part.(availabilityPartitioner)
	if p.cfg.idempotent {
		txnl := p.cfg.transactionalID != ""
		if p.seq, err = NewSequencer(Config{MaxInFlight: p.cfg.maxInFlight, Transactional: txnl}); err != nil {
			cl.Close()
			return nil, err
		}
		if txnl {
			if p.txn, err = NewTxnState(TxnConfig{TransactionalID: p.cfg.transactionalID, CoordinatorBumps: true}, p.seq); err != nil {
				cl.Close()
				return nil, err
			}
		} else {
			p.needPID = true
		}
	}
	p.ledger = NewAckLedger(p.cfg.ledgerRanges)
	p.parts = map[TopicPartition]*pstate{}
	p.byTopic = map[string][]*pstate{}
	p.batches = map[BatchRef]*pbatch{}
	p.sinks = map[int32]*sink{}
	p.sinkByID.Store(&map[int32]*sink{})
	p.watching = map[string]func(){}
	p.gone = map[string]bool{}
	p.spaceWake = make(chan struct{})
	p.pidWake = make(chan struct{}, 1)
	p.ledgerW = make(chan struct{}, 1)
	p.txnWake = make(chan struct{}, 1)
	p.eventsW = make(chan struct{}, 1)
	p.cbDone = make(chan struct{})
	go p.callbackLoop() // stopped by Close after every other goroutine
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.closing, p.closeBegin = context.WithCancel(context.Background())
	p.sub = p.meta.Subscribe()
	p.goFn(p.metadataLoop)
	p.goFn(p.expireLoop)
	p.goFn(p.ledgerLoop)
	if p.txn != nil {
		p.goFn(p.txnLoop)
	} else if p.seq != nil {
		p.goFn(p.pidLoop)
		p.pidWake <- struct{}{}
	}
	return p, nil
}

func (p *Producer) goFn(fn func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
}

// ProducerID returns the producer's current identity (NoProducerID before
// the first InitProducerId answer, or when not idempotent).
func (p *Producer) ProducerID() ProducerID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seq == nil {
		return NoProducerID
	}
	return p.seq.Producer()
}

// Bumps returns how many times the producer bumped its epoch (or took a new
// producer ID) to recover from a broker forgetting it.
func (p *Producer) Bumps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seq == nil {
		return 0
	}
	return p.seq.Bumps()
}

// Produce buffers r for sending and calls cb once with its delivery report
// (cb may be nil). It blocks while the buffer is full, until ctx ends, and
// while the topic's partitions are not known (or, for an explicit
// partition, until metadata shows that partition), until ctx ends or for
// MetadataWait at most. A record whose batch would be larger than
// MaxRequestBytes is refused at once with a *errors.PartitionError matching
// errors.ErrMessageTooLarge (cb is not called); one the brokers refuse as
// too large (their message.max.bytes) is reported failed with that error,
// alone: a batch holding other records too is split until they fit.
// A nil record, one without a topic, or one with ExplicitPartition and a
// negative Partition is refused at once with an error matching
// errors.ErrInvalidArgument that names it; a partition the Partitioner
// returns outside the topic's partitions, with a *errors.PartitionError
// matching ErrPartitionerOutOfRange (cb is not called either way).
//
// Callbacks (cb, OnOutcome, OnAckedWritesLost) run on one producer
// goroutine, one at a time, never with the producer's lock held; a
// partition's reports come in the order its records were produced, which
// is offset order (a PossibleDuplicate record reports the offset of its
// later copy). A callback may call Produce (which may block while the
// buffer is full) and read the producer's state, but must not block for
// long, nor wait for other reports: Flush, ProduceSync or CommitTransaction
// called from a callback return only when their context ends, and Close
// never does.
//
// Inside a transaction (begun, not yet being committed or aborted) a
// record Produce refuses makes the transaction abortable, the refusal its
// cause: CommitTransaction returns an error matching ErrAbortRequired that
// wraps it, and AbortTransaction goes on as after any abortable error, so
// a transaction never commits without a record the application tried to
// write into it, even if the application ignores Produce's error (as Java's
// producer does for a send refused with an API error). That holds for every
// refusal concerning the record or its delivery, argument misuse included
// (a nil record, no topic, a negative explicit partition): that write is
// just as missing, and aborting is always safe, where a commit lacking it
// is the silent loss a transaction exists to prevent. A refusal about the
// producer or the transaction's state instead (ErrTxnState: no transaction
// begun, CommitTransaction under way; the producer closed or fatal; the
// transaction already abortable) changes nothing.
func (p *Producer) Produce(ctx context.Context, r *Record, cb func(Result)) error {
	err := p.produce(ctx, r, cb)
	if err != nil && p.txn != nil {
		p.mu.Lock()
		p.txnStepLocked(p.txn.RecordRefused(err, p.committing > 0))
		p.mu.Unlock()
	}
	return err
}

// produce is Produce, without what a refusal does to the open transaction.
func (p *Producer) produce(ctx context.Context, r *Record, cb func(Result)) error {
	switch {
	case ctx == nil:
		return nilContext("Produce")
	case r == nil:
		return invalidArgument("Produce", "r", "nil")
	case r.Topic == "":
		return invalidArgument("Produce", "r.Topic", `"" is empty`)
	case r.ExplicitPartition && r.Partition < 0:
		return invalidArgument("Produce", "r.Partition", fmt.Sprintf("%d of %q is negative", r.Partition, r.Topic))
	}
	if r.Timestamp.IsZero() {
		r.Timestamp = p.clock.now()
	}
	ts := r.Timestamp.UnixMilli()
	size := recbatch.RecordSize(r.Key, r.Value, toBatchHeaders(r.Headers))
	if size > math.MaxInt32 || recbatch.HeaderSize+size > p.cfg.requestBytes {
		// A request carries the record's batch whole: the broker would
		// refuse it (MESSAGE_TOO_LARGE), or close the connection on it
		// and have it resent, with the other batches of its request,
		// until their delivery timeout.
		partition := int32(-1)
		if r.ExplicitPartition {
			partition = r.Partition
		}
		return &errors.PartitionError{Op: "produce", Topic: r.Topic, Partition: partition, Offset: -1, LeaderEpoch: -1,
			Err: fmt.Errorf("%w: a record of %d bytes makes a batch larger than MaxRequestBytes (%d)", errors.ErrMessageTooLarge, size, p.cfg.requestBytes)}
	}
	need := int32(1)
	if r.ExplicitPartition && r.Partition >= 0 && r.Partition < math.MaxInt32 {
		// A partition beyond the cached count may have just been added
		// (CreatePartitions): wait for metadata to show it, as for an
		// unknown topic.
		need = r.Partition + 1
	}
	nparts, topicID, err := p.topic(ctx, r.Topic, need)
	if err != nil {
		return err
	}
	p.mu.Lock()
	for {
		if p.closed {
			err := p.closeErr
			p.mu.Unlock()
			return err
		}
		if p.fatal != nil {
			err := p.fatal
			p.mu.Unlock()
			return err
		}
		if p.buffered == 0 || p.buffered+size <= p.cfg.maxBuffered {
			break
		}
		wake := p.spaceWake
		p.spaceWaiters++
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			p.mu.Lock()
			p.spaceWaiters--
			p.mu.Unlock()
			return ctx.Err()
		case <-wake:
		}
		p.mu.Lock()
		p.spaceWaiters--
	}
	partition := r.Partition
	if !r.ExplicitPartition {
		if p.availPart != nil {
			partition = p.availPart.partitionAvailable(r, nparts, p.avail)
		} else {
			partition = p.part.Partition(r, nparts)
		}
	}
	if partition < 0 || partition >= nparts {
		p.mu.Unlock()
		err := fmt.Errorf("no such partition (topic has %d)", nparts)
		if !r.ExplicitPartition {
			err = fmt.Errorf("%w: it returned %d for a topic of %d partitions", ErrPartitionerOutOfRange, partition, nparts)
		}
		return &errors.PartitionError{Op: "produce", Topic: r.Topic, Partition: partition, Offset: -1, LeaderEpoch: -1, Err: err}
	}
	tp := TopicPartition{r.Topic, partition}
	if p.txn != nil {
		if p.committing > 0 {
			p.mu.Unlock()
			return fmt.Errorf("producer: %w: CommitTransaction is under way", ErrTxnState)
		}
		step, err := p.txn.AddPartition(tp)
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("producer: %w", err)
		}
		p.txnStepLocked(step)
	}
	ps := p.pstateLocked(tp, topicID)
	p.buffered += size
	ps.add(p, pending{rec: r, cb: cb, ts: ts, size: int32(size), headers: len(r.Headers) > 0})
	p.mu.Unlock()
	return nil
}

// ProduceSync produces the records and waits for all of their delivery
// reports, or until ctx ends; it returns the first error. A record still
// unreported when ctx ends is returned with ctx's error and
// errors.ErrUnknownOutcome (it may yet be written).
func (p *Producer) ProduceSync(ctx context.Context, rs ...*Record) ([]Result, error) {
	if ctx == nil {
		// Refused whole, before Produce could take some of the records:
		// there would be nothing to wait for their reports with.
		err := nilContext("ProduceSync")
		out := make([]Result, len(rs))
		for i, r := range rs {
			out[i] = Result{Record: r, Partition: -1, Offset: -1, LeaderEpoch: -1, Err: err}
		}
		return out, err
	}
	var mu sync.Mutex
	results := make([]Result, len(rs))
	reported := make([]bool, len(rs))
	left := len(rs)
	all := make(chan struct{})
	if left == 0 {
		close(all)
	}
	report := func(i int, res Result) {
		mu.Lock()
		defer mu.Unlock()
		results[i], reported[i] = res, true
		if left--; left == 0 {
			close(all)
		}
	}
	for i, r := range rs {
		if err := p.Produce(ctx, r, func(res Result) { report(i, res) }); err != nil {
			report(i, Result{Record: r, Partition: -1, Offset: -1, LeaderEpoch: -1, Err: err})
		}
	}
	p.Flush(ctx) // send now, whatever the linger
	select {
	case <-all:
	case <-ctx.Done():
	}
	mu.Lock()
	out := slices.Clone(results)
	for i, ok := range reported {
		if !ok {
			// Still buffered or in flight: it may yet be written (its
			// callback, dropped, would say).
			out[i] = Result{Record: rs[i], Partition: -1, Offset: -1, LeaderEpoch: -1, Err: errors.Join(ctx.Err(), errors.ErrUnknownOutcome)}
		}
	}
	mu.Unlock()
	for _, res := range out {
		if res.Err != nil {
			return out, res.Err
		}
	}
	return out, nil
}

// Flush sends everything buffered without waiting for linger and waits
// until every record produced before it has had its callback run, or ctx
// ends. Once the producer is closed (or stopped by the closing of a
// refresher shared with WithMetadata) it returns an error matching
// errors.ErrClosed, as soon as the records it waits for are reported.
func (p *Producer) Flush(ctx context.Context) error {
	if ctx == nil {
		return nilContext("Flush")
	}
	p.mu.Lock()
	if p.undelivered == 0 {
		err := p.closedErrLocked()
		p.mu.Unlock()
		return err
	}
	w := &flushWaiter{limit: p.batchNo, remaining: p.undelivered, done: make(chan struct{})}
	p.flushers = append(p.flushers, w)
	p.flushing++
	p.wakeSinksLocked()
	p.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-w.done:
	}
	p.mu.Lock()
	p.flushing--
	p.flushers = slices.DeleteFunc(p.flushers, func(x *flushWaiter) bool { return x == w })
	if err == nil {
		err = p.closedErrLocked()
	}
	p.mu.Unlock()
	return err
}

// closedErrLocked is nil while the producer runs, and the error its calls
// return once it is closed.
func (p *Producer) closedErrLocked() error {
	if !p.closed {
		return nil
	}
	return p.closeErr
}

// flushWaiter is one Flush call: it waits for the batches that existed
// when it was called (numbered below limit), remaining of which are not
// delivered yet.
type flushWaiter struct {
	limit     uint64
	remaining int
	done      chan struct{}
}

// Close flushes (bounded by ctx), then stops every goroutine of the producer
// and fails what is left with errors.ErrClosed (and errors.ErrUnknownOutcome
// for records that may have been written). Every callback has run when it
// returns.
//
// A transactional producer first waits for the InitTransactions,
// CommitTransaction or AbortTransaction under way, then aborts the
// transaction left open (as Java's close does), both bounded by ctx and the
// DeliveryTimeout; SendOffsetsToTransaction calls return ErrClosed at
// once. An operation still under way then ends as CommitTransaction
// describes, and Close returns why an open transaction was not aborted
// (with it, its records are aborted when the coordinator's transaction
// timeout passes, or when the next producer with the transactional ID
// initializes). Close with ctx already ended waits for nothing and aborts
// nothing: the transaction is left as a crash would leave it.
func (p *Producer) Close(ctx context.Context) error {
	if ctx == nil {
		return nilContext("Close")
	}
	ferr := p.Flush(ctx)
	if errors.Is(ferr, errors.ErrClosed) {
		ferr = nil // stopped already (a shared refresher closed): nothing was left to flush
	}
	first, terr := p.stop(ctx, errors.ErrClosed)
	p.clientOnce.Do(func() {
		if p.ownMeta {
			p.meta.Close()
		}
		p.cl.Close()
	})
	if !first {
		return nil
	}
	return errors.Join(ferr, terr)
}

// refresherClosed stops the producer when the refresher shared with
// WithMetadata is closed under it: without metadata a partition whose
// leader moves would hold its records until their delivery timeout, and
// Produce would take records for it. Run on a goroutine of its own (stop
// waits for the producer's goroutines, the metadata loop that calls it
// among them). An open transaction is left as a crash leaves it.
func (p *Producer) refresherClosed(err error) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	p.stop(ended, fmt.Errorf("producer: its metadata refresher was closed while the producer runs (close a shared refresher after its producers): %w", err))
}

// stop stops every goroutine of the producer and fails what is left with
// err (matching errors.ErrClosed; with errors.ErrUnknownOutcome for records
// that may have been written), which calls return from then on. A
// transactional producer first waits for the operation under way and aborts
// the transaction left open, bounded by ctx (closeTxnLocked); terr says why
// an open transaction was not aborted. It reports whether this call stopped
// the producer; either way every callback has run when it returns.
func (p *Producer) stop(ctx context.Context, err error) (first bool, terr error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.cbDone
		return false, nil
	}
	p.closed = true
	p.closeErr = err
	p.closeBegin()
	for _, unwatch := range p.watching {
		unwatch()
	}
	close(p.spaceWake) // blocked Produce calls return the close error
	p.spaceWake = make(chan struct{})
	if p.txn != nil {
		terr = p.closeTxnLocked(ctx)
	}
	p.mu.Unlock()
	p.cancel()
	p.sub.Close()
	p.wg.Wait()
	p.mu.Lock()
	unknown := errors.Join(err, errors.ErrUnknownOutcome)
	if p.txn != nil {
		// The txn loop stopped: the waiting InitTransactions, Commit or
		// Abort gets no other answer. The TxnState says what is known
		// of it (a commit no EndTxn of which can have reached the
		// coordinator did not commit; one whose EndTxn may have has an
		// unknown outcome; one answered NONE, with only the epoch bump
		// after it left, committed). A request still in txnSend was
		// never sent.
		step := p.txn.Stop(p.txnSend != nil, err)
		p.txnSend = nil
		if p.txnDone != nil {
			derr := err
			if step.Done {
				derr = step.Err
			}
			p.txnDone <- derr
			p.txnDone = nil
		}
	}
	for _, ps := range p.parts {
		ps.failAll(p, err)
		if b := ps.inflight; b != nil {
			ps.inflight = nil
			p.finishLocked(b, unknown, -1, nil)
		}
	}
	if p.seq != nil {
		// Batches the Sequencer tracks: it knows whether an attempt may
		// have been written.
		refs := make([]BatchRef, 0, len(p.batches))
		for ref := range p.batches {
			refs = append(refs, ref)
		}
		slices.Sort(refs)
		for _, ref := range refs {
			b := p.batches[ref]
			if b == nil {
				continue
			}
			berr := unknown
			for _, o := range p.seq.Abandon(ref, err).Outcomes {
				if f, ok := o.(Failed); ok && f.Batch == ref && !f.MaybeWritten {
					berr = err
				}
			}
			delete(p.batches, ref)
			p.finishLocked(b, berr, -1, nil)
		}
	}
	p.cbStop = true
	p.queueFnLocked(func() {})
	p.mu.Unlock()
	<-p.cbDone
	return true, terr
}

// hasLeader reports whether metadata names a leader for the partition.
func (p *Producer) hasLeader(topic string, partition int32) bool {
	lp, err := p.meta.Lookup(topic, partition)
	return err == nil && lp.Leader >= 0
}

// topic returns the partition count and topic ID, waiting for metadata
// until the topic has at least need partitions (need >= 1), for
// MetadataWait at most: a topic not yet known, or partitions just added to
// it, show in a refresh. The waits' refreshes are the shared refresher's,
// spaced by its backoff.
func (p *Producer) topic(ctx context.Context, name string, need int32) (int32, [16]byte, error) {
	if sh := p.lastShape.Load(); sh != nil && sh.name == name && sh.version == p.meta.Version() && sh.partitions >= need {
		return sh.partitions, sh.id, nil
	}
	if _, ok := p.watched.Load(name); !ok {
		// A topic the producer holds no partition state of: watched
		// for this lookup only. The producer's own watch starts with
		// the topic's first partition state (pstateLocked) and ends
		// when it is dropped (dropGoneLocked): a lookup that fails
		// (a topic deleted, or never created) leaves no watch behind,
		// which the refresher would ask about for good.
		unwatch := p.meta.Watch(name)
		defer unwatch()
	}
	t, v, err := p.meta.TopicAt(name)
	if err != nil || len(t.Partitions) < int(need) {
		// Only the partition count is needed, not any partition's
		// leader; Close ends the wait (a shared refresher is not
		// closed with the producer), and so does MetadataWait.
		wctx, cancel := context.WithTimeoutCause(ctx, p.cfg.metaWait, errMetadataWait)
		stop := context.AfterFunc(p.ctx, cancel)
		t, v, err = p.meta.WaitForPartitions(wctx, name, need)
		stop()
		cancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case p.ctx.Err() != nil:
				p.mu.Lock()
				err = p.closeErr
				p.mu.Unlock()
			case context.Cause(wctx) == errMetadataWait:
				err = p.metadataTimeout(name, need)
			}
			return 0, [16]byte{}, err
		}
	}
	if len(t.Partitions) > 0 {
		p.lastShape.Store(&topicShape{name: name, version: v, partitions: int32(len(t.Partitions)), id: t.ID})
	}
	return int32(len(t.Partitions)), t.ID, nil
}

// watchLocked makes the producer watch topic, if it does not already: from
// its first partition state (pstateLocked) until Close, or until the topic
// is deleted and its state dropped (dropGoneLocked).
func (p *Producer) watchLocked(name string) {
	if _, ok := p.watching[name]; !ok && !p.closed {
		p.watching[name] = p.meta.Watch(name)
		p.watched.Store(name, struct{}{})
	}
}

// dropGoneLocked drops what the producer keeps of each topic metadata
// removed (p.gone) once nothing of it is left to send or report: its
// partition states, their sequences (Sequencer.Forget, which keeps a
// compact copy of them under the topic's ID) and ack ledgers, the
// partitioner's entry, and its watch, so that the refresher, which a
// deleted topic no one watches is only a small tombstone to, and the
// producer stay bounded when many topics are created and deleted. A
// topic metadata holds partitions of again is no longer gone. Records
// taken for a removed topic still fail as before (at their delivery
// timeout); its state goes once they are reported. Producing to the topic
// again watches it again and waits for its partitions as for a new topic;
// under the same topic ID (metadata called it removed wrongly) its
// partitions continue their sequences (Sequencer.Revive, from
// setTopicIDLocked): restarted at 0 under the same producer identity, a
// batch whose sequences matched one of the partition's last five would be
// taken by the broker for a duplicate and acknowledged at the old
// batch's offset without being written. Beyond
// MaxForgottenPartitions remembered partitions the oldest copies go, and
// with them that protection for their topics.
func (p *Producer) dropGoneLocked() {
	for name := range p.gone {
		if _, err := p.meta.Topic(name); err == nil {
			delete(p.gone, name) // back: recreated, or its removal was wrong
			continue
		}
		var tps []TopicPartition
		var topicID [16]byte
		idle := true
		for _, ps := range p.byTopic[name] {
			if ps == nil {
				continue
			}
			if ps.open != nil || len(ps.queue) > 0 || ps.inflight != nil || len(ps.order) > 0 {
				idle = false
				break
			}
			if p.txn != nil && p.txn.Holds(ps.tp) {
				// Kept until the transaction ends (the expiry
				// loop's tick drops it then): a recreation of the
				// topic makes a transaction that had a record of it
				// acknowledged abortable (TxnState.NewIncarnation),
				// which a partition state started afresh would
				// take for a first sighting, committing without it.
				idle = false
				break
			}
			tps = append(tps, ps.tp)
			topicID = ps.topicID
		}
		if !idle || (p.seq != nil && !p.seq.Forget(topicID, tps...)) {
			continue
		}
		for _, tp := range tps {
			delete(p.parts, tp)
			p.ledger.Forget(tp)
		}
		delete(p.byTopic, name)
		if p.lastTopic == name {
			p.lastTopic, p.lastParts = "", nil
		}
		if sh := p.lastShape.Load(); sh != nil && sh.name == name {
			p.lastShape.CompareAndSwap(sh, nil)
		}
		if unwatch, ok := p.watching[name]; ok {
			unwatch()
			delete(p.watching, name)
		}
		p.watched.Delete(name)
		if f, ok := p.part.(topicForgetter); ok {
			f.forgetTopic(name)
		}
		delete(p.gone, name)
	}
}

// errMetadataWait is the cause of a topic wait cut by MetadataWait.
var errMetadataWait = errors.New("metadata wait over")

// metadataTimeout is Produce's error for a topic whose partitions did not
// arrive within MetadataWait: ErrMetadataTimeout with the topic's last
// error from metadata, or, when the topic is known with fewer than need
// partitions (a record for partition need-1), the missing partition's
// error, "no such partition".
func (p *Producer) metadataTimeout(name string, need int32) error {
	last := fmt.Errorf("topic has no partitions")
	t, _, err := p.meta.TopicAt(name)
	if err != nil {
		last = err
		if pe, ok := errors.AsType[*errors.PartitionError](err); ok {
			last = pe.Err
		}
	} else if n := int32(len(t.Partitions)); n < need {
		return &errors.PartitionError{Op: "produce", Topic: name, Partition: need - 1, Offset: -1, LeaderEpoch: -1,
			Err: fmt.Errorf("%w after %v: no such partition (topic has %d)", errors.ErrMetadataTimeout, p.cfg.metaWait, n)}
	}
	return &errors.PartitionError{Op: "produce", Topic: name, Partition: -1, Offset: -1, LeaderEpoch: -1,
		Err: fmt.Errorf("%w after %v: %w", errors.ErrMetadataTimeout, p.cfg.metaWait, last)}
}

// topicShape is what Produce needs of a topic, as of one metadata Version:
// while the refresher's Version is still that, the topic is unchanged (and
// watched: a shape is kept only after the watch began).
type topicShape struct {
	name       string
	version    metadata.Version
	partitions int32
	id         [16]byte
}

// clock reads the time for record timestamps at the cost of one monotonic
// clock read: the wall clock is read once per clockRebase (and whenever the
// monotonic clock seems to run backwards) and advanced by the monotonic
// clock in between. time.Now reads both clocks; on virtual machines each
// read is a vDSO call of 20 ns or more, a tenth of the producer's work per
// small record. A step of the wall clock shows in timestamps within
// clockRebase; a record's timestamp has millisecond precision.
type clock struct {
	base atomic.Pointer[time.Time]
}

const clockRebase = time.Millisecond

func (c *clock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < clockRebase {
			return b.Add(d)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}

func (p *Producer) wakeSinksLocked() {
	for _, s := range p.sinks {
		s.wakeUp()
	}
}

func toBatchHeaders(hs []Header) []recbatch.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]recbatch.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = recbatch.RecordHeader{Key: []byte(h.Key), Value: h.Value}
	}
	return out
}
