package kepochtest

// Edits of kfake's persisted state (its DataDir), made while the cluster is
// closed. kfake keeps, per partition, segment files of raw v2 record
// batches ("<base>.dat"), an index of 15 bytes per batch ("<base>.idx"), and
// a snapshot ("snapshot.json": high watermark, log start, leader epoch,
// segment sizes); and, for the whole cluster, the producers' sequence
// windows per partition ("seq_windows.json"). On load it trusts the
// snapshot only if the segment sizes match it, and it drops index entries
// past the last batch. These edits keep the files consistent with each
// other so that the restarted broker loads exactly the log they describe.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const indexEntrySize = 15 // kfake's per-batch index entry

// Batch describes one record batch of a partition's log.
type Batch struct {
	// Base and Last are the first and last offsets of the batch.
	Base, Last int64
	// LeaderEpoch is the partition leader epoch it was written in.
	LeaderEpoch int32
	// ProducerID, ProducerEpoch and BaseSequence identify an idempotent
	// writer (ProducerID -1 otherwise).
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Records is the number of records; Control marks a transaction
	// marker.
	Records int32
	Control bool
}

// segBatch is a batch with its place in a segment file.
type segBatch struct {
	Batch
	seg  int64 // segment base
	pos  int64 // byte position in the segment
	size int64
	idx  int // index in its segment
}

func partitionDir(dir, topic string, partition int32) string {
	return filepath.Join(dir, "partitions", url.PathEscape(topic)+"-"+strconv.Itoa(int(partition)))
}

// segments lists the partition's segment bases, in order.
func segments(pdir string) ([]int64, error) {
	ents, err := os.ReadDir(pdir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".dat"); ok {
			if b, err := strconv.ParseInt(name, 10, 64); err == nil {
				bases = append(bases, b)
			}
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// readBatches reads every whole batch header of the partition's segments.
func readBatches(pdir string) ([]segBatch, error) {
	bases, err := segments(pdir)
	if err != nil {
		return nil, err
	}
	var out []segBatch
	for _, base := range bases {
		raw, err := os.ReadFile(filepath.Join(pdir, strconv.FormatInt(base, 10)+".dat"))
		if err != nil {
			return nil, err
		}
		out = append(out, parseSegment(base, raw)...)
	}
	return out, nil
}

// parseSegment reads the headers of the whole batches at the start of raw,
// the bytes of the segment whose base offset is base, stopping at the first
// that is partial or whose length is impossible.
func parseSegment(base int64, raw []byte) []segBatch {
	var out []segBatch
	for pos, i := 0, 0; pos+61 <= len(raw); i++ {
		n := int(int32(binary.BigEndian.Uint32(raw[pos+8:]))) + 12
		if n < 61 || pos+n > len(raw) {
			break
		}
		h := raw[pos:]
		b := segBatch{seg: base, pos: int64(pos), size: int64(n), idx: i}
		b.Base = int64(binary.BigEndian.Uint64(h[0:]))
		b.LeaderEpoch = int32(binary.BigEndian.Uint32(h[12:]))
		attrs := int16(binary.BigEndian.Uint16(h[21:]))
		b.Control = attrs&0x20 != 0
		b.Last = b.Base + int64(int32(binary.BigEndian.Uint32(h[23:])))
		b.ProducerID = int64(binary.BigEndian.Uint64(h[43:]))
		b.ProducerEpoch = int16(binary.BigEndian.Uint16(h[51:]))
		b.BaseSequence = int32(binary.BigEndian.Uint32(h[53:]))
		b.Records = int32(binary.BigEndian.Uint32(h[57:]))
		out = append(out, b)
		pos += n
	}
	return out
}

// readJSON decodes a kfake JSON file keeping every field (numbers as
// json.Number), so that rewriting it changes only what the harness sets.
func readJSON(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return m, nil
}

func writeJSON(path string, m map[string]any) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := path + ".kepochtest"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func jsonInt(v any) int64 {
	if n, ok := v.(json.Number); ok {
		i, _ := n.Int64()
		return i
	}
	return 0
}

// cutLog truncates the partition's persisted log at the first batch
// boundary at or below keep: the batch holding offset keep and every later
// one are removed, as a replica's log is truncated. It returns the new log
// end and the removed batches; it changes nothing when it returns an
// error.
func cutLog(dir, topic string, partition int32, keep int64) (int64, []Batch, error) {
	pdir := partitionDir(dir, topic, partition)
	snapPath := filepath.Join(pdir, "snapshot.json")
	snap, err := readJSON(snapPath)
	if err != nil {
		return 0, nil, fmt.Errorf("the partition's snapshot: %w", err)
	}
	batches, err := readBatches(pdir)
	if err != nil {
		return 0, nil, err
	}
	logStart := jsonInt(snap["log_start_offset"])
	cutAt := -1
	for i, b := range batches {
		if b.Last >= keep {
			cutAt = i
			break
		}
	}
	if cutAt < 0 {
		return 0, nil, ErrNothingLost
	}
	cut := batches[cutAt]
	if cut.Base < logStart {
		return 0, nil, fmt.Errorf("%w: keeping up to %d cuts at batch %d..%d, below the log start %d", ErrBelowLogStart, keep, cut.Base, cut.Last, logStart)
	}
	var lost []Batch
	for _, b := range batches[cutAt:] {
		lost = append(lost, b.Batch)
	}

	// The segment holding the cut batch keeps what precedes it; later
	// segments go. A segment left empty goes too, unless it is the first
	// (kfake then keeps the log's epoch and log start from the snapshot).
	bases, err := segments(pdir)
	if err != nil {
		return 0, nil, err
	}
	var keptSegs []any
	oldSegs, _ := snap["segments"].([]any)
	for i, base := range bases {
		name := filepath.Join(pdir, strconv.FormatInt(base, 10))
		switch {
		case base < cut.seg:
			if i < len(oldSegs) {
				keptSegs = append(keptSegs, oldSegs[i])
			}
		case base == cut.seg && (cut.pos > 0 || i == 0):
			if err := os.Truncate(name+".dat", cut.pos); err != nil {
				return 0, nil, err
			}
			if err := truncateIfExists(name+".idx", int64(cut.idx*indexEntrySize)); err != nil {
				return 0, nil, err
			}
			seg := map[string]any{"base_offset": base, "size": cut.pos}
			lo, hi := int32(math.MaxInt32), int32(0)
			for _, b := range batches[:cutAt] {
				if b.seg == base {
					lo, hi = min(lo, b.LeaderEpoch), max(hi, b.LeaderEpoch)
				}
			}
			if lo <= hi {
				seg["min_epoch"], seg["max_epoch"] = lo, hi
			}
			keptSegs = append(keptSegs, seg)
		default:
			if err := os.Remove(name + ".dat"); err != nil {
				return 0, nil, err
			}
			if err := os.Remove(name + ".idx"); err != nil && !os.IsNotExist(err) {
				return 0, nil, err
			}
		}
	}
	snap["segments"] = keptSegs
	snap["high_watermark"] = cut.Base
	if jsonInt(snap["last_stable_offset"]) > cut.Base {
		snap["last_stable_offset"] = cut.Base
	}
	if aborted, ok := snap["aborted_txns"].([]any); ok {
		var kept []any
		for _, a := range aborted {
			m, ok := a.(map[string]any)
			if !ok {
				continue
			}
			if jsonInt(m["last_offset"]) < cut.Base {
				kept = append(kept, a)
				continue
			}
			// The cut took the abort marker but not all of the data:
			// what is left stays aborted, ending at its last batch
			// kept (as kfake ends a transaction whose marker never
			// reached the log when it replays one).
			pid, first, last := jsonInt(m["producer_id"]), jsonInt(m["first_offset"]), int64(-1)
			for _, b := range batches[:cutAt] {
				if b.ProducerID == pid && !b.Control && b.Base >= first {
					last = b.Last
				}
			}
			if last >= 0 {
				m["last_offset"] = last
				kept = append(kept, m)
			}
		}
		// kfake searches them by last offset.
		slices.SortStableFunc(kept, func(a, b any) int {
			return cmp.Compare(jsonInt(a.(map[string]any)["last_offset"]), jsonInt(b.(map[string]any)["last_offset"]))
		})
		snap["aborted_txns"] = kept
	}
	if err := writeJSON(snapPath, snap); err != nil {
		return 0, nil, err
	}
	var kept []Batch
	for _, b := range batches[:cutAt] {
		kept = append(kept, b.Batch)
	}
	return cut.Base, lost, rebuildProducerState(dir, topic, partition, kept)
}

func truncateIfExists(path string, size int64) error {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Size() <= size {
		return nil
	}
	return os.Truncate(path, size)
}

// rebuildProducerState replaces the partition's producer sequence state
// with what its log holds: for each producer, the last (up to five)
// batches of its latest epoch, as a Kafka leader rebuilds producer state
// from its own log. Producers with no batch left are forgotten. With
// kept nil, the partition's producer state is simply dropped.
func rebuildProducerState(dir, topic string, partition int32, kept []Batch) error {
	path := filepath.Join(dir, "seq_windows.json")
	m, err := readJSON(path)
	if os.IsNotExist(err) {
		m = map[string]any{"version": 1}
	} else if err != nil {
		return err
	}
	var windows []any
	old, _ := m["windows"].([]any)
	for _, w := range old {
		if wm, ok := w.(map[string]any); ok && wm["topic"] == topic && jsonInt(wm["partition"]) == int64(partition) {
			continue
		}
		windows = append(windows, w)
	}
	last := map[int64][]Batch{} // producer → its batches of its latest epoch, in order
	var order []int64
	for _, b := range kept {
		if b.ProducerID < 0 || b.Control || b.BaseSequence < 0 {
			continue
		}
		bs, seen := last[b.ProducerID]
		if !seen {
			order = append(order, b.ProducerID)
		}
		if len(bs) > 0 && bs[0].ProducerEpoch != b.ProducerEpoch {
			bs = nil
		}
		last[b.ProducerID] = append(bs, b)
	}
	for _, pid := range order {
		bs := last[pid]
		if len(bs) > 5 {
			bs = bs[len(bs)-5:]
		}
		entries := make([]any, 5)
		for i := range entries {
			entries[i] = map[string]any{"first_seq": 0, "next_seq": 0, "offset": 0}
		}
		var next int32
		for i, b := range bs {
			next = int32((int64(b.BaseSequence) + int64(b.Records)) % math.MaxInt32)
			entries[i] = map[string]any{"first_seq": b.BaseSequence, "next_seq": next, "offset": b.Base}
		}
		windows = append(windows, map[string]any{
			"pid": pid, "topic": topic, "partition": partition,
			"entries": entries, "count": len(bs), "at": len(bs) % 5,
			"epoch": bs[len(bs)-1].ProducerEpoch, "seen": true, "next_seq": next,
		})
	}
	m["windows"] = windows
	return writeJSON(path, m)
}

// keepEmptySegments puts back in each partition's snapshot the empty
// segment files kfake left out of it, and gives a partition with no
// segment file an empty one (see below): kfake drops an empty segment from
// memory when it loads (an UncleanElection that cut the whole log leaves
// the first one empty) but not its file, so its next save lists fewer
// segments than there are files, and its next load ignores the snapshot
// and replays the log, losing the leader epoch, the leader and the log
// start of an empty log.
func keepEmptySegments(dir string) error {
	ents, err := os.ReadDir(filepath.Join(dir, "partitions"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		pdir := filepath.Join(dir, "partitions", e.Name())
		snapPath := filepath.Join(pdir, "snapshot.json")
		snap, err := readJSON(snapPath)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		bases, err := segments(pdir)
		if err != nil {
			return err
		}
		old, _ := snap["segments"].([]any)
		if len(bases) == 0 {
			// No segment file at all (a partition never written, or
			// one whose every record was deleted): kfake would ignore
			// the snapshot and start the partition afresh (log start
			// and end 0, epoch 0, a random leader). An empty segment
			// at the log start makes it load the snapshot.
			start := jsonInt(snap["log_start_offset"])
			f, err := os.OpenFile(filepath.Join(pdir, strconv.FormatInt(start, 10)+".dat"), os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
			snap["segments"] = []any{map[string]any{"base_offset": start, "size": 0}}
			if err := writeJSON(snapPath, snap); err != nil {
				return err
			}
			continue
		}
		if len(old) == len(bases) {
			continue
		}
		byBase := map[int64]any{}
		for _, s := range old {
			if m, ok := s.(map[string]any); ok {
				byBase[jsonInt(m["base_offset"])] = s
			}
		}
		var segs []any
		ok := true
		for _, base := range bases {
			if s, found := byBase[base]; found {
				segs = append(segs, s)
				continue
			}
			st, err := os.Stat(filepath.Join(pdir, strconv.FormatInt(base, 10)+".dat"))
			if err != nil || st.Size() != 0 {
				ok = false // not what this repairs: leave it to kfake
				break
			}
			segs = append(segs, map[string]any{"base_offset": base, "size": 0})
		}
		if !ok {
			continue
		}
		snap["segments"] = segs
		if err := writeJSON(snapPath, snap); err != nil {
			return err
		}
	}
	return nil
}
