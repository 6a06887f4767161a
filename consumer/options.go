package consumer

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
	"github.com/kepoch/kepoch/seek"
)

// Opt configures a Consumer. Options are validated once, by New: a refused
// option is an error matching errors.ErrInvalidOption that names it and its
// value.
type Opt interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

type cfg struct {
	seeds         []string
	transportOpts []kgo.Opt
	client        *kgo.Client
	meta          *metadata.Refresher

	policy          seek.Policy
	readCommitted   bool
	maxWait         time.Duration
	minBytes        int32
	maxBytes        int32
	partMaxBytes    int32
	maxBuffered     int
	maxPollRecords  int
	tick            time.Duration
	requestTimeout  time.Duration
	sessions        bool
	lineageSize     int
	historySize     int
	epochHistory    int
	maxEpochWaits   int
	onTruncation    func(TruncationEvent)
	metadataMaxAge  time.Duration
	rack            *string
	missingAfter    time.Duration
	decompressLimit int
	decodeParallel  int
	poisonReleased  bool
	inBand          bool
	gcReserve       int
	gcReserveSet    bool // else the reserve is min(maxBuffered/8, maxDefaultReserve)
	group           groupCfg
}

func defaultCfg() cfg {
	return cfg{
		policy:          seek.PolicyEarliest,
		maxWait:         500 * time.Millisecond,
		minBytes:        1,
		maxBytes:        50 << 20,
		partMaxBytes:    1 << 20,
		maxPollRecords:  1024,
		maxBuffered:     64 << 20,
		tick:            100 * time.Millisecond,
		requestTimeout:  30 * time.Second,
		sessions:        true,
		lineageSize:     16,
		historySize:     256,
		epochHistory:    seek.DefaultHistorySize,
		maxEpochWaits:   5,
		metadataMaxAge:  5 * time.Minute,
		missingAfter:    DefaultMissingPartitionReport,
		decompressLimit: 256 << 20,
		decodeParallel:  1,
		group:           defaultGroupCfg(),
	}
}

func (c *cfg) validate() error {
	switch {
	case c.client == nil && len(c.seeds) == 0:
		return invalidOption("SeedBrokers", "none given, and no WithClient")
	case c.client != nil && len(c.seeds) > 0:
		return invalidOption("WithClient", fmt.Sprintf("given with SeedBrokers %v (configure the client itself)", c.seeds))
	case c.client != nil && len(c.transportOpts) > 0:
		return invalidOption("WithClient", fmt.Sprintf("given with %d TransportOpts (configure the client itself)", len(c.transportOpts)))
	case c.policy < seek.PolicyEarliest || c.policy > seek.PolicyNone:
		return invalidOption("TruncationPolicy", fmt.Sprintf("%d is not a policy", c.policy))
	case c.maxWait < 0 || c.maxWait > 5*time.Minute:
		return invalidOption("FetchMaxWait", fmt.Sprintf("%v is not in [0, 5m]", c.maxWait))
	case c.minBytes < 1:
		return invalidOption("FetchMinBytes", fmt.Sprintf("%d is not positive", c.minBytes))
	case c.partMaxBytes < 1:
		return invalidOption("FetchMaxPartitionBytes", fmt.Sprintf("%d is not positive", c.partMaxBytes))
	case c.maxBytes < 1:
		return invalidOption("FetchMaxBytes", fmt.Sprintf("%d is not positive", c.maxBytes))
	case c.maxBytes < c.partMaxBytes:
		return invalidOption("FetchMaxBytes", fmt.Sprintf("%d is less than FetchMaxPartitionBytes %d", c.maxBytes, c.partMaxBytes))
	case c.maxBuffered < int(c.maxBytes):
		return invalidOption("MaxBufferedBytes", fmt.Sprintf("%d is less than FetchMaxBytes %d", c.maxBuffered, c.maxBytes))
	case c.maxPollRecords < 0:
		return invalidOption("MaxPollRecords", fmt.Sprintf("%d is negative", c.maxPollRecords))
	case c.decodeParallel < 1 || c.decodeParallel > 64:
		return invalidOption("DecompressParallelism", fmt.Sprintf("%d is not in [1, 64]", c.decodeParallel))
	case c.tick < time.Millisecond:
		return invalidOption("RetryBackoff", fmt.Sprintf("%v is less than 1ms", c.tick))
	case c.requestTimeout < time.Second:
		return invalidOption("RequestTimeout", fmt.Sprintf("%v is less than 1s", c.requestTimeout))
	case c.lineageSize < 2:
		return invalidOption("LineageSize", fmt.Sprintf("%d is less than 2", c.lineageSize))
	case c.historySize < 0:
		return invalidOption("DeliveryHistory", fmt.Sprintf("%d is negative", c.historySize))
	case c.epochHistory < 1 || c.epochHistory > 1<<16:
		return invalidOption("EpochHistorySize", fmt.Sprintf("%d is not in [1, 65536]", c.epochHistory))
	case c.maxEpochWaits < 1:
		return invalidOption("MaxEpochWaits", fmt.Sprintf("%d is not positive", c.maxEpochWaits))
	case c.missingAfter < 0:
		return invalidOption("MissingPartitionReport", fmt.Sprintf("%v is negative", c.missingAfter))
	case c.gcReserveSet && c.gcReserve < 0:
		return invalidOption("GCReserve", fmt.Sprintf("%d is negative", c.gcReserve))
	}
	return c.group.validate()
}

// invalidOption is New's error for a refused option: it names the option
// and says what of its value is refused, and matches
// errors.ErrInvalidOption.
func invalidOption(name, problem string) error {
	return fmt.Errorf("consumer: option %s: %s: %w", name, problem, errors.ErrInvalidOption)
}

// invalidArgument is a call's error for a refused argument: it names the
// call and the argument and says what of its value is refused, and matches
// errors.ErrInvalidArgument.
func invalidArgument(call, arg, problem string) error {
	return fmt.Errorf("consumer: %s: argument %s: %s: %w", call, arg, problem, errors.ErrInvalidArgument)
}

// nilContext is the error of a call given a nil context. The call is
// refused before it does anything: the nil would panic where it is first
// used, perhaps on one of the consumer's own goroutines (a commit), which
// the application cannot recover from.
func nilContext(call string) error {
	return invalidArgument(call, "ctx", "nil (context.Background() waits without a bound)")
}

// SeedBrokers sets the brokers to bootstrap from (host:port).
func SeedBrokers(seeds ...string) Opt {
	return optFunc(func(c *cfg) { c.seeds = append(c.seeds, seeds...) })
}

// TransportOpts passes options to the franz-go client kepoch creates as its
// transport: SASL, TLS, a dialer, client id, version pinning. Options that
// enable kgo's own consuming or producing must not be given; kepoch never
// uses them.
func TransportOpts(opts ...kgo.Opt) Opt {
	return optFunc(func(c *cfg) { c.transportOpts = append(c.transportOpts, opts...) })
}

// WithClient uses an existing franz-go client as the transport instead of
// creating one. The client is not closed by Close. kepoch cannot hook its
// writes, so a commit failure on it is taken as possibly stored
// (errors.ErrUnknownOutcome) unless it failed to connect; see CommitSync.
func WithClient(cl *kgo.Client) Opt { return optFunc(func(c *cfg) { c.client = cl }) }

// WithMetadata shares a metadata refresher (built on the same client) with
// other consumers and producers. It is not closed by Close; close it after
// its consumers (closed first, Poll returns an error matching
// errors.ErrClosed).
func WithMetadata(r *metadata.Refresher) Opt { return optFunc(func(c *cfg) { c.meta = r }) }

// TruncationPolicy sets what happens when a partition's consumed lineage
// breaks (a truncation, a position out of the log, a recreated topic):
// PolicyEarliest and PolicyLatest report the break and continue (a located
// divergence always continues at the exact divergence point; other breaks at
// the log start or end); PolicyNone reports it and halts the partition until
// the application seeks. Default PolicyEarliest.
func TruncationPolicy(p seek.Policy) Opt { return optFunc(func(c *cfg) { c.policy = p }) }

// ReadCommitted reads only committed transactional records (isolation level
// read_committed); aborted records are filtered out and never delivered.
func ReadCommitted() Opt { return optFunc(func(c *cfg) { c.readCommitted = true }) }

// FetchMaxWait is how long a broker may hold a Fetch waiting for data
// (default 500ms). Above 200ms, a held Fetch is canceled (once it is
// 200ms old) when another partition of the same broker becomes fetchable,
// so that partition does not wait behind it; the transport re-makes the
// connection a canceled Fetch was on. At 200ms or less nothing is
// canceled.
func FetchMaxWait(d time.Duration) Opt { return optFunc(func(c *cfg) { c.maxWait = d }) }

// FetchMinBytes is how many bytes a broker waits for before answering a
// Fetch early (default 1).
func FetchMinBytes(n int32) Opt { return optFunc(func(c *cfg) { c.minBytes = n }) }

// FetchMaxBytes bounds one Fetch response (default 50 MiB).
func FetchMaxBytes(n int32) Opt { return optFunc(func(c *cfg) { c.maxBytes = n }) }

// FetchMaxPartitionBytes bounds one partition of a Fetch response (default
// 1 MiB). A broker still returns a first batch that is larger, so a consumer
// never stalls on a big batch.
func FetchMaxPartitionBytes(n int32) Opt { return optFunc(func(c *cfg) { c.partMaxBytes = n }) }

// MaxBufferedBytes bounds the fetched bytes held for Poll together with
// what the fetches in flight may bring: each broker's Fetch asks for at most
// its share of the bound (and FetchMaxBytes), and none is sent while the
// buffer has too little room left, until Poll drains it (default 64 MiB). A
// broker may exceed a Fetch's byte limits by one batch larger than them.
// Bytes are counted as fetched (record batches, compressed or not): a
// buffered answer also holds its batches decompressed and 40 bytes per
// record, and the Records Poll makes of it take more memory again.
func MaxBufferedBytes(n int) Opt { return optFunc(func(c *cfg) { c.maxBuffered = n }) }

// GCReserve sets the garbage-collection reserve the consumer holds from
// New to Close (default: an eighth of MaxBufferedBytes, at most 32 MiB, so
// 8 MiB with the default buffer; 0: none).
//
// The transport reads every Fetch answer into memory of its own, up to a
// MiB per partition, which the consumer holds only until Poll has made its
// records and the application drops them. Go's collector starts a cycle
// each time the heap grows by GOGC percent of what was last found live,
// and never below 4 MiB: in a process that keeps little else live, it runs
// about once per answer. The reserve is a block of memory that is never
// touched but counts as live, so cycles come about once per reserve's
// worth of answers instead. On the benchmark machine, reading 1 KiB
// records with a 1 MiB answer per partition, the default reserve took
// collections from about 100 to 30 per run and the CPU per record down by
// a third or more (BenchmarkConsumePaired's reserve0-paired runs show the
// consumer without it).
//
// It costs memory: the heap may grow by up to twice the reserve before a
// cycle, and the reserve itself is resident when the runtime clears reused
// memory for it. The process keeps one reserve, the largest any open
// consumer asks for, not one per consumer. It is not taken when
// GOGC is off; under GOMEMLIMIT it counts towards the limit. A process
// that already keeps more live than the reserve gains little from it.
func GCReserve(n int) Opt {
	return optFunc(func(c *cfg) { c.gcReserve, c.gcReserveSet = n, true })
}

// maxDefaultReserve caps the default GC reserve: past it, collections are
// already rare next to the answers read, and memory is all a larger one
// adds.
const maxDefaultReserve = 32 << 20

// reserve returns the GC reserve the consumer holds.
func (c *cfg) reserve() int {
	if !c.gcReserveSet {
		return min(c.maxBuffered/8, maxDefaultReserve)
	}
	return c.gcReserve
}

// MaxPollRecords bounds the records one Poll returns (default 1024; 0 means
// no limit): Poll stops at the first batch boundary at or past n records,
// within a fetched answer if need be, and the next Poll goes on from there
// (the rest is not fetched again). Batches are never split, so a Poll may
// return up to one batch more than n. Bounding a Poll bounds the work
// between two Polls (a group member must poll within its rebalance
// timeout) and the memory of one Poll's records, and keeps them within the
// processor's cache while they are made: with small records, a Poll of a
// whole 1 MiB answer per partition makes tens of thousands of records at
// once, and reading small zstd records that way cost about a fifth more
// CPU per record than bounded Polls on the benchmark machine (Polls of
// 512 and 1024 did best there, 4096 a little less well).
func MaxPollRecords(n int) Opt { return optFunc(func(c *cfg) { c.maxPollRecords = n }) }

// PoisonReleased makes Fetches.Release overwrite the decompressed bytes it
// hands back with 0xa5 before they are reused, so that a key or value used
// after its Release reads as garbage at once rather than, now and then, as
// another record's bytes. It costs a write of every released byte: for
// tests of the code that calls Release, not for production.
func PoisonReleased() Opt { return optFunc(func(c *cfg) { c.poisonReleased = true }) }

// DecompressParallelism lets the decoding of one fetched partition
// decompress up to n of its compressed batches at once, on goroutines the
// decoding starts and waits for (default 1: one at a time). Each broker's
// answers are already decoded apart from the others', so this pays when few
// brokers deliver large compressed batches (a hot partition with zstd):
// it trades CPU for latency and holds up to 4 MiB of compressed batches
// decompressed at once. Answers smaller than 128 KiB compressed are
// decompressed one batch at a time whatever n is. Records, offsets and
// errors are exactly those of n = 1.
func DecompressParallelism(n int) Opt {
	return optFunc(func(c *cfg) { c.decodeParallel = n })
}

// RetryBackoff is the interval between retries of a failed partition request
// (default 100ms).
func RetryBackoff(d time.Duration) Opt { return optFunc(func(c *cfg) { c.tick = d }) }

// RequestTimeout bounds each request to a broker (default 30s; a Fetch gets
// FetchMaxWait on top).
func RequestTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.requestTimeout = d }) }

// DisableFetchSessions sends full Fetch requests every time instead of
// KIP-227 incremental fetch sessions.
func DisableFetchSessions() Opt { return optFunc(func(c *cfg) { c.sessions = false }) }

// LineageSize bounds the epoch history kept per partition to refine a
// divergence point (default 16 epochs).
func LineageSize(n int) Opt { return optFunc(func(c *cfg) { c.lineageSize = n }) }

// DeliveryHistory bounds the digests of delivered batches kept per
// partition (default 256 batches, about 50 bytes each), from which a
// truncation report lists the delivered batches it replaced
// (TruncationEvent.ReplacedBatches). 0 keeps none.
func DeliveryHistory(n int) Opt { return optFunc(func(c *cfg) { c.historySize = n }) }

// EpochHistorySize bounds the durable epoch history kept per partition
// (EpochHistory; default seek.DefaultHistorySize, 64 epochs, 12 bytes
// each when encoded). Older epochs are dropped first.
func EpochHistorySize(n int) Opt { return optFunc(func(c *cfg) { c.epochHistory = n }) }

// MaxEpochWaits is how many metadata refreshes in a row may report a leader
// epoch older than one already known (from a commit or a seek) before the
// consumer believes them (default 5).
func MaxEpochWaits(n int) Opt { return optFunc(func(c *cfg) { c.maxEpochWaits = n }) }

// OnTruncation is called, from Poll and before Poll returns, for every break
// of a partition's consumed lineage, in detection order. It runs serially
// and must not call back into the Consumer. The same events are in
// Fetches.Truncations.
func OnTruncation(fn func(TruncationEvent)) Opt { return optFunc(func(c *cfg) { c.onTruncation = fn }) }

// MissingPartitionReport is how long an assigned partition may be missing
// from metadata (its topic does not exist, was deleted, or has fewer
// partitions) before Poll reports it, once, in Fetches.Errors: a
// *errors.PartitionError (Op "lookup") matching
// errors.ErrUnknownTopicOrPartition (default
// DefaultMissingPartitionReport; 0 reports at the first metadata without
// it). The partition is not halted: it is fetched from its position as
// soon as metadata has it (a topic recreated under the same name is
// reported as such when it is). It is reported again only if it goes
// missing again after it was back. Without it a misspelt or deleted topic
// would only look like a quiet one.
//
// The same bound applies to a partition whose leader keeps naming, as its
// read replica (see Rack), a broker metadata does not list or lists
// offline, or one whose fetches keep failing (a listener this client
// cannot reach): the leader then answers with no records, and the
// partition is not read at all. It is reported once, at the first such
// answer MissingPartitionReport or more after the first of the run (0: at
// the first), as a *errors.PartitionError (Op "fetch", naming the broker)
// matching errors.ErrReplicaNotAvailable, without halting the partition.
// Any answer without error ends the run (records, the leader naming no
// replica, a replica's answer) except the leader naming a replica
// metadata lists, which is not yet a read; the leader's errors neither end
// nor extend it, and a later run is reported again.
//
// So does a partition whose leader answers none of its requests (a
// connection refused, reset or closed, or no answer in time, request after
// request: fetches, or the OffsetForLeaderEpoch and ListOffsets that
// validate or place its position): it is reported once, at the first
// failure MissingPartitionReport or more after the first of the run, as a
// *errors.PartitionError (Op "fetch", "validate" or "list offsets",
// naming the leader and the last failure) matching
// errors.ErrLeaderUnreachable, which is retriable; the partition is not
// halted and its requests are sent again as usual. Any answer of the
// leader ends the run, and a later run is reported again.
func MissingPartitionReport(d time.Duration) Opt {
	return optFunc(func(c *cfg) { c.missingAfter = d })
}

// DefaultMissingPartitionReport is the default MissingPartitionReport.
const DefaultMissingPartitionReport = 10 * time.Second

// MetadataMaxAge is how old metadata may grow before it is refreshed
// periodically, for a refresher the consumer creates (default 5m; ≤ 0: no
// periodic refresh). It is also how long a partition is read from the
// replica its leader named (see Rack) before the leader is asked again,
// whichever refresher the consumer uses (≤ 0: until an error or a leader
// change).
func MetadataMaxAge(d time.Duration) Opt { return optFunc(func(c *cfg) { c.metadataMaxAge = d }) }

// ValidateInBand lets a partition's position be validated by the fetch
// itself, where it can be, instead of an OffsetForLeaderEpoch round trip
// before fetching (default off: every leader change, and every start or
// SeekTo with an epoch, is validated first, as Java's client does).
//
// With it, a leader or leader-epoch change that metadata (or a KIP-951
// hint) shows, an AtEpoch start or SeekTo, and an AtHistory start go
// straight to fetching from the leader, with the new leader epoch as
// CurrentLeaderEpoch and the position's epoch as LastFetchedEpoch, and the
// leader's answer is the validation. A Kafka leader checks LastFetchedEpoch
// against its epoch cache before it reads: a DivergingEpoch is the answer
// OffsetForLeaderEpoch would have given and is judged the same way (the
// same report, with the same Replaced range and ReplacedBatches), and an
// answer without one proves the position, whose records are delivered only
// then. Nothing of the leader's answer is delivered or committed before
// it proved the position: until then the partition is awaiting validation,
// as it would be while OffsetForLeaderEpoch is asked.
//
// The position is still validated with OffsetForLeaderEpoch first when the
// fetch cannot make the check: the leader has not yet answered this
// consumer a Fetch at v12 or above (the version is learned from each
// broker's answers), or answered below it; the answer was not checked
// (below v12, or the leader named a preferred read replica and read
// nothing: see Rack); the partition is paused (validation goes on while it
// is, and no fetch is sent); the position has no epoch (nothing to
// validate, as without the option). SeekToNearest, an OFFSET_OUT_OF_RANGE
// and narrowing a divergence always ask OffsetForLeaderEpoch. The fetch
// that validates goes to the leader, not to a replica it named.
//
// Only for brokers that implement the LastFetchedEpoch check of Fetch v12
// (Apache Kafka 2.7 and later): a broker that accepts Fetch v12 and
// ignores LastFetchedEpoch would let a truncation at a leader change go
// unreported. kfake is one (and so kepochtest's clusters): with the
// option, tests on it see a leader change's truncation only as the
// DivergingEpoch a Fetch control injects.
func ValidateInBand(on bool) Opt { return optFunc(func(c *cfg) { c.inBand = on }) }

// Rack is the client's rack (Java's client.rack), one setting for what the
// consumer sends brokers: every Fetch carries it (RackID, Fetch v11+), so a
// broker with a rack-aware replica.selector.class (Kafka's
// RackAwareReplicaSelector) may name a replica in that rack for the
// consumer to read from (KIP-392, fetch from follower); a group member
// also sends it with its subscription (rack-aware assignment, KIP-881 and
// KIP-848). Without it, nothing is sent and Kafka's selectors leave every
// partition on its leader.
//
// A replica a leader names is followed whether or not a rack was given
// (Java's client does the same: a custom selector may name one without a
// rack, and a leader that did would answer with no records otherwise). The
// partition is then read from that replica until MetadataMaxAge has
// passed, the replica answers an error (an OFFSET_OUT_OF_RANGE from a
// replica is never a reset: its high watermark may lag), the leader or its
// epoch changes, or metadata no longer lists the broker; then its leader is
// asked again. Fetches to a replica carry the same CurrentLeaderEpoch and
// LastFetchedEpoch as the leader's, so truncation is detected exactly as
// there; OffsetForLeaderEpoch and ListOffsets always go to the leader.
// Consumer.ReadReplica says where a partition is read from.
//
// A replica the leader names that metadata does not list (or lists
// offline for the partition: a custom selector's choice, a broker whose
// advertised listener is wrong) cannot be read: the partition stays on its
// leader, metadata is refreshed and the leader asked again after
// RetryBackoff. The leader answers those fetches with no records, so while
// it keeps naming such a broker the partition is not read at all; after
// MissingPartitionReport of that, Poll reports it once in Fetches.Errors:
// a *errors.PartitionError (Op "fetch", naming the broker) matching
// errors.ErrReplicaNotAvailable. The partition is not halted, and is read
// as soon as the leader names a broker metadata lists, or none.
func Rack(rack string) Opt { return optFunc(func(c *cfg) { c.rack = &rack }) }
