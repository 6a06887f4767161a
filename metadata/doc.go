// Package metadata owns the leader-epoch-aware view of the cluster shared by
// kepoch consumers and producers: topics and their IDs, partitions with
// leader, leader epoch, replicas and ISR, and brokers.
//
// The merge of a Metadata answer into the cache is a pure function; the
// refresher that issues Metadata requests is one goroutine owned by the
// Refresher and stopped by Close.
package metadata
