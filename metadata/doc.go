// Package metadata owns the leader-epoch-aware view of the cluster shared by
// kepoch consumers and producers: topics with their IDs, partitions with
// leader, leader epoch, replicas, ISR and offline replicas, and brokers.
//
// # Driving loop
//
// One Refresher per transport (a *kgo.Client, used through kmsg.Requestor),
// shared by every consumer and producer on it:
//
//	r := metadata.NewRefresher(client)
//	defer r.Close()
//	unwatch := r.Watch("orders")        // only watched topics are refreshed
//	defer unwatch()
//	sub := r.Subscribe("orders")        // leader/epoch changes, pushed
//	defer sub.Close()
//
//	p, err := r.WaitFor(ctx, "orders", 3, -1) // a leader, any epoch
//	// … send Fetch/Produce to p.Leader with CurrentLeaderEpoch p.LeaderEpoch …
//	// on a partition error:
//	if reason, ok := metadata.ReasonFor(err); ok {
//		r.Trigger(reason)                 // coalesced, spaced, returns at once
//	}
//	// on a KIP-951 CurrentLeader hint:
//	r.ApplyHint("orders", requestTopicID, 3, hint.LeaderID, hint.LeaderEpoch)
//	// later: r.Lookup("orders", 3) for the current leader and epoch,
//	// or evs, _ := sub.Next(ctx) to react to each change.
//
// # Merge rules
//
// Answers are merged into the cache by a pure function (merge.go); the
// rules, with their reasons, are listed there. In short: epoch -1 never
// replaces a known epoch; a lower epoch is rejected (KIP-232) until
// Confirmations (default 5) consecutive answers report a lower one, or at
// once when a new incarnation of the topic (a new topic ID: the topic was
// recreated) is adopted; epochs from Metadata below v9 are not trusted;
// every adopted leader or epoch change is one Event. KIP-951 hints are
// applied only when newer.
//
// A new topic ID is adopted when a broker that answered the cached ID is
// seen answering it (a broker's metadata only moves forward), or after
// Confirmations consecutive answers name it; an ID some broker was seen
// moving away from is never adopted again, so a broker lagging behind a
// recreation cannot take the cache back to the old incarnation. This needs
// to know which broker answered: *kgo.Client's RequestSharded says it.
//
// # Refreshes
//
// The Refresher's one goroutine sends every Metadata request. Trigger and
// Refresh ask for a round trip; all asks made before it starts share it,
// asks made while it is in flight get the next one. Round trips are spaced
// by a backoff with jitter (Backoff; 100 ms doubling to 1 s by default)
// that grows with consecutive failures or fruitless triggered round trips,
// and failed round trips are retried on their own. Without triggers, the
// cache is refreshed every MaxAge (default 5 minutes). Clock and jitter can
// be injected (WithClock, WithJitter).
//
// Reads (Lookup, Topic, Brokers) load an immutable snapshot and never block.
// Subscriptions get events through their own unbounded queue and a
// capacity-1 signal channel, so the refresher never waits for a reader.
// Close cancels the round trip in flight and returns once the goroutine has
// exited; WaitFor, Refresh and Subscription.Next then return ErrClosed.
//
// The package imports the standard library, kmsg, kgo (for the answering
// broker of RequestSharded) and kepoch's errors.
package metadata
