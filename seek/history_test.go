package seek

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"
)

// obs is one step applied to a history in the table tests.
type obs struct {
	cut        bool // Cut(base) instead of Observe
	epoch      int32
	base, last int64
	reset      bool
}

func TestEpochHistoryObserve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		steps   []obs
		want    []EpochEntry
		wantEnd int64
		dropped bool
	}{
		{name: "empty", want: nil, wantEnd: NoOffset},
		{name: "same epoch extends", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 1, base: 10, last: 19}},
			want: []EpochEntry{{1, 0}}, wantEnd: 20},
		{name: "higher epoch appends", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 3, base: 10, last: 12}, {epoch: 3, base: 13, last: 20}},
			want: []EpochEntry{{1, 0}, {3, 10}}, wantEnd: 21},
		{name: "first batch starts mid-way", steps: []obs{{epoch: 2, base: 100, last: 109}},
			want: []EpochEntry{{2, 100}}, wantEnd: 110},
		{name: "compaction gap", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 15, last: 19}},
			want: []EpochEntry{{1, 0}, {2, 15}}, wantEnd: 20},
		{name: "re-read after seek back cuts at the batch", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}, {epoch: 1, base: 5, last: 9}},
			want: []EpochEntry{{1, 0}}, wantEnd: 10},
		{name: "re-read in a new epoch replaces the suffix", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}, {epoch: 4, base: 10, last: 11}},
			want: []EpochEntry{{1, 0}, {4, 10}}, wantEnd: 12},
		{name: "lower epoch after higher restarts", steps: []obs{{epoch: 3, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}},
			want: []EpochEntry{{2, 10}}, wantEnd: 20, dropped: true},
		{name: "no epoch empties", steps: []obs{{epoch: 3, base: 0, last: 9}, {epoch: -1, base: 10, last: 19}},
			want: nil, wantEnd: NoOffset, dropped: true},
		{name: "invalid batches ignored", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 20, last: 19}, {epoch: 2, base: -1, last: 19}},
			want: []EpochEntry{{1, 0}}, wantEnd: 10},
		{name: "bound drops the oldest", size: 2, steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}, {epoch: 3, base: 20, last: 29}},
			want: []EpochEntry{{2, 10}, {3, 20}}, wantEnd: 30, dropped: true},
		{name: "cut at divergence", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}, {cut: true, base: 15}},
			want: []EpochEntry{{1, 0}, {2, 10}}, wantEnd: 15},
		{name: "cut at an entry start drops it", steps: []obs{{epoch: 1, base: 0, last: 9}, {epoch: 2, base: 10, last: 19}, {cut: true, base: 10}},
			want: []EpochEntry{{1, 0}}, wantEnd: 10},
		{name: "cut past the end keeps the end", steps: []obs{{epoch: 1, base: 0, last: 9}, {cut: true, base: 50}},
			want: []EpochEntry{{1, 0}}, wantEnd: 10},
		{name: "cut below everything empties", steps: []obs{{epoch: 1, base: 5, last: 9}, {cut: true, base: 3}},
			want: nil, wantEnd: NoOffset},
		{name: "reset", steps: []obs{{epoch: 1, base: 5, last: 9}, {reset: true}, {epoch: 2, base: 30, last: 31}},
			want: []EpochEntry{{2, 30}}, wantEnd: 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewEpochHistory(tc.size)
			for _, s := range tc.steps {
				switch {
				case s.reset:
					h.Reset()
				case s.cut:
					h.Cut(s.base)
				default:
					h.Observe(s.epoch, s.base, s.last)
				}
			}
			if got := h.Entries(); !slices.Equal(got, tc.want) {
				t.Errorf("entries %v, want %v", got, tc.want)
			}
			if h.End() != tc.wantEnd {
				t.Errorf("end %d, want %d", h.End(), tc.wantEnd)
			}
			if h.Dropped() != tc.dropped {
				t.Errorf("dropped %v, want %v", h.Dropped(), tc.dropped)
			}
			checkInvariants(t, h)
		})
	}
}

func TestEpochHistoryEpochOf(t *testing.T) {
	h, err := EpochHistoryOf([]EpochEntry{{1, 10}, {3, 20}, {4, 35}}, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		offset int64
		epoch  int32
		ok     bool
	}{
		{-1, NoEpoch, false}, {0, NoEpoch, false}, {9, NoEpoch, false}, // before the history
		{10, 1, true}, {19, 1, true}, {20, 3, true}, {34, 3, true}, {35, 4, true}, {39, 4, true},
		{40, NoEpoch, false}, {1000, NoEpoch, false}, // at or past End
	} {
		e, ok := h.EpochOf(tc.offset)
		if e != tc.epoch || ok != tc.ok {
			t.Errorf("EpochOf(%d) = %d, %v; want %d, %v", tc.offset, e, ok, tc.epoch, tc.ok)
		}
	}
	if e, ok := NewEpochHistory(0).EpochOf(0); ok || e != NoEpoch {
		t.Errorf("empty history: EpochOf(0) = %d, %v", e, ok)
	}
	var zero EpochHistory
	zero.Observe(2, 0, 0)
	if e, ok := zero.EpochOf(0); !ok || e != 2 || zero.Size() != DefaultHistorySize {
		t.Errorf("zero value: EpochOf(0) = %d, %v, size %d", e, ok, zero.Size())
	}
}

func TestAtHistory(t *testing.T) {
	h, _ := EpochHistoryOf([]EpochEntry{{1, 10}, {3, 20}, {4, 35}}, 40, 0)
	for _, tc := range []struct {
		offset      int64
		epoch       int32
		unvalidated bool
		entries     int
	}{
		{40, 4, false, 3}, // the history's own end
		{36, 4, false, 3},
		{35, 3, false, 2}, // record 34 is epoch 3; e4 is cut
		{21, 3, false, 2},
		{11, 1, false, 1},
		{10, NoEpoch, true, 0}, // record 9 precedes the history
		{0, NoEpoch, true, 0},
		{41, NoEpoch, true, 3}, // record 40 is past the history's end
	} {
		s := AtHistory(tc.offset, h)
		if s.Kind != StartHistory || s.Offset != tc.offset || s.Epoch != tc.epoch || s.Unvalidated() != tc.unvalidated || s.History.Len() != tc.entries {
			t.Errorf("AtHistory(%d) = %v (unvalidated %v, %d entries); want epoch %d, unvalidated %v, %d entries",
				tc.offset, s, s.Unvalidated(), s.History.Len(), tc.epoch, tc.unvalidated, tc.entries)
		}
	}
	if s := AtHistory(5, nil); !s.Unvalidated() || s.History == nil {
		t.Errorf("AtHistory(nil) = %v", s)
	}
	// The Start owns a copy.
	s := AtHistory(40, h)
	h.Cut(0)
	if s.History.Len() != 3 || s.Epoch != 4 {
		t.Errorf("AtHistory shares the caller's history: %v", s)
	}
}

func TestEpochHistoryOfRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []EpochEntry
		end     int64
	}{
		{"negative epoch", []EpochEntry{{-1, 0}}, 5},
		{"negative offset", []EpochEntry{{1, -3}}, 5},
		{"epoch not increasing", []EpochEntry{{2, 0}, {2, 5}}, 9},
		{"offset not increasing", []EpochEntry{{1, 5}, {2, 5}}, 9},
		{"epoch decreasing", []EpochEntry{{3, 0}, {2, 5}}, 9},
		{"end not after last", []EpochEntry{{1, 0}, {2, 5}}, 5},
	} {
		if _, err := EpochHistoryOf(tc.entries, tc.end, 0); !errors.Is(err, ErrCorruptHistory) {
			t.Errorf("%s: err %v, want ErrCorruptHistory", tc.name, err)
		}
	}
	h, err := EpochHistoryOf([]EpochEntry{{1, 0}, {2, 5}, {3, 9}}, 12, 2)
	if err != nil || h.Len() != 2 || !h.Dropped() {
		t.Errorf("bounded EpochHistoryOf: %v %v", h, err)
	}
}

func TestEpochHistoryEncoding(t *testing.T) {
	full := NewEpochHistory(0)
	for i := range DefaultHistorySize + 3 {
		full.Observe(int32(i), int64(i)*1000, int64(i)*1000+999)
	}
	small, _ := EpochHistoryOf([]EpochEntry{{0, 0}, {7, 1 << 40}}, 1<<40+5, 8)
	named, fullNamed, emptyNamed := small.Clone(), full.Clone(), NewEpochHistory(0)
	for _, h := range []*EpochHistory{named, fullNamed, emptyNamed} {
		h.SetTopicID(TopicID{0xab, 15: 1})
	}
	for _, h := range []*EpochHistory{NewEpochHistory(0), NewEpochHistory(3), small, full, named, fullNamed, emptyNamed} {
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		want := historyHeaderSize + historyEntrySize*h.Len() + 4
		if h.TopicID() != (TopicID{}) {
			want += historyIDSize
		}
		if v := b[3]; (v == historyVersionID) != (h.TopicID() != (TopicID{})) {
			t.Errorf("%v of topic ID %x: version %d", h, h.TopicID(), v)
		}
		if len(b) != want {
			t.Errorf("%v: %d bytes, want %d", h, len(b), want)
		}
		pre := []byte("prefix")
		b2, _ := h.AppendBinary(pre)
		if !bytes.Equal(b2[len(pre):], b) || string(b2[:len(pre)]) != "prefix" {
			t.Errorf("%v: AppendBinary differs from MarshalBinary", h)
		}
		var got EpochHistory
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", h, err)
		}
		if !sameHistory(&got, h) {
			t.Errorf("round trip: got %v (size %d), want %v (size %d)", &got, got.Size(), h, h.Size())
		}
	}
	if len(mustMarshal(t, full)) != 793 || len(mustMarshal(t, fullNamed)) != 809 {
		t.Errorf("a full default history is %d bytes (%d with a topic ID), documented 793 (809)",
			len(mustMarshal(t, full)), len(mustMarshal(t, fullNamed)))
	}
}

// SetTopicID names the incarnation; naming another one empties the history
// (its records were the deleted topic's); a zero ID changes nothing; Reset
// and Clone keep the ID.
func TestEpochHistoryTopicID(t *testing.T) {
	a, b := TopicID{1}, TopicID{2}
	h, _ := EpochHistoryOf([]EpochEntry{{1, 0}, {4, 50}}, 60, 0)
	h.SetTopicID(a)
	h.SetTopicID(TopicID{})
	h.SetTopicID(a)
	if h.TopicID() != a || h.Len() != 2 || h.End() != 60 {
		t.Fatalf("same ID: %v of %x", h, h.TopicID())
	}
	if c := h.Clone(); c.TopicID() != a {
		t.Fatalf("clone of %x names %x", a, c.TopicID())
	}
	h.SetTopicID(b)
	if h.TopicID() != b || h.Len() != 0 || h.End() != NoOffset || h.Dropped() {
		t.Fatalf("another ID: %v of %x", h, h.TopicID())
	}
	h.Observe(0, 0, 4)
	h.Reset()
	if h.TopicID() != b {
		t.Fatalf("Reset forgot the ID: %x", h.TopicID())
	}
}

func TestEpochHistoryDecodeRejects(t *testing.T) {
	h, _ := EpochHistoryOf([]EpochEntry{{1, 0}, {4, 50}}, 60, 0)
	good := mustMarshal(t, h)
	// resum rewrites the CRC so that the content checks are reached.
	resum := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"short", good[:20]},
		{"truncated entry", good[:len(good)-5]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return resum(b) })},
		{"version", edit(func(b []byte) []byte { b[3] = 3; return resum(b) })},
		{"version 2 without a topic ID", edit(func(b []byte) []byte { b[3] = 2; return resum(b) })},
		{"zero topic ID", resum(append(append(append([]byte("KEH\x02\x00"), 0, 0, 0, 64, 0, 0, 0, 0), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), make([]byte, 16+4)...))},
		{"flags", edit(func(b []byte) []byte { b[4] = 0x80; return resum(b) })},
		{"crc", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
		{"payload bit flip", edit(func(b []byte) []byte { b[historyHeaderSize+3] ^= 1; return b })},
		{"size zero", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[5:], 0); return resum(b) })},
		{"size huge", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[5:], 1<<31); return resum(b) })},
		{"count over size", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[5:], 1); return resum(b) })},
		{"count mismatch", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[9:], 3); return resum(b) })},
		{"count huge", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[9:], 0xffffffff); return resum(b) })},
		{"non-monotonic epoch", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[historyHeaderSize+historyEntrySize:], 1)
			return resum(b)
		})},
		{"non-monotonic offset", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[historyHeaderSize+historyEntrySize+4:], 0)
			return resum(b)
		})},
		{"negative epoch", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[historyHeaderSize:], 0xffffffff)
			return resum(b)
		})},
		{"end not after last entry", edit(func(b []byte) []byte { binary.BigEndian.PutUint64(b[13:], 50); return resum(b) })},
		{"empty with end", resum(append(append([]byte("KEH\x01\x00"), 0, 0, 0, 64, 0, 0, 0, 0), 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0))},
	} {
		got := h.Clone()
		err := got.UnmarshalBinary(tc.in)
		var he *HistoryError
		if !errors.Is(err, ErrCorruptHistory) || !errors.As(err, &he) {
			t.Errorf("%s: err %v, want a *HistoryError matching ErrCorruptHistory", tc.name, err)
		}
		if !sameHistory(got, h) {
			t.Errorf("%s: a failed decode changed the history to %v", tc.name, got)
		}
	}
}

// FuzzEpochHistoryDecode: decoding never panics; whatever decodes is a
// valid history and encodes back to the same bytes; and a history built by
// observing batches derived from the input round-trips.
func FuzzEpochHistoryDecode(f *testing.F) {
	h, _ := EpochHistoryOf([]EpochEntry{{1, 0}, {4, 50}}, 60, 0)
	f.Add(mustMarshal(f, h))
	f.Add(mustMarshal(f, NewEpochHistory(1)))
	named := h.Clone()
	named.SetTopicID(TopicID{7, 15: 7})
	f.Add(mustMarshal(f, named))
	f.Add([]byte("KEH\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got EpochHistory
		if err := got.UnmarshalBinary(data); err == nil {
			checkInvariants(t, &got)
			again, _ := got.MarshalBinary()
			if !bytes.Equal(again, data) {
				t.Fatalf("decoded %v re-encodes to %x, input %x", &got, again, data)
			}
		} else if !errors.Is(err, ErrCorruptHistory) {
			t.Fatalf("untyped error %v", err)
		}
		// Observe batches read off the input: the invariants hold and the
		// result round-trips.
		b := NewEpochHistory(int(len(data)%7) + 1)
		for len(data) >= 3 {
			epoch := int32(int8(data[0])) // negative epochs too
			base := int64(data[1])
			last := base + int64(data[2]%4) - 1 // sometimes invalid
			if data[2]&0x80 != 0 {
				b.Cut(base)
			} else {
				b.Observe(epoch, base, last)
			}
			checkInvariants(t, b)
			data = data[3:]
		}
		enc, _ := b.MarshalBinary()
		var rt EpochHistory
		if err := rt.UnmarshalBinary(enc); err != nil || !sameHistory(&rt, b) {
			t.Fatalf("round trip of %v: %v, %v", b, &rt, err)
		}
	})
}

func mustMarshal(tb testing.TB, h *EpochHistory) []byte {
	tb.Helper()
	b, err := h.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func sameHistory(a, b *EpochHistory) bool {
	return slices.Equal(a.entries, b.entries) && a.End() == b.End() && a.Size() == b.Size() && a.Dropped() == b.Dropped() &&
		a.TopicID() == b.TopicID()
}

// checkInvariants fails when h is not strictly increasing, holds more than
// its size, or does not end after its last entry.
func checkInvariants(t *testing.T, h *EpochHistory) {
	t.Helper()
	if h.Len() > h.Size() {
		t.Fatalf("%v: %d entries, size %d", h, h.Len(), h.Size())
	}
	if err := checkEntries(h.entries, h.End()); err != nil {
		t.Fatalf("%v: %v", h, err)
	}
	for _, e := range h.entries {
		if got, ok := h.EpochOf(e.StartOffset); !ok || got != e.Epoch {
			t.Fatalf("%v: EpochOf(%d) = %d, %v", h, e.StartOffset, got, ok)
		}
	}
}
