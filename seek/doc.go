// Package seek is the pure, I/O-free per-partition position and
// epoch-lineage state machine of the kepoch consumer (the client side of
// KIP-320), and the SeekToNearest resolution.
//
// It has no network, no goroutines and no clock reads: the same state and
// the same event always give the same actions. The consumer turns broker
// answers into events, steps the machine, and turns the actions it returns
// into requests. Package seek is the only place in kepoch that decides
// whether a log was truncated.
//
// # The loop
//
// Modelled on etcd raft's RawNode, one Partition per assigned partition:
//
//	p, _ := seek.NewPartition(cfg)          // cfg.IDs shared by all partitions
//	p.Step(seek.LeaderChanged{...})        // from metadata, after every refresh
//	acts := p.Step(seek.Assigned{Start: seek.AtEpoch(committed, committedEpoch)})
//	for {
//		for _, a := range acts {
//			switch a.Kind {
//			case seek.ActFetch:           // add a.Fetch to the next Fetch to a.Fetch.Leader
//			case seek.ActValidate:        // add a.Validate to an OffsetForLeaderEpoch
//			case seek.ActListOffsets:     // add a.List to a ListOffsets
//			case seek.ActRefreshMetadata: // ask package metadata for a refresh
//			case seek.ActReport:          // drop buffered records, surface a.Report
//			case seek.ActHalt:            // surface; wait for the application to seek
//			case seek.ActResolved:        // tell the application where SeekToNearest went
//			}
//		}
//		ev := next()                      // BatchFetched… FetchCompleted, FetchFailed,
//		acts = p.Step(ev)                 // DivergingEpoch, EpochEndOffset, ListedOffset,
//	}                                     // LeaderChanged, Seek, Tick, …
//
// Every request action carries a RequestID and every answer event carries
// the id of the request it answers. The machine has at most one request in
// flight per partition; an answer with any other id is stale (a seek, a
// reassignment, or a newer leader epoch came in between) and changes
// nothing. This replaces the Java client's "is the position still the one
// I asked about" comparisons and covers every race of that kind at once.
//
// Fetching and delivery are one step: the machine's position is the
// consumed position (the one to commit). The consumer steps BatchFetched
// for each batch of a Fetch answer as it hands the batch's records to the
// application, then FetchCompleted, which emits the next Fetch; with one
// fetch in flight per partition there is nothing to prefetch past a
// report. When an action reports a break or moves the position, the rest
// of that answer is stale and its batches are ignored.
//
// Time is data: a request that failed with a retriable error is sent again
// after Config.RetryTicks Tick events, or as soon as metadata names a newer
// leader.
//
// # State
//
// A Partition holds the position (next offset, and the leader epoch of the
// batch that held the last consumed record: Kafka's offsetEpoch, sent as
// LastFetchedEpoch and committed), the leader (broker, epoch) from metadata,
// the largest epoch it has seen from any source, the topic id, and a bounded
// Lineage: for each epoch consumed, the first offset consumed in it.
//
// Fetch states follow Kafka's SubscriptionState: Initializing,
// AwaitingReset (a ListOffsets is pending), AwaitingValidation (an
// OffsetForLeaderEpoch is pending), Fetching, plus Halted (a break under
// PolicyNone, or a fatal error; only a seek resumes). Pausing is a flag that
// withholds Fetch actions.
//
// # Detection
//
// A position with an epoch is validated with OffsetForLeaderEpoch before
// anything is fetched after an epoch-bearing seek or committed offset, a
// leader or leader-epoch change, an OFFSET_OUT_OF_RANGE, or a batch whose
// epoch is lower than the position's. Every Fetch also carries
// LastFetchedEpoch, so a v12+ leader checks divergence in-band and answers
// DivergingEpoch, which is handled exactly like an OffsetForLeaderEpoch
// answer. A position without an epoch is never validated.
//
// With Config.InBandValidation the fetch itself is the check where it can
// be: after a leader or leader-epoch change, an AtEpoch seek or start, or
// an AtHistory start, when the leader is known to check LastFetchedEpoch
// (LeaderChanged.InBand, BrokerInBand) and the partition is not paused,
// the partition stays AwaitingValidation with one Fetch in flight
// (FetchRequest.Validates) instead of an OffsetForLeaderEpoch. A Kafka
// leader checks the fetch's LastFetchedEpoch r at offset c against its
// epoch cache before reading (Partition.readRecords): it answers
// DivergingEpoch with the same (epoch, end offset) OffsetForLeaderEpoch(r)
// would give, unless that epoch is r and ends at or after c, exactly when
// compare finds that answer consistent. So DivergingEpoch is judged as
// always, an answer the broker checked (BatchFetched.Checked,
// FetchCompleted.Checked) proves the position before its first batch is
// accepted, and an answer it did not check (below Fetch v12, or a leader
// that named a read replica and read nothing) proves nothing: the
// position is then validated with OffsetForLeaderEpoch and nothing of the
// answer is accepted. An OFFSET_OUT_OF_RANGE (the leader could not locate
// r, or c is below its log start) is validated with OffsetForLeaderEpoch
// before it is classified, as always. Narrowing and SeekToNearest always
// ask OffsetForLeaderEpoch.
//
// One function, compare, judges a leader's answer (epoch E, end offset End)
// for the position (offset c, epoch r): End ≥ c with E ≥ r is no
// truncation; otherwise the candidate divergence point is End, or, when the
// leader never had our epoch (E < r), min(End, the first offset we consumed
// in an epoch above E) — a case Kafka's consumer misses when End ≥ c. The
// candidate is exact when our record just below it has epoch E, or when
// nothing was consumed below it; when that record has a smaller epoch the
// machine asks the leader again about that epoch, as a follower does, until
// it finds the first replaced offset; when the lineage does not reach that
// far the candidate is reported as a bound (Kafka's precision). An answer
// naming our epoch with an end at or below a record we consumed in an
// earlier epoch is the leader's echo of an epoch it no longer keeps: a
// bound without an epoch (Truncation.EpochPruned). A -1/-1
// answer is its own outcome, Unlocated: the leader cannot say, so no offset
// is invented. The report's divergent position is Kafka's (the end offset
// and the leader's epoch that ends there); the position a rewind moves to
// (Truncation.Resume) carries the epoch of the leader's record before it
// only when that is certain, since a leader may echo an epoch it no longer
// has, and a wrong epoch would make a later validation report a divergence
// that is not there.
//
// # Breaks and policy
//
// Every break of the consumed lineage is reported once, as a Truncation
// (ActReport), before any record of the new lineage is delivered: Diverged
// (located), Unlocated (-1/-1), BelowLogStart (retention), PastLogEnd (no
// epoch to locate with), Recreated (topic id changed). OFFSET_OUT_OF_RANGE
// is classified: with an epoch, a divergence is ruled out first; then the
// log start tells retention from a position past the end.
//
// PolicyEarliest and PolicyLatest move a Diverged position to the exact
// divergence point — not to the log start or end — so nothing of the new
// lineage is skipped and nothing of the old is delivered again; they reset
// the other breaks through ListOffsets (earliest or latest; a recreated
// topic always restarts at its earliest offset, its divergence point).
// PolicyNone halts with the report until the application seeks; seeking to
// the reported consumed offset continues without validating the diverged
// epoch again (KIP-320), seeking with AtEpoch to Truncation.Resume
// continues in the new lineage.
//
// A position stored with an EpochHistory (Start AtHistory) takes the epoch
// of its previous record from the history and is validated like AtEpoch,
// with the history seeding the lineage; when the history cannot give that
// epoch the partition halts (HaltUnvalidated) until the application seeks.
// A history naming a topic ID other than the one metadata names (before or
// after the start) is of a deleted incarnation: Recreated, every stored
// offset replaced, never validated against the new log.
//
// SeekToNearest (Start NearestTo) is resolved by Nearest: keep the offset if
// the leader still has it in that epoch, else move to where that epoch ends.
//
// Errors are data here: the consumer maps a Truncation to
// errors.LogTruncationError and a Halt to a partition error.
package seek
