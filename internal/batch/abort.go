package batch

import (
	"cmp"
	"slices"
)

// AbortedTransaction is one entry of a Fetch response's
// AbortedTransactions: a producer and the first offset of a transaction of
// it that was aborted.
type AbortedTransaction struct {
	ProducerID  int64
	FirstOffset int64
}

// AbortFilter implements read_committed filtering as the Java consumer does
// (CompletedFetch.nextFetchedRecord): feed it every batch of the partition
// in log order and it says which data batches belong to aborted
// transactions. It is a pure state machine; an Iterator with ReadCommitted
// set runs one. The zero value filters nothing until Reset.
type AbortFilter struct {
	txns   []AbortedTransaction // sorted by FirstOffset
	next   int                  // txns[next:] not yet reached
	active map[int64]struct{}   // producers inside an aborted transaction
}

// Reset starts filtering a new fetch response's partition with its aborted
// transactions, which need not be sorted. It copies txns.
func (f *AbortFilter) Reset(txns []AbortedTransaction) {
	f.txns = append(f.txns[:0], txns...)
	slices.SortFunc(f.txns, func(a, b AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	f.next = 0
	clear(f.active)
}

// Aborted takes the next batch's header and, for a control batch, its
// marker, and reports whether the batch is a data batch of an aborted
// transaction, whose records a read_committed consumer must not see. An
// abort marker ends its producer's aborted transaction; control batches are
// never reported aborted (they have no data records anyway).
func (f *AbortFilter) Aborted(h *Header, m ControlMarker) bool {
	if len(f.txns) == 0 || h.ProducerID < 0 {
		return false
	}
	// Every aborted transaction that began at or before this batch's end
	// is now open for its producer.
	last := h.LastOffset()
	for f.next < len(f.txns) && f.txns[f.next].FirstOffset <= last {
		if f.active == nil {
			f.active = make(map[int64]struct{})
		}
		f.active[f.txns[f.next].ProducerID] = struct{}{}
		f.next++
	}
	if h.Attributes.Control() {
		if m.Type == ControlAbort {
			delete(f.active, h.ProducerID)
		}
		return false
	}
	if !h.Attributes.Transactional() {
		return false
	}
	_, aborted := f.active[h.ProducerID]
	return aborted
}
