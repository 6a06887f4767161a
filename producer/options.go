package producer

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/metadata"
)

// Opt configures a Producer. Options are validated once, by New: a refused
// option is an error matching errors.ErrInvalidOption that names it and its
// value.
type Opt interface{ apply(*cfg) }

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// Acks is how many replicas must have a write before the leader answers.
type Acks int16

// The acknowledgement levels.
const (
	// AcksAll waits for every in-sync replica (required by idempotence).
	AcksAll Acks = -1
	// AcksLeader waits for the leader only: a write acknowledged this way
	// is lost if the leader dies before a follower copied it.
	AcksLeader Acks = 1
	// AcksNone waits for nothing: no offsets, no errors, no guarantees.
	AcksNone Acks = 0
)

type cfg struct {
	seeds         []string
	transportOpts []kgo.Opt
	meta          *metadata.Refresher

	acks            Acks
	idempotent      bool
	transactionalID string
	txnTimeout      time.Duration

	codec        compress.Codec
	level        int
	levelSet     bool
	batchBytes   int
	requestBytes int
	linger       time.Duration
	maxBuffered  int
	deliveryTO   time.Duration
	requestTO    time.Duration
	retryBackoff time.Duration
	maxInFlight  int
	partitioner  Partitioner
	ledgerRanges int
	metaMaxAge   time.Duration
	metaWait     time.Duration

	onOutcome   func(Outcome)
	onAckedLoss func(AckedWritesLost)
}

func defaultCfg() cfg {
	return cfg{
		acks:         AcksAll,
		idempotent:   true,
		txnTimeout:   time.Minute,
		codec:        compress.None,
		batchBytes:   1 << 20,
		requestBytes: DefaultMaxRequestBytes,
		maxBuffered:  64 << 20,
		deliveryTO:   2 * time.Minute,
		requestTO:    30 * time.Second,
		retryBackoff: 100 * time.Millisecond,
		linger:       DefaultLinger,
		maxInFlight:  MaxInFlightPerPartition,
		ledgerRanges: DefaultLedgerRanges,
		metaMaxAge:   30 * time.Second,
		metaWait:     DefaultMetadataWait,
	}
}

func (c *cfg) validate() error {
	switch {
	case len(c.seeds) == 0:
		return invalidOption("SeedBrokers", "none given")
	case c.acks != AcksAll && c.acks != AcksLeader && c.acks != AcksNone:
		return invalidOption("RequiredAcks", fmt.Sprintf("%d is not an acknowledgement level", c.acks))
	case c.idempotent && c.acks != AcksAll:
		return invalidOption("RequiredAcks", fmt.Sprintf("%d is not AcksAll, which idempotence requires (use DisableIdempotence)", c.acks))
	case c.transactionalID != "" && !c.idempotent:
		return invalidOption("DisableIdempotence", fmt.Sprintf("given with TransactionalID %q (a transactional producer is idempotent)", c.transactionalID))
	case !c.codec.Valid():
		return invalidOption("Compression", fmt.Sprintf("%d is not a codec", c.codec))
	case c.batchBytes < 1024 || c.batchBytes > 64<<20:
		return invalidOption("BatchMaxBytes", fmt.Sprintf("%d is not in [1 KiB, 64 MiB]", c.batchBytes))
	case c.requestBytes < c.batchBytes || c.requestBytes > 1<<30:
		return invalidOption("MaxRequestBytes", fmt.Sprintf("%d is not in [BatchMaxBytes %d, 1 GiB]", c.requestBytes, c.batchBytes))
	case c.linger < 0:
		return invalidOption("Linger", fmt.Sprintf("%v is negative", c.linger))
	case c.maxBuffered < c.batchBytes:
		return invalidOption("MaxBufferedBytes", fmt.Sprintf("%d is less than BatchMaxBytes %d", c.maxBuffered, c.batchBytes))
	case c.requestTO < 100*time.Millisecond:
		return invalidOption("RequestTimeout", fmt.Sprintf("%v is less than 100ms", c.requestTO))
	case c.deliveryTO < c.requestTO+c.linger:
		return invalidOption("DeliveryTimeout", fmt.Sprintf("%v is less than RequestTimeout %v + Linger %v", c.deliveryTO, c.requestTO, c.linger))
	case c.retryBackoff < time.Millisecond:
		return invalidOption("RetryBackoff", fmt.Sprintf("%v is less than 1ms", c.retryBackoff))
	case c.maxInFlight < 1 || c.maxInFlight > MaxInFlightPerPartition:
		return invalidOption("MaxInFlight", fmt.Sprintf("%d is not in [1, %d]", c.maxInFlight, MaxInFlightPerPartition))
	case c.metaMaxAge < 100*time.Millisecond:
		return invalidOption("MetadataMaxAge", fmt.Sprintf("%v is less than 100ms", c.metaMaxAge))
	case c.metaWait <= 0:
		return invalidOption("MetadataWait", fmt.Sprintf("%v is not positive", c.metaWait))
	case c.txnTimeout < time.Second:
		return invalidOption("TransactionTimeout", fmt.Sprintf("%v is less than 1s", c.txnTimeout))
	case c.ledgerRanges < 1:
		return invalidOption("AckLedgerRanges", fmt.Sprintf("%d is not positive", c.ledgerRanges))
	}
	if c.levelSet {
		if _, err := compress.NewCompressor(compress.WithLevel(c.codec, c.level)); err != nil {
			return fmt.Errorf("producer: option CompressionLevel: %d is not a level of %v: %w: %w", c.level, c.codec, err, errors.ErrInvalidOption)
		}
	}
	return nil
}

// invalidOption is New's error for a refused option: it names the option
// and says what of its value is refused, and matches
// errors.ErrInvalidOption.
func invalidOption(name, problem string) error {
	return fmt.Errorf("producer: option %s: %s: %w", name, problem, errors.ErrInvalidOption)
}

// invalidArgument is a call's error for a refused argument: it names the
// call and the argument and says what of its value is refused, and matches
// errors.ErrInvalidArgument.
func invalidArgument(call, arg, problem string) error {
	return fmt.Errorf("producer: %s: argument %s: %s: %w", call, arg, problem, errors.ErrInvalidArgument)
}

// nilContext is the error of a call given a nil context. The call is
// refused before it does anything: the nil would panic where it is first
// used, perhaps halfway through a transaction operation that would then be
// left under way for good.
func nilContext(call string) error {
	return invalidArgument(call, "ctx", "nil (context.Background() waits without a bound)")
}

// SeedBrokers sets the brokers to bootstrap from (host:port).
func SeedBrokers(seeds ...string) Opt {
	return optFunc(func(c *cfg) { c.seeds = append(c.seeds, seeds...) })
}

// TransportOpts passes options to the franz-go client kepoch creates as its
// transport: SASL, TLS, a dialer, client id. Options that change how kgo
// produces or consumes must not be given; kepoch sets the acknowledgement
// level itself.
func TransportOpts(opts ...kgo.Opt) Opt {
	return optFunc(func(c *cfg) { c.transportOpts = append(c.transportOpts, opts...) })
}

// WithMetadata shares a metadata refresher with other producers and
// consumers. It must be built on a client with the same seed brokers; the
// producer still creates its own transport (kgo rewrites the acks of raw
// Produce requests to its client's setting). It is not closed by Close;
// close it after its producers: closed while a producer runs, it stops the
// producer (the records it holds fail, and its calls return, with an error
// matching errors.ErrClosed that says so), which could not otherwise follow
// a leader change.
func WithMetadata(r *metadata.Refresher) Opt { return optFunc(func(c *cfg) { c.meta = r }) }

// RequiredAcks sets the acknowledgement level (default AcksAll).
func RequiredAcks(a Acks) Opt { return optFunc(func(c *cfg) { c.acks = a }) }

// DisableIdempotence turns off the idempotent producer: no producer ID, no
// sequence numbers, so a retried write may be duplicated. Needed for acks
// other than AcksAll. A record acknowledged after an attempt of its batch
// that got no definite answer says so: its Result.Recovery is a
// PossibleDuplicate (with no identities), also given to OnOutcome.
func DisableIdempotence() Opt { return optFunc(func(c *cfg) { c.idempotent = false }) }

// TransactionalID makes the producer transactional: InitTransactions once,
// then BeginTransaction, produce, CommitTransaction or AbortTransaction.
func TransactionalID(id string) Opt { return optFunc(func(c *cfg) { c.transactionalID = id }) }

// TransactionTimeout is how long the coordinator lets a transaction stay
// open before aborting it (default 1m).
func TransactionTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.txnTimeout = d }) }

// Compression sets the codec of produced batches (default none).
func Compression(codec compress.Codec) Opt { return optFunc(func(c *cfg) { c.codec = codec }) }

// CompressionLevel sets the codec's level (codec-specific; validated by New).
func CompressionLevel(level int) Opt {
	return optFunc(func(c *cfg) { c.level, c.levelSet = level, true })
}

// BatchMaxBytes bounds a record batch's uncompressed size (default 1 MiB).
// A record larger than it is sent alone.
func BatchMaxBytes(n int) Opt { return optFunc(func(c *cfg) { c.batchBytes = n }) }

// MaxRequestBytes bounds the batches of one Produce request (default
// DefaultMaxRequestBytes, 64 MiB): a request carries the ready batches of
// every partition the broker leads, and a broker closes the connection on
// a request larger than its socket.request.max.bytes (100 MiB by default),
// so a producer with more buffered than that (MaxBufferedBytes) for one
// broker would resend the same refused request until its delivery timeout.
// A request takes one batch at least; further batches go while the request
// stays within n, counting each as BatchMaxBytes (or its size, for a
// record above BatchMaxBytes sent alone) until it is picked; the rest go in
// the next request. A record whose batch alone,
// uncompressed, would exceed n is refused by Produce (ErrMessageTooLarge),
// as Java's max.request.size.
func MaxRequestBytes(n int) Opt { return optFunc(func(c *cfg) { c.requestBytes = n }) }

// DefaultMaxRequestBytes is the default MaxRequestBytes.
const DefaultMaxRequestBytes = 64 << 20

// Linger is how long a partition's batch that is not full waits for more
// records before it is sent (default DefaultLinger, 5ms, the Java client's
// default since Kafka 4.0). Full batches are sent at once, up to
// MaxInFlight requests per broker; Flush and ProduceSync send at once
// whatever the linger. With acks=all a broker handles one request per
// connection at a time, each until the followers have it, so fuller
// requests carry more records per round trip. Linger(0) sends a batch as soon
// as no request to its broker is on the wire, and otherwise when it stops
// growing for a millisecond: the least latency, for producers that write
// a record at a time.
func Linger(d time.Duration) Opt { return optFunc(func(c *cfg) { c.linger = d }) }

// DefaultLinger is the default Linger.
const DefaultLinger = 5 * time.Millisecond

// MaxBufferedBytes bounds the bytes of records buffered and in flight;
// Produce blocks while it is reached (default 64 MiB).
func MaxBufferedBytes(n int) Opt { return optFunc(func(c *cfg) { c.maxBuffered = n }) }

// DeliveryTimeout bounds the time from Produce to a record's final outcome
// (default 2m). It must be at least RequestTimeout + Linger.
func DeliveryTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.deliveryTO = d }) }

// RequestTimeout bounds each request to a broker (default 30s). A Produce
// that times out has an unknown outcome: it may have been written.
func RequestTimeout(d time.Duration) Opt { return optFunc(func(c *cfg) { c.requestTO = d }) }

// MetadataWait bounds how long Produce (and ProduceSync) waits for the
// partitions of a topic it has no metadata for (default
// DefaultMetadataWait, the Java client's max.block.ms). Past it the call
// returns a *errors.PartitionError (Partition -1) matching
// errors.ErrMetadataTimeout and the topic's last error, typically
// errors.ErrUnknownTopicOrPartition: a misspelt topic, or one that is not
// created, fails instead of blocking as long as the context allows
// (forever with context.Background). A record with an explicit partition
// the cached metadata does not have (partitions just added with
// CreatePartitions) waits the same way for a refresh to show it; past
// MetadataWait it fails with a *errors.PartitionError naming the partition,
// matching errors.ErrMetadataTimeout and saying "no such partition". The
// call's context still ends the wait earlier.
func MetadataWait(d time.Duration) Opt { return optFunc(func(c *cfg) { c.metaWait = d }) }

// DefaultMetadataWait is the default MetadataWait.
const DefaultMetadataWait = time.Minute

// RetryBackoff is the pause before a retry (default 100ms).
func RetryBackoff(d time.Duration) Opt { return optFunc(func(c *cfg) { c.retryBackoff = d }) }

// MaxInFlight bounds the batches of one partition in flight, and the
// Produce requests on the wire to one broker (1..5, default 5; the broker
// deduplicates only the last five).
func MaxInFlight(n int) Opt { return optFunc(func(c *cfg) { c.maxInFlight = n }) }

// WithPartitioner replaces the default partitioner (Java-compatible murmur2
// for keyed records, sticky for unkeyed ones).
func WithPartitioner(p Partitioner) Opt { return optFunc(func(c *cfg) { c.partitioner = p }) }

// AckLedgerRanges bounds the acknowledged ranges remembered per partition
// for acked-write loss detection (default 1024; n must be positive). Past it the oldest ranges
// are dropped; a loss that later reaches the oldest range still held
// reports the dropped offsets to OnAckedWritesLost once, Unconfirmed and
// Untracked (they may be gone too; the producer can no longer tell).
func AckLedgerRanges(n int) Opt { return optFunc(func(c *cfg) { c.ledgerRanges = n }) }

// OnOutcome is called for every KIP-360 recovery outcome (a batch resent
// under a new producer epoch without loss or as a possible duplicate, a
// proven or possible gap, a batch failed). It runs on the producer's
// callback goroutine, in order with the delivery reports (see Produce).
func OnOutcome(fn func(Outcome)) Opt { return optFunc(func(c *cfg) { c.onOutcome = fn }) }

// OnAckedWritesLost is called when records the brokers acknowledged are
// found to be gone from the log after a leader change (an unclean leader
// election truncated them), and (with AckedWritesLost.Unconfirmed set) when
// they may be gone but the leader's log cannot tell, or (Unconfirmed, with
// AckedWritesLost.Err matching ErrAckCheckFailed and the cause) when they
// could not be checked at all: the new leader refused the check for good
// (TOPIC_AUTHORIZATION_FAILED for a producer allowed to write but not to
// describe the topic, say) or it kept failing past its retries (20, the
// backoff growing from RetryBackoff: about 21 s by default). Acknowledged
// writes nothing was reported for after a leader change were verified in
// the new leader's log (or the check was superseded by a later leader
// change, whose check covers them). A check costs one OffsetForLeaderEpoch
// and one small fetch per partition when nothing was lost. Records without
// a producer identity (a non-idempotent producer) are found in the log by
// their batch's offsets and CRC; a broker that rewrites batches
// (recompressing them for a topic compression.type other than the
// producer's, or setting LogAppendTime) changes the CRC, and such records
// acknowledged since the previous leader change are reported Unconfirmed
// at each one, unless they lie past the new leader's log end (reported
// lost). It runs on the producer's callback goroutine (see Produce).
func OnAckedWritesLost(fn func(AckedWritesLost)) Opt {
	return optFunc(func(c *cfg) { c.onAckedLoss = fn })
}

// MetadataMaxAge is how old metadata may grow before it is refreshed, for a
// refresher the producer creates (default 30s). It bounds how long an idle
// producer takes to notice a leader change, and so to check that its
// acknowledged writes survived it.
func MetadataMaxAge(d time.Duration) Opt { return optFunc(func(c *cfg) { c.metaMaxAge = d }) }
