package producer

// txnstate_model_test.go: a randomized model test of TxnState driving a
// transactional Sequencer. The partitions are the model brokers of
// recovery_model_test.go (sequence validation, deduplication); a model
// transaction coordinator bumps epochs on InitProducerId (rotating the
// producer ID at exhaustion), answers repeats of completed requests, bumps on
// every EndTxn under transactions V2, and fences any stale identity.
// Requests and answers are lost, batches refused or appended-then-refused,
// and an EndTxn whose answer was lost may arrive again much later
// (KAFKA-17754); an applied AddPartitionsToTxn whose answer was lost may
// be resent by the transport, and the resend refused; an
// AddPartitionsToTxn, EndTxn or AddOffsetsToTxn/TxnOffsetCommit may be
// applied and answered COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS (a transaction-log append that timed out,
// or whose log partition moved), to the client or to the transport, which
// retries it by itself, and those codes may refuse the coordinator's
// lookup instead (nothing sent). The application also
// commits consumed offsets (SendOffsetsToTransaction: AddOffsetsToTxn,
// then TxnOffsetCommit, each
// attempt a step interleaved with the rest); a model group coordinator
// stages a TxnOffsetCommit in the coordinator's ongoing transaction if its
// identity is current and the transaction has the group (as Kafka's
// partition verification does), and a TxnOffsetCommit that was lost or
// resent may arrive again later. Invariants:
//
//  1. the client believes a transaction committed exactly when the
//     coordinator committed it; a committed transaction's records are all
//     in the log, each once, in produce order per partition;
//  2. nothing the client sends is ever fenced (there is a single producer
//     instance; only delayed duplicates are), and no Produce answer reports
//     a sequence gap (no broker lost state);
//  3. a record reported Failed with MaybeWritten false is not in the log;
//  4. at most one coordinator request is outstanding; EndTxn is sent only
//     once the Sequencer is drained;
//  5. every operation completes once faults heal;
//  6. a committed transaction's offsets are only those sent in it (a late
//     copy of an earlier transaction's TxnOffsetCommit is never committed);
//  7. a transaction the client has ended is not open at the coordinator.
//
// In half the runs topics are also deleted and created again (as in
// recovery_model_test.go, also while a request is on the wire or EndTxn is on
// its way), and the client learns of it through TxnState.NewIncarnation:
//
//  8. a transaction with a batch acknowledged by an incarnation the client
//     learned deleted before it sent EndTxn(commit) (or whose
//     acknowledgement it handled after learning) never commits: it becomes
//     abortable with ErrTopicIDChanged, a Commit waiting for its batches
//     fails with ErrAbortRequired wrapping it, and so does Commit after;
//     learned once EndTxn(commit) is sent, the recreation changes nothing;
//  9. no recreation causes a gap report, and a committed transaction's
//     records are in the topic once, but for those acknowledged by an
//     incarnation deleted after EndTxn(commit) was sent.

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	kepocherrors "github.com/kepoch/kepoch/errors"
)

type mCoordinator struct {
	producer ProducerID
	prev     ProducerID // identity before the last bump (answers a lost-answer retry)
	tv2      bool
	txn      int  // transaction the coordinator considers ongoing (0: none)
	ended    bool // the last EndTxn completed
	result   bool // its result (commit)
	endedBy  ProducerID
	nextPID  int64
	fenced   int
	zombies  []EndTxnRequest // EndTxn copies delayed in the network (KAFKA-17754)

	offsetsIn  bool       // the ongoing transaction has the group's offsets partition
	staged     []int      // the transactions whose TxnOffsetCommits are staged in it
	offZombies []mOffsets // TxnOffsetCommit copies delayed in the network
}

// mOffsets is a TxnOffsetCommit: the identity it carries and the client
// transaction whose consumed offsets it stages.
type mOffsets struct {
	producer ProducerID
	txn      int
}

// offsetsOp is a SendOffsetsToTransaction under way: its AddOffsetsToTxn,
// then its TxnOffsetCommit, one attempt per step.
type offsetsOp struct {
	commit   bool       // at the TxnOffsetCommit
	producer ProducerID // the identity read when the call began
	attempts int
}

// zombie delivers a delayed duplicate EndTxn: it acts on whatever
// transaction is current if its identity still matches (the client must have
// bumped the epoch so that it cannot).
func (d *txnDriver) zombie() {
	c := d.coord
	if len(c.zombies) == 0 {
		return
	}
	z := c.zombies[0]
	c.zombies = c.zombies[1:]
	switch {
	case z.Producer != c.producer:
		d.stats["zombie-fenced"]++
	case c.txn != 0 && !c.ended:
		d.stats["zombie-applied"]++
		d.offsetsEnded(c.txn, z.Commit)
		if z.Commit {
			d.committed[c.txn] = true
		} else {
			d.aborted[c.txn] = true
		}
		c.ended, c.result, c.endedBy, c.txn = true, z.Commit, z.Producer, 0
		if c.tv2 {
			c.bump()
		}
	}
}

func (c *mCoordinator) bump() {
	c.prev = c.producer
	if c.producer.Epoch >= math.MaxInt16-1 {
		c.nextPID++
		c.producer = ProducerID{ID: c.nextPID, Epoch: 0}
		return
	}
	c.producer.Epoch++
}

type txnDriver struct {
	*mDriver
	tx        *TxnState
	coord     *mCoordinator
	coordReq  TxnRequest // the outstanding coordinator request, if any
	txnOf     map[int]int
	curTxn    int
	committed map[int]bool // by the coordinator
	aborted   map[int]bool
	clientOK  map[int]bool // commits the client saw succeed
	pendingOp bool         // Commit/Abort/Init in progress
	opCommit  bool         // the operation in progress is a Commit
	flushing  bool         // the application wants to commit: flush, then Commit
	offOp     *offsetsOp   // SendOffsetsToTransaction in progress (Commit and Abort wait for it)

	// commitSent: EndTxn(commit) of the transaction was sent. doomed: the
	// transaction had a batch acknowledged by a topic incarnation that the
	// client learned was deleted before it sent EndTxn(commit) (or the
	// acknowledgement came after it learned): it must not commit.
	commitSent map[int]bool
	doomed     map[int]bool
}

// offsetsEnded: the coordinator ended its transaction k; the offsets staged
// in it go with it, and a commit must carry only k's.
func (d *txnDriver) offsetsEnded(k int, commit bool) {
	c := d.coord
	if commit {
		for _, j := range c.staged {
			if j != k {
				d.fatalf("transaction %d committed offsets sent in transaction %d", k, j)
			}
		}
		if len(c.staged) > 0 {
			d.stats["offsets-committed"]++
		}
	}
	c.staged, c.offsetsIn = nil, false
}

// applyOffsets is the coordinators' handling of an AddOffsetsToTxn (commit
// false) or a TxnOffsetCommit reaching them.
func (d *txnDriver) applyOffsets(commit bool, m mOffsets) int16 {
	c := d.coord
	switch {
	case m.producer != c.producer:
		return kerr.ProducerFenced.Code
	case !commit:
		c.txn, c.ended, c.offsetsIn = d.curTxn, false, true
		return 0
	case c.txn == 0 || !c.offsetsIn:
		return kerr.InvalidTxnState.Code // verification: not in an ongoing transaction
	}
	c.staged = append(c.staged, m.txn)
	return 0
}

// offsetsZombie delivers a delayed TxnOffsetCommit copy.
func (d *txnDriver) offsetsZombie() {
	c := d.coord
	if len(c.offZombies) == 0 {
		return
	}
	z := c.offZombies[0]
	c.offZombies = c.offZombies[1:]
	if d.applyOffsets(true, z) == 0 {
		d.stats["offsets-zombie-staged"]++
	} else {
		d.stats["offsets-zombie-fenced"]++
	}
}

// offsetsStep makes one attempt of the SendOffsetsToTransaction under way,
// as the producer's I/O layer does, and feeds its outcome to the TxnState.
func (d *txnDriver) offsetsStep() {
	op := d.offOp
	if op == nil {
		return
	}
	c := d.coord
	fate := 100
	if d.faults {
		fate = d.rng.Intn(100)
	}
	lostRequest, lostAnswer, resent := fate < 5, fate >= 5 && fate < 10, fate >= 10 && fate < 14
	concurrent, refused := fate >= 14 && fate < 18, fate >= 18 && fate < 21
	// Applied, then answered with a code the coordinator may give after
	// its log append (answeredAfterAppend), or those codes refusing the
	// coordinator's lookup (nothing sent).
	afterAppend, lookup := fate >= 21 && fate < 24, fate >= 24 && fate < 26
	kind := OffsetsAdd
	if op.commit {
		kind = OffsetsCommit
	}
	res := OffsetsResult{Request: kind}
	switch {
	case concurrent:
		res.Codes = []int16{kerr.ConcurrentTransactions.Code}
	case refused:
		res.Codes = []int16{[]int16{kerr.UnknownProducerID.Code, kerr.InvalidProducerIDMapping.Code,
			kerr.GroupAuthorizationFailed.Code, kerr.IllegalGeneration.Code}[d.rng.Intn(4)]}
	case lostRequest:
		res.Delivery, res.Err = NoResponse, errModelNoAnswer
	case lookup:
		res.Codes, res.Lookup = []int16{answeredAfterAppendCodes[d.rng.Intn(3)]}, true
	default:
		code := d.applyOffsets(op.commit, mOffsets{op.producer, d.curTxn})
		if code == kerr.ProducerFenced.Code {
			c.fenced++
		}
		res.Codes, res.Resent = []int16{code}, resent
		if afterAppend && code == 0 {
			d.stats["offsets-answered-after-append"]++
			res.Codes = []int16{answeredAfterAppendCodes[d.rng.Intn(3)]}
		}
		if lostAnswer {
			res = OffsetsResult{Request: kind, Delivery: NoResponse, Err: errModelNoAnswer}
		}
	}
	if op.commit && (lostRequest || lostAnswer || resent) && d.rng.Intn(2) == 0 {
		c.offZombies = append(c.offZombies, mOffsets{op.producer, d.curTxn})
	}
	op.attempts++
	st := d.tx.HandleOffsets(res)
	d.trace("offsets %+v -> retry=%v err=%v", res, st.Retry, st.Err)
	d.step(st.Txn)
	switch {
	case st.Err != nil:
		d.stats["offsets-failed"]++
		d.offOp = nil
	case st.Retry && op.attempts > 6:
		// The caller's context ends.
		st = d.tx.HandleOffsets(OffsetsResult{Request: kind, Delivery: NotSent, Err: errModelNoAnswer})
		if st.Err == nil {
			d.fatalf("SendOffsetsToTransaction given up without an error")
		}
		d.step(st.Txn)
		d.offOp = nil
	case st.Retry:
	case !op.commit:
		op.commit, op.attempts = true, 0
	default:
		d.stats["offsets-sent"]++
		d.offOp = nil
	}
}

func (d *txnDriver) step(s TxnStep) {
	d.t.Helper()
	d.trace("txn step send=%+v find=%v drain=%v done=%v err=%v state=%v", s.Send, s.FindCoordinator, s.WaitDrain, s.Done, s.Err, d.tx.State())
	d.handle(s.Decision)
	if s.Send != nil {
		if d.coordReq != nil {
			d.fatalf("second coordinator request %#v while %#v is outstanding", s.Send, d.coordReq)
		}
		if e, ok := s.Send.(*EndTxnRequest); ok && !d.seq.Drained() {
			d.fatalf("EndTxn sent before the Sequencer drained")
		} else if ok && e.Commit {
			d.commitSent[d.curTxn] = true
		}
		d.coordReq = s.Send
	}
	if s.Done {
		if s.Err != nil && d.tx.State() == TxnFatalError {
			d.fatalf("fatal: %v", s.Err)
		}
		if d.pendingOp && d.opCommit && s.Err == nil {
			if d.doomed[d.curTxn] {
				d.fatalf("transaction %d reported committed with a batch acknowledged by a deleted incarnation", d.curTxn)
			}
			d.clientOK[d.curTxn] = true
		}
		if d.tx.State() == TxnReady && d.curTxn != 0 && d.coord.txn == d.curTxn {
			d.fatalf("transaction %d ended by the client is still open at the coordinator", d.curTxn)
		}
		d.pendingOp, d.opCommit = false, false
	}
}

// handle applies a produce decision and feeds it to the TxnState.
func (d *txnDriver) produceDecision(dec Decision) {
	d.t.Helper()
	for _, o := range dec.Outcomes {
		switch o.(type) {
		case ProvenGap, PossibleGap:
			d.fatalf("gap reported without any broker state loss: %+v", o)
		}
	}
	if dec.Abortable != nil && errorsIsCode(dec.Abortable.Err, kerr.InvalidProducerEpoch.Code) {
		d.fatalf("produce fenced: %v", dec.Abortable.Err)
	}
	abortable, fatal := dec.Abortable, dec.Fatal
	dec.Abortable, dec.Fatal = nil, nil
	d.handle(dec)
	dec = Decision{Abortable: abortable, Fatal: fatal}
	d.step(d.tx.HandleProduce(dec))
}

func errorsIsCode(err error, code int16) bool {
	ke, ok := err.(*kerr.Error)
	return ok && ke.Code == code
}

// answerCoordinator answers the outstanding coordinator request.
func (d *txnDriver) answerCoordinator() {
	req := d.coordReq
	if req == nil {
		return
	}
	if _, ok := req.(*EndTxnRequest); ok && d.rrng != nil {
		// The topic may be recreated while EndTxn is on its way.
		d.recreateSometimes(d.parts[d.rrng.Intn(len(d.parts))].tp, 30)
	}
	d.coordReq = nil
	c := d.coord
	fate := 100
	if d.faults {
		fate = d.rng.Intn(100)
	}
	lostRequest, lostAnswer, concurrent := fate < 6, fate >= 6 && fate < 12, fate >= 12 && fate < 16
	switch r := req.(type) {
	case *InitProducerIDRequest:
		var res InitProducerIDResult
		switch {
		case lostRequest:
			res.Delivery = NoResponse
		case concurrent:
			res.Code = kerr.ConcurrentTransactions.Code
		case r.Producer == NoProducerID || r.Producer == c.producer:
			if r.Producer != NoProducerID {
				d.stats["init-bump"]++
			}
			before := c.producer.ID
			c.bump()
			if c.producer.ID != before {
				d.stats["pid-rotation"]++
			}
			d.offsetsEnded(c.txn, false) // InitProducerId aborts the ongoing transaction
			c.txn = 0
			res.Producer = c.producer
		case r.Producer == c.prev:
			res.Producer = c.producer // a retry after a lost answer
		default:
			c.fenced++
			res.Code = kerr.ProducerFenced.Code
		}
		if lostAnswer {
			res = InitProducerIDResult{Delivery: NoResponse}
		}
		d.trace("coordinator %+v -> %+v", *r, res)
		s, err := d.tx.HandleInitProducerID(res)
		if err != nil {
			d.fatalf("HandleInitProducerID: %v", err)
		}
		d.step(s)
	case *AddPartitionsRequest:
		var res []AddPartitionResult
		delivery, retriedAnswered := Answered, false
		switch {
		case lostRequest:
			delivery = NoResponse
		case r.Producer != c.producer:
			c.fenced++
			for _, tp := range r.Partitions {
				res = append(res, AddPartitionResult{TP: tp, Code: kerr.ProducerFenced.Code})
			}
		default:
			// CONCURRENT_TRANSACTIONS is answered before anything is
			// applied; REQUEST_TIMED_OUT may come after the add was,
			// and so may COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
			// and COORDINATOR_LOAD_IN_PROGRESS (Kafka's answers when
			// the append to the transaction log timed out or failed
			// after the append, or succeeded while the log partition
			// moved: the next coordinator loads it), which may also
			// come before (the coordinator was unloading). The same
			// codes may refuse the coordinator's lookup (Lookup):
			// nothing was sent.
			code, applied, lookup := int16(0), true, false
			if concurrent {
				switch d.rng.Intn(5) {
				case 0:
					d.stats["add-timed-out"]++
					code = kerr.RequestTimedOut.Code
				case 1:
					code, applied = answeredAfterAppendCodes[d.rng.Intn(3)], d.rng.Intn(2) == 0
					if applied {
						d.stats["add-answered-after-append"]++
					}
				case 2:
					code, applied, lookup = answeredAfterAppendCodes[d.rng.Intn(3)], false, true
				case 3:
					// The transport sent it again by itself after
					// such an answer to an applied attempt, and the
					// retry was refused CONCURRENT_TRANSACTIONS: the
					// I/O layer says resent.
					d.stats["add-retried-answered"]++
					code, retriedAnswered = kerr.ConcurrentTransactions.Code, true
				default:
					code, applied = kerr.ConcurrentTransactions.Code, false
				}
			}
			if applied {
				c.txn, c.ended = d.curTxn, false
			}
			for _, tp := range r.Partitions {
				res = append(res, AddPartitionResult{TP: tp, Code: code, Lookup: lookup})
			}
		}
		resent := retriedAnswered
		if lostAnswer {
			delivery, res = NoResponse, nil
			if !lostRequest && r.Producer == c.producer && d.rng.Intn(2) == 0 {
				// The transport resent the applied request on a new
				// connection, and the coordinator refused the resend
				// (for good, or to be sent again), or the resend could
				// not be sent at all.
				d.stats["add-resend-refused"]++
				delivery, resent = Answered, true
				switch d.rng.Intn(3) {
				case 0:
					for _, tp := range r.Partitions {
						res = append(res, AddPartitionResult{TP: tp, Code: kerr.TransactionAbortable.Code})
					}
				case 1:
					d.stats["add-resend-retriable"]++
					for _, tp := range r.Partitions {
						res = append(res, AddPartitionResult{TP: tp, Code: kerr.ConcurrentTransactions.Code})
					}
				default:
					d.stats["add-resend-unsent"]++
					delivery = NotSent
				}
			}
		}
		d.trace("coordinator %+v -> %v %+v resent=%v", *r, delivery, res, resent)
		s, err := d.tx.HandleAddPartitions(delivery, res, resent)
		if err != nil {
			d.fatalf("HandleAddPartitions: %v", err)
		}
		d.step(s)
	case *EndTxnRequest:
		res := EndTxnResult{Producer: NoProducerID}
		// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or
		// COORDINATOR_LOAD_IN_PROGRESS after the EndTxn was applied:
		// the append of its state timed out or failed after the
		// append, or the log partition moved, and the next coordinator
		// loaded it; answered to the client, or retried by the
		// transport, whose retry the coordinator refused
		// CONCURRENT_TRANSACTIONS (RetriedAnswered). Or the same codes
		// refusing the coordinator's lookup: nothing was sent.
		afterAppend, applied := concurrent && d.rng.Intn(2) == 0, false
		switch {
		case lostRequest:
			res.Delivery = NoResponse
		case concurrent && !afterAppend && d.rng.Intn(2) == 0:
			res.Code, res.Lookup = answeredAfterAppendCodes[d.rng.Intn(3)], true
		case concurrent && !afterAppend:
			res.Code = kerr.ConcurrentTransactions.Code
		case c.ended && r.Producer == c.endedBy && r.Commit == c.result:
			if c.tv2 {
				res.Producer = c.producer // a repeat of a completed EndTxn
			}
		case c.txn == 0 && c.tv2 && !r.Commit && r.Producer == c.producer:
			// Transactions V2 allow aborting an empty transaction,
			// with a bump (the client may not know whether an
			// implicit add happened).
			d.aborted[d.curTxn] = true
			c.ended, c.result, c.endedBy = true, false, r.Producer
			c.bump()
			res.Producer, applied = c.producer, true
		case c.txn == 0:
			res.Code = kerr.InvalidTxnState.Code // state Empty: no transaction to end
		case r.Producer != c.producer:
			c.fenced++
			res.Code = kerr.ProducerFenced.Code
		default:
			d.offsetsEnded(d.curTxn, r.Commit)
			if r.Commit {
				d.committed[d.curTxn] = true
			} else {
				d.aborted[d.curTxn] = true
			}
			c.ended, c.result, c.endedBy, c.txn = true, r.Commit, r.Producer, 0
			if c.tv2 {
				c.bump()
				res.Producer = c.producer
			}
			applied = true
		}
		if afterAppend && applied {
			if d.rng.Intn(3) == 0 {
				d.stats["endtxn-retried-answered"]++
				res = EndTxnResult{Code: kerr.ConcurrentTransactions.Code, Producer: NoProducerID, RetriedAnswered: true}
			} else {
				d.stats["endtxn-answered-after-append"]++
				res = EndTxnResult{Code: answeredAfterAppendCodes[d.rng.Intn(3)], Producer: NoProducerID}
			}
		}
		if lostAnswer {
			res = EndTxnResult{Delivery: NoResponse}
		}
		if (lostAnswer || lostRequest) && d.rng.Intn(2) == 0 {
			c.zombies = append(c.zombies, *r)
		}
		d.trace("coordinator %+v -> %+v", *r, res)
		s, err := d.tx.HandleEndTxn(res)
		if err != nil {
			d.fatalf("HandleEndTxn: %v", err)
		}
		d.step(s)
	}
}

// produceStep runs one produce-side action of the current transaction:
// maybe produce records, send a retry or a new batch, answer a request.
func (d *txnDriver) produceStep(tp TopicPartition) {
	if d.tx.State() == TxnInTransaction && !d.flushing && d.tx.CanProduce(tp) == nil && d.rng.Intn(2) == 0 {
		for n := 1 + d.rng.Intn(2); n > 0; n-- {
			d.nextRec++
			d.pending[tp] = append(d.pending[tp], d.nextRec)
			d.status[d.nextRec] = &recStatus{}
			d.recTP[d.nextRec] = tp
			d.txnOf[d.nextRec] = d.curTxn
		}
	}
	if _, _, retry := d.seq.NextResend(tp); retry || d.tx.CanProduce(tp) == nil {
		d.send(tp)
	}
	if len(d.byTP[tp].queue) > 0 {
		// With a request on the wire, the topic may be recreated.
		d.recreateSometimes(tp, 100)
		d.processTxn(tp)
	}
	if d.flushing && d.offOp == nil && d.tx.State() == TxnInTransaction && len(d.pending[tp0])+len(d.pending[tp1])+len(d.pending[tp2]) == 0 {
		d.flushing, d.pendingOp, d.opCommit = false, true, true
		s, err := d.tx.Commit()
		if err != nil {
			d.fatalf("Commit: %v", err)
		}
		d.step(s)
	}
}

// abort fails the records the application still buffers, then aborts.
// unsent: the coordinator request handed out (an AddPartitionsToTxn) has
// not been sent yet (the producer's loop sleeps the retry backoff before
// sending it): the TxnState gets it back, and the driver sends instead
// what the abort's step hands out.
func (d *txnDriver) abort(unsent bool) {
	for _, m := range d.parts { // in order: a run is its seed's alone
		for _, r := range d.pending[m.tp] {
			d.status[r].failed = true
		}
		d.pending[m.tp] = nil
	}
	d.flushing, d.pendingOp, d.opCommit = false, true, false
	s, err := d.tx.Abort(unsent)
	if err != nil {
		d.fatalf("Abort: %v", err)
	}
	if unsent {
		d.coordReq = nil
	}
	if _, ok := s.Send.(*AddPartitionsRequest); ok {
		d.fatalf("the abort sends %#v", s.Send)
	}
	d.step(s)
}

// processTxn is process() with the decision routed through the TxnState.
func (d *txnDriver) processTxn(tp TopicPartition) {
	m := d.byTP[tp]
	req := m.queue[0]
	m.queue = m.queue[1:]
	if req.inc != m.inc {
		dec := d.completeGone(req)
		if len(dec.Acks) > 0 && req.inc != d.known[tp] {
			// The producer's sink: a batch acknowledged by an incarnation
			// known deleted is reported failed, and the transaction
			// cannot commit it.
			d.doomed[d.curTxn] = true
			if dec.Abortable == nil {
				dec.Abortable = &AbortableError{Err: kepocherrors.ErrTopicIDChanged}
			}
		}
		d.produceDecision(dec)
		return
	}
	d.curInc = m.inc
	fate := 100
	if d.faults {
		fate = d.rng.Intn(100)
	}
	var res ProduceResult
	switch {
	case fate < 5:
		res = ProduceResult{Delivery: NoResponse}
	case fate < 8:
		res = ProduceResult{Delivery: NotSent}
	case fate < 10:
		res = answered(kerr.NotLeaderForPartition.Code)
	case fate < 12 && len(req.recs) > 1:
		res = answered(kerr.MessageTooLarge.Code)
	case fate < 13:
		res = answered(kerr.InvalidRecord.Code)
	default:
		code, base := d.append(m, req)
		res = ProduceResult{Code: code, BaseOffset: base, LogStartOffset: m.logStart, ByTopicID: true}
		switch {
		case fate < 18:
			res = ProduceResult{Delivery: NoResponse}
		case fate < 20 && code == 0:
			res = answered(kerr.NotLeaderForPartition.Code)
		}
	}
	d.produceDecision(d.seq.Complete(req.ref, res))
}

// onAppend is the brokers' side of an append attempt: an implicit add to
// the transaction, and no refusal of the next batch.
func (d *txnDriver) onAppend(_ *mPartition, req mRequest, code int16) {
	if code == 0 && d.coord.tv2 && d.coord.txn == 0 && req.id.Producer == d.coord.producer {
		d.coord.txn, d.coord.ended = d.curTxn, false // implicit add (KIP-890)
	}
	if code == kerr.InvalidProducerEpoch.Code || code == kerr.OutOfOrderSequenceNumber.Code && d.isNext(req) {
		d.fatalf("broker answered %v to %v (next batch)", codeError(code), req.id)
	}
}

// newIncarnation tells the TxnState of tp's recreation, as the producer
// does, and checks what it does with the open transaction: one with a
// batch acknowledged by the deleted incarnation becomes abortable with
// ErrTopicIDChanged (a Commit waiting for its batches ends with
// ErrAbortRequired), unless EndTxn(commit) is already sent.
func (d *txnDriver) newIncarnation(tp TopicPartition) {
	before := d.tx.State()
	open := before == TxnInTransaction || before == TxnCommitting || before == TxnAbortableError
	acked := false
	for _, r := range slices.Sorted(maps.Keys(d.txnOf)) {
		if st, k := d.status[r], d.txnOf[r]; k == d.curTxn && d.recTP[r] == tp && st.ackedSeen && st.ackInc != d.known[tp] {
			acked = true
		}
	}
	doomed := open && acked && !d.commitSent[d.curTxn]
	switch {
	case doomed && before == TxnCommitting:
		d.stats["recreated-commit-failed"]++
	case doomed:
		d.stats["recreated-txn-doomed"]++
	case open && acked:
		d.stats["recreated-after-end-txn"]++
	}
	if doomed {
		d.doomed[d.curTxn] = true
		if before != TxnAbortableError && !d.tx.Holds(tp) {
			// The producer would have dropped tp's state when its topic
			// went, and taken the recreation for a first sighting.
			d.fatalf("%v, acknowledged in transaction %d (%v), not held by it", tp, d.curTxn, before)
		}
	}
	step := d.tx.NewIncarnation(tp)
	a := step.Decision.Abortable
	step.Decision.Abortable = nil
	for _, o := range step.Decision.Outcomes {
		switch o.(type) {
		case ProvenGap, PossibleGap:
			d.fatalf("gap reported for a recreation: %+v", o)
		}
	}
	switch {
	case doomed && before != TxnAbortableError:
		if a == nil || !errors.Is(a.Err, kepocherrors.ErrTopicIDChanged) || d.tx.State() != TxnAbortableError ||
			!errors.Is(d.tx.Err(), kepocherrors.ErrTopicIDChanged) {
			d.fatalf("recreation of %v in %v with a batch acknowledged: abortable %+v, state %v (%v)", tp, before, a, d.tx.State(), d.tx.Err())
		}
		if before == TxnCommitting && (!step.Done || !errors.Is(step.Err, ErrAbortRequired) || !errors.Is(step.Err, kepocherrors.ErrTopicIDChanged)) {
			d.fatalf("commit of transaction %d ended %+v by a recreation; want ErrAbortRequired wrapping ErrTopicIDChanged", d.curTxn, step)
		}
		if _, err := d.tx.Commit(); !errors.Is(err, ErrAbortRequired) || !errors.Is(err, kepocherrors.ErrTopicIDChanged) {
			d.fatalf("Commit after the recreation: %v", err)
		}
	case !doomed && a != nil:
		d.fatalf("recreation of %v in %v made the transaction abortable: %v", tp, before, a.Err)
	}
	d.step(step)
}

// isNext reports whether req is its partition's next expected batch.
func (d *txnDriver) isNext(req mRequest) bool {
	b := d.seq.batches[req.ref]
	return b != nil && b.part.isNext(b)
}

// appStep makes the application move the transaction on.
func (d *txnDriver) appStep() {
	if _, adding := d.coordReq.(*AddPartitionsRequest); adding && !d.pendingOp && d.offOp == nil && d.rng.Intn(4) == 0 {
		// The application aborts while the add waits to be sent: it
		// is dropped, and EndTxn sent only if an attempt sent before
		// may have started the transaction.
		if st := d.tx.State(); st == TxnInTransaction || st == TxnAbortableError {
			d.stats["abort-add-unsent"]++
			d.abort(true)
		}
		return
	}
	if d.pendingOp || d.coordReq != nil {
		return
	}
	switch d.tx.State() {
	case TxnReady:
		d.curTxn++
		if err := d.tx.Begin(); err != nil {
			d.fatalf("Begin: %v", err)
		}
		for _, m := range d.parts {
			if d.rng.Intn(2) == 0 {
				s, err := d.tx.AddPartition(m.tp)
				if err != nil {
					d.fatalf("AddPartition: %v", err)
				}
				d.step(s)
			}
		}
	case TxnInTransaction:
		if d.offOp == nil && !d.flushing && d.rng.Intn(3) == 0 {
			d.offOp = &offsetsOp{producer: d.seq.Producer()}
			return
		}
		if d.flushing || d.offOp != nil || d.rng.Intn(4) != 0 {
			return
		}
		if d.rng.Intn(4) == 0 {
			d.abort(false)
		} else {
			d.flushing = true
		}
	case TxnAbortableError:
		if d.offOp == nil {
			d.abort(false)
		}
	}
}

// runTxnModel runs the model for seed; trace, if not nil, receives its
// trace (every coordinator and offsets request with its answer, every
// step the TxnState hands out, every Sequencer decision).
func runTxnModel(t *testing.T, seed int64, steps int, trace func(string)) map[string]int {
	rng := rand.New(rand.NewSource(seed))
	seq, err := NewSequencer(Config{Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	base := &mDriver{
		t: t, rng: rng, seq: seq, led: NewAckLedger(0), byTP: map[TopicPartition]*mPartition{}, faults: true,
		pending: map[TopicPartition][]int{}, batchRecs: map[BatchRef][]int{}, status: map[int]*recStatus{},
		recTP: map[int]TopicPartition{}, possDup: map[int]bool{}, lostRep: map[int]bool{}, bySeq: map[seqKey]int{},
		stats: map[string]int{}, incs: map[TopicPartition][]*mPartition{}, known: map[TopicPartition]int{},
		sentInc: map[BatchRef]int{}, possDupRe: map[int]bool{}, traceTo: trace,
	}
	if rrng := rand.New(rand.NewSource(^seed)); rrng.Intn(2) == 0 {
		base.rrng = rrng // half the runs recreate topics
	}
	for _, tp := range []TopicPartition{tp0, tp1, tp2} {
		m := newMPartition(tp, false)
		base.parts = append(base.parts, m)
		base.byTP[tp] = m
		base.incs[tp] = []*mPartition{m}
	}
	coord := &mCoordinator{producer: ProducerID{ID: 500, Epoch: -1}, tv2: rng.Intn(2) == 0, nextPID: 500}
	if rng.Intn(3) == 0 {
		coord.producer.Epoch = math.MaxInt16 - 4
	}
	tx, err := NewTxnState(TxnConfig{TransactionalID: "model", CoordinatorBumps: true, ImplicitAddPartitions: coord.tv2}, seq)
	if err != nil {
		t.Fatal(err)
	}
	d := &txnDriver{mDriver: base, tx: tx, coord: coord, txnOf: map[int]int{}, committed: map[int]bool{},
		aborted: map[int]bool{}, clientOK: map[int]bool{}, commitSent: map[int]bool{}, doomed: map[int]bool{}}
	base.newIncarnation, base.onAppend = d.newIncarnation, d.onAppend
	s, err := tx.InitTransactions()
	if err != nil {
		t.Fatal(err)
	}
	d.pendingOp = true
	d.step(s)
	for i := 0; i < steps; i++ {
		if d.recreationStep() {
			continue
		}
		switch x := rng.Intn(100); {
		case x < 2:
			d.zombie()
		case x < 4:
			d.offsetsZombie()
		case x < 20:
			d.answerCoordinator()
		case x < 26:
			d.offsetsStep()
		case x < 34:
			d.appStep()
		default:
			d.produceStep(d.parts[rng.Intn(len(d.parts))].tp)
		}
	}
	// Heal: finish the transaction in progress, then run one more to
	// completion without faults.
	d.faults = false
	d.learnAll()
	for i, began := 0, d.curTxn; ; i++ {
		if i > 5000 {
			d.fatalf("no progress: state %v, pending op %v, flushing %v, coordinator request %#v, sequencer pending %d outstanding %d",
				tx.State(), d.pendingOp, d.flushing, d.coordReq, seq.Pending(), seq.Outstanding())
		}
		d.answerCoordinator()
		d.offsetsStep()
		d.offsetsZombie()
		for _, m := range d.parts {
			d.produceStep(m.tp)
		}
		d.step(tx.Poll())
		if d.pendingOp || d.coordReq != nil || d.offOp != nil {
			continue
		}
		switch tx.State() {
		case TxnReady:
			if d.curTxn > began+1 || (d.curTxn > began && len(d.clientOK) > 0) {
				d.verifyTxn()
				d.stats["txns"] = d.curTxn
				d.stats["committed"] = len(d.committed)
				d.stats["aborted"] = len(d.aborted)
				return d.stats
			}
			d.appStep()
		case TxnInTransaction:
			d.flushing = true
		case TxnAbortableError:
			d.abort(false)
		}
	}
}

func (d *txnDriver) verifyTxn() {
	d.t.Helper()
	if d.coord.fenced > 0 {
		d.fatalf("the coordinator fenced the only producer %d times", d.coord.fenced)
	}
	// In order, here and below: a failing seed reports the same failure
	// every time it runs.
	for _, k := range slices.Sorted(maps.Keys(d.committed)) {
		if !d.clientOK[k] {
			d.fatalf("transaction %d committed but the client was not told", k)
		}
		if d.doomed[k] {
			d.fatalf("transaction %d committed with a batch acknowledged by a deleted incarnation", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.clientOK)) {
		if d.committed[k] {
			continue
		}
		// Committed locally without EndTxn: only right if nothing of it
		// reached the coordinator or a partition.
		for _, r := range slices.Sorted(maps.Keys(d.txnOf)) {
			if d.txnOf[r] == k && d.status[r].ackedSeen {
				d.fatalf("transaction %d reported committed, the coordinator did not commit it, and record %d was acknowledged", k, r)
			}
		}
		d.stats["empty-commit"]++
	}
	for _, m := range d.parts {
		count := map[int]int{}
		last := 0
		for _, r := range m.log {
			if r.rec == 0 || !d.committed[d.txnOf[r.rec]] {
				continue
			}
			if count[r.rec]++; count[r.rec] > 1 {
				d.fatalf("%v: committed record %d twice", m.tp, r.rec)
			}
			if r.rec < last {
				d.fatalf("%v: committed record %d after %d (order)", m.tp, r.rec, last)
			}
			last = r.rec
		}
		for _, r := range slices.Sorted(maps.Keys(d.status)) {
			st := d.status[r]
			if d.recTP[r] != m.tp {
				continue
			}
			// A committed transaction's records are in the topic once,
			// except those acknowledged by an incarnation deleted since
			// (the client learned of it only once EndTxn(commit) was
			// sent, or the transaction had ended: doomed covers the
			// rest).
			gone := st.ackedSeen && !st.replaced && st.ackInc != m.inc
			if d.committed[d.txnOf[r]] && count[r] != 1 && !(gone && count[r] == 0) {
				d.fatalf("%v: record %d of committed transaction %d appears %d times", m.tp, r, d.txnOf[r], count[r])
			}
			if st.failed && !st.maybe {
				for _, x := range d.incs[m.tp] {
					if slices.ContainsFunc(x.log, func(x mRecord) bool { return x.rec == r }) {
						d.fatalf("%v: record %d reported certainly not written is in incarnation %d", m.tp, r, x.inc)
					}
				}
			}
		}
	}
}

func TestTxnModelRandomized(t *testing.T) {
	seeds := *modelSeeds
	if testing.Short() {
		seeds = min(seeds, 50)
	}
	total := map[string]int{}
	for seed := *modelFirst; seed < *modelFirst+int64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			for k, v := range runTxnModel(t, seed, *modelSteps, nil) {
				total[k] += v
			}
		})
	}
	for _, k := range []string{"ack", "failed", "split", "committed", "aborted", "empty-commit", "init-bump",
		"pid-rotation", "zombie-fenced", "offsets-sent", "offsets-failed", "offsets-committed", "offsets-zombie-fenced",
		"recreate", "recreated-duplicate", "recreated-resequenced", "replaced-ack", "deleted-answer", "recreated-txn-doomed",
		"add-resend-refused", "add-resend-retriable", "add-resend-unsent", "add-timed-out", "abort-add-unsent",
		"add-answered-after-append", "add-retried-answered", "endtxn-answered-after-append", "endtxn-retried-answered",
		"offsets-answered-after-append"} {
		if total[k] == 0 {
			t.Errorf("the model never produced %q (totals %v)", k, total)
		}
	}
	t.Logf("totals over %d seeds: %v", seeds, total)
}

var errModelNoAnswer = fmt.Errorf("model: no answer")

// answeredAfterAppendCodes: the codes a coordinator may answer after
// appending a request's effect to its log (answeredAfterAppend).
var answeredAfterAppendCodes = []int16{kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code}

// TestTxnModelDeterministic: a seed is the whole of a run: two runs of it
// make the same trace (every request, answer, step and decision, and the
// failure a failing seed reports) and the same statistics, so that a seed
// that fails fails again, with the same message, when run alone (-run
// 'TestTxnModelRandomized/seed=N$', or -model.first=N -model.seeds=1). A
// run that drew on anything but its seed (map iteration order above all)
// would not.
func TestTxnModelDeterministic(t *testing.T) {
	run := func(seed int64) ([]string, map[string]int) {
		var trace []string
		var stats map[string]int
		// A failing seed fails this subtest too: its trace ends with
		// the failure, compared all the same.
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			stats = runTxnModel(t, seed, *modelSteps, func(s string) { trace = append(trace, s) })
		})
		if !ok {
			t.Errorf("seed %d failed", seed)
		}
		return trace, stats
	}
	seeds := min(*modelSeeds, 40)
	for seed := *modelFirst; seed < *modelFirst+int64(seeds); seed++ {
		trace1, stats1 := run(seed)
		trace2, stats2 := run(seed)
		if len(trace1) == 0 {
			t.Fatalf("seed %d: no trace", seed)
		}
		if i := slices.Compare(trace1, trace2); i != 0 || !maps.Equal(stats1, stats2) {
			n := 0
			for n < min(len(trace1), len(trace2)) && trace1[n] == trace2[n] {
				n++
			}
			t.Fatalf("seed %d: two runs differ after %d trace lines (%d and %d lines; stats %v and %v)", seed, n, len(trace1), len(trace2), stats1, stats2)
		}
	}
}
