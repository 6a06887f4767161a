package seek

// Event is an input to Partition.Step: something the application asked for,
// something metadata said, an answer from a broker, or a clock tick. The set
// of events is closed; the concrete types are listed below.
//
// Answers carry the RequestID of the action they answer. An answer whose id
// is not the one the partition waits for is stale and changes nothing.
type Event interface {
	event()
}

// Assigned starts (or restarts) consumption of the partition at Start: a new
// assignment generation. Everything in flight is forgotten, the lineage is
// cleared and a halt is lifted.
type Assigned struct {
	Start Start
}

// Revoked ends the assignment. Everything in flight is forgotten and the
// partition goes back to StateInitializing until the next Assigned.
type Revoked struct{}

// Seek moves the position (Kafka's seek, seek with OffsetAndMetadata, and
// SeekToNearest, depending on Start.Kind). Everything in flight is
// forgotten, the lineage is cleared and a halt is lifted.
//
// After a truncation report with PolicyNone, seeking to the reported
// consumed position (with At, or with AtEpoch and the same epoch) continues
// from there without validating that epoch again: the application has
// accepted the loss (KIP-320). Seeking with AtEpoch to the divergent
// position validates it and continues in the new lineage.
type Seek struct {
	Start Start
}

// LeaderChanged is what metadata says about the partition: its leader broker
// (NoBroker if leaderless), the leader epoch (NoEpoch if the metadata carried
// none, e.g. a Metadata response below v9, whose epochs Kafka does not
// trust), and the topic id (zero if unknown).
//
// The consumer may step it after every metadata refresh, changed or not:
// repeated reports are cheap and count as confirmations. An epoch lower than
// one already known is stale metadata and is ignored, unless it is confirmed
// Config.MaxEpochWaits times in a row (a real rewind); NoEpoch never replaces
// a known epoch; a different topic id means the topic was recreated.
//
// InBand says the leader is known to check a fetch's LastFetchedEpoch (the
// consumer has seen it answer a Fetch at v12 or above); false when it is
// not known to. It matters only with Config.InBandValidation, where a
// leader change is then validated by the next fetch rather than by
// OffsetForLeaderEpoch first. A report naming the leader the partition
// already has updates what it knows of it.
type LeaderChanged struct {
	Leader  int32
	Epoch   int32
	TopicID TopicID
	InBand  bool
}

// BrokerInBand is what the consumer learned about a broker: whether it is
// known to check a fetch's LastFetchedEpoch (InBand, see
// LeaderChanged.InBand). It changes what the partition knows of its leader
// when Broker is its leader, and nothing else. The consumer steps it before
// a start or a seek, so that the check is made in band when it can be
// (Config.InBandValidation).
type BrokerInBand struct {
	Broker int32
	InBand bool
}

// BatchFetched is one record batch of the Fetch answer Req, in log order:
// data, control (transaction marker) and aborted batches alike, because all
// of them move the position and its epoch. Base and Last are the batch's
// first and last offsets (base offset and base+lastOffsetDelta), Epoch its
// PartitionLeaderEpoch (NoEpoch for pre-v2 message sets).
//
// The batch is accepted if it reaches the position (Last ≥ position); then
// the records from the position to Last are delivered and the position moves
// to Last+1 with the batch's epoch. A batch entirely below the position is
// skipped. Stepping an accepted batch returns no actions and does not
// allocate.
//
// Checked says the broker checked the fetch's LastFetchedEpoch before
// reading: it answered at Fetch v12 or above, and it is the leader the
// fetch named and read the partition itself (a Kafka leader that names a
// preferred read replica reads nothing and checks nothing). It matters
// only for a fetch that validates the position (FetchRequest.Validates):
// its batches are accepted only if Checked; otherwise the position is
// validated with OffsetForLeaderEpoch first and the answer is dropped.
type BatchFetched struct {
	Req     RequestID
	Base    int64
	Last    int64
	Epoch   int32
	Checked bool
}

// FetchCompleted ends the partition's part of the Fetch answer Req (after its
// batches, if any). The consumer steps it for every partition the Fetch
// asked for, including partitions an incremental fetch session left out of
// the answer. The next Fetch action follows. Checked is as for
// BatchFetched: an answer to a fetch that validates the position proves it
// only if Checked (an empty answer the broker checked found no divergence
// as surely as one with records).
type FetchCompleted struct {
	Req     RequestID
	Checked bool
}

// FetchFailed is a partition error in the Fetch answer Req. Hint is the
// KIP-951 CurrentLeader of the answer (Fetch v16+, on NOT_LEADER_OR_FOLLOWER
// and FENCED_LEADER_EPOCH), nil if the answer had none (kmsg's -1/-1); it is
// used only if it names a broker and a strictly newer epoch. (A pointer, so
// that a zero FetchFailed does not name broker 0 in epoch 0.) HintInBand is
// LeaderChanged.InBand for the hinted leader.
type FetchFailed struct {
	Req        RequestID
	Code       Code
	Hint       *Leader
	HintInBand bool
}

// DivergingEpoch is a Fetch v12+ answer Req whose partition carried a
// DivergingEpoch (Epoch ≥ 0): the leader found that the LastFetchedEpoch the
// fetch sent does not end where the fetch offset is. It carries no records.
// It is handled exactly like an OffsetForLeaderEpoch answer for the
// position's epoch.
type DivergingEpoch struct {
	Req RequestID
	End EpochEnd
}

// EpochEndOffset is the partition's OffsetForLeaderEpoch answer to the
// Validate action Req: an error code, or the leader's (epoch, end offset).
type EpochEndOffset struct {
	Req  RequestID
	Code Code
	End  EpochEnd
}

// ListedOffset is the partition's ListOffsets answer to the ListOffsets
// action Req: an error code, or the offset and the leader epoch the broker
// returned (Offset is NoOffset when a timestamp matched nothing).
type ListedOffset struct {
	Req    RequestID
	Code   Code
	Offset int64
	Epoch  int32
}

// PolicyChanged replaces the policy for breaks detected from now on. A
// partition already halted stays halted until the application seeks.
type PolicyChanged struct {
	Policy Policy
}

// Paused pauses (true) or resumes (false) fetching. While paused no Fetch
// action is emitted; validation, resets and reports go on. A fetch already
// in flight still delivers.
type Paused struct {
	Paused bool
}

// Tick is the passage of one unit of time, the only clock the machine has.
// A request that failed with a retriable error is sent again
// Config.RetryTicks ticks later (or as soon as metadata names a newer
// leader). The consumer ticks every partition at a fixed interval.
type Tick struct{}

// event seals the Event interface.
func (Assigned) event()       {}
func (Revoked) event()        {}
func (Seek) event()           {}
func (LeaderChanged) event()  {}
func (BrokerInBand) event()   {}
func (BatchFetched) event()   {}
func (FetchCompleted) event() {}
func (FetchFailed) event()    {}
func (DivergingEpoch) event() {}
func (EpochEndOffset) event() {}
func (ListedOffset) event()   {}
func (PolicyChanged) event()  {}
func (Paused) event()         {}
func (Tick) event()           {}
