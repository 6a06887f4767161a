package seek

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/kepoch/kepoch/errors"
)

// DefaultHistorySize is the number of entries an EpochHistory keeps when
// it is created with a size ≤ 0. A partition's leader epoch changes only on
// a leader change, so 64 entries reach back over 63 elections.
const DefaultHistorySize = 64

// maxHistorySize bounds the size an encoded history may declare (and so
// what UnmarshalBinary allocates).
const maxHistorySize = 1 << 16

// EpochEntry is one step of an EpochHistory: the record at StartOffset was
// written in leader epoch Epoch, and so were the records after it up to the
// next entry's StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// EpochHistory is a partition's durable epoch history: the leader epochs
// of the record batches a consumer delivered, as (epoch, first offset
// delivered in it) entries, strictly increasing in both, and End, the offset
// after the last record it covers. It is the client-side twin of a broker's
// leader-epoch-checkpoint file, meant to be stored by an application next to
// its offsets (MarshalBinary), atomically with its output, so that a
// position (offset) restored later can be validated against the log: the
// epoch of record offset-1 is EpochOf(offset-1) (see AtHistory).
//
// Its facts are of the form "the record at o was written in epoch e", so
// they stay true as long as the log is not truncated below them; a
// consumer cuts its history at the divergence point of every truncation it
// reports (Cut) and starts it afresh when its position jumps (Reset).
//
// It is bounded: when a new epoch would exceed its size, the oldest entry is
// dropped and Dropped reports it. EpochOf then does not know offsets below
// the oldest entry left.
//
// It names the topic incarnation its records belong to (TopicID, when the
// consumer knew it): a topic deleted and created again under the same name
// starts its offsets and epochs over, so only the ID tells a stored
// position of the deleted log from one of the new log (see AtHistory).
//
// The zero value is an empty history of DefaultHistorySize entries, and a
// nil *EpochHistory reads as one (Size, Len, Entries, End, Dropped,
// TopicID, EpochOf, String, Clone, MarshalBinary, AppendBinary; a Start
// whose History is nil steps as one with an empty history) and stays one:
// it has nowhere to keep anything, so Observe, SetTopicID, Cut and Reset
// do nothing on it, and UnmarshalBinary returns an error (use
// NewEpochHistory, or the zero value, for a history to fill). An
// EpochHistory is not safe for concurrent use; Clone copies it.
type EpochHistory struct {
	entries []EpochEntry
	end     int64 // offset after the last covered record; meaningful when entries is not empty
	size    int   // ≤ 0: DefaultHistorySize
	dropped bool
	topicID TopicID // the incarnation the entries belong to; zero: not known
}

// NewEpochHistory returns an empty history keeping at most size entries
// (DefaultHistorySize when size ≤ 0).
func NewEpochHistory(size int) *EpochHistory {
	return &EpochHistory{size: min(size, maxHistorySize)}
}

// EpochHistoryOf returns a history holding entries (oldest first) and
// covering the offsets up to end (exclusive), keeping at most size entries
// (DefaultHistorySize when size ≤ 0; the oldest entries beyond it are
// dropped). It returns an error matching ErrCorruptHistory when the entries
// are not strictly increasing in epoch and offset, hold a negative value,
// or do not end before end.
func EpochHistoryOf(entries []EpochEntry, end int64, size int) (*EpochHistory, error) {
	h := NewEpochHistory(size)
	if err := checkEntries(entries, end); err != nil {
		err.argument = true
		return nil, err
	}
	h.entries = append(h.entries, entries...)
	if len(entries) > 0 {
		h.end = end
	}
	h.trim()
	return h, nil
}

// entryString names an entry in a HistoryError's reason.
func entryString(e EpochEntry) string {
	return "(epoch " + strconv.Itoa(int(e.Epoch)) + ", offset " + strconv.FormatInt(e.StartOffset, 10) + ")"
}

// checkEntries validates entries and end as a history's content.
func checkEntries(entries []EpochEntry, end int64) *HistoryError {
	for i, e := range entries {
		switch {
		case e.Epoch < 0 || e.StartOffset < 0:
			return &HistoryError{Reason: "entry " + strconv.Itoa(i) + " " + entryString(e) + " has a negative epoch or offset"}
		case i > 0 && (e.Epoch <= entries[i-1].Epoch || e.StartOffset <= entries[i-1].StartOffset):
			return &HistoryError{Reason: "entry " + strconv.Itoa(i) + " " + entryString(e) + " does not increase in epoch and offset"}
		}
	}
	if n := len(entries); n > 0 && end <= entries[n-1].StartOffset {
		return &HistoryError{Reason: "end " + strconv.FormatInt(end, 10) + " is not after the last entry " + entryString(entries[n-1])}
	}
	return nil
}

// empty is what a nil *EpochHistory reads as.
var emptyHistory EpochHistory

// read returns h, or an empty history when h is nil, for the methods that
// only read.
func (h *EpochHistory) read() *EpochHistory {
	if h == nil {
		return &emptyHistory
	}
	return h
}

// Size returns the most entries the history keeps.
func (h *EpochHistory) Size() int {
	h = h.read()
	if h.size <= 0 {
		return DefaultHistorySize
	}
	return h.size
}

// Len returns the number of entries.
func (h *EpochHistory) Len() int { return len(h.read().entries) }

// Entries returns a copy of the entries, oldest first.
func (h *EpochHistory) Entries() []EpochEntry { return append([]EpochEntry(nil), h.read().entries...) }

// End returns the offset after the last record the history covers (the
// consumer's position when the history was taken), NoOffset when it is
// empty.
func (h *EpochHistory) End() int64 {
	h = h.read()
	if len(h.entries) == 0 {
		return NoOffset
	}
	return h.end
}

// Dropped reports whether entries were dropped from the start of the
// history: by its size bound, or because a batch contradicted it (a lower
// epoch after a higher one, which only a rewritten log can show).
func (h *EpochHistory) Dropped() bool { return h.read().dropped }

// Clone returns an independent copy.
func (h *EpochHistory) Clone() *EpochHistory {
	if h == nil {
		return NewEpochHistory(0)
	}
	c := *h
	c.entries = append([]EpochEntry(nil), h.entries...)
	return &c
}

// TopicID returns the ID of the topic incarnation whose records the history
// describes; zero when it is not known (a history decoded from version 1,
// or kept by a consumer whose brokers do not give topic IDs).
func (h *EpochHistory) TopicID() TopicID { return h.read().topicID }

// SetTopicID names the topic incarnation whose records the history
// describes. A history that named another incarnation is emptied first:
// its records were those of a deleted topic. A zero id changes nothing,
// nor does any on a nil h (it stays empty, with no topic ID).
func (h *EpochHistory) SetTopicID(id TopicID) {
	if h == nil || id == (TopicID{}) {
		return
	}
	if h.topicID != (TopicID{}) && h.topicID != id {
		h.Reset()
	}
	h.topicID = id
}

// Reset empties the history (its size and topic ID are kept, Dropped
// becomes false). On a nil h, which is empty, it does nothing.
func (h *EpochHistory) Reset() {
	if h == nil {
		return
	}
	h.entries = h.entries[:0]
	h.end = 0
	h.dropped = false
}

// Observe records that a record batch written in epoch, holding offsets base
// through last, was delivered. A batch in the epoch of the last entry only
// extends End; one in a higher epoch appends an entry starting at base. A
// batch starting below End (read again after a seek back) first cuts the
// history at base: the batch is what the log holds from there. A batch in
// a lower epoch than the last entry left (a rewritten log) restarts the
// history at the batch, as does a batch without an epoch (epoch < 0: a
// pre-v2 message set, which the history cannot describe). A batch with
// last < base or a negative base is ignored, and so is every batch on a
// nil h (it stays empty).
//
// The caller observes batches in delivery order; offsets between two
// batches that the log does not hold (compaction) take the epoch of the
// batch before them.
func (h *EpochHistory) Observe(epoch int32, base, last int64) {
	if h == nil || base < 0 || last < base {
		return
	}
	if epoch < 0 {
		if len(h.entries) > 0 {
			h.dropped = true
		}
		h.entries = h.entries[:0]
		return
	}
	if len(h.entries) > 0 && base < h.end {
		h.Cut(base)
	}
	if n := len(h.entries); n > 0 {
		switch top := h.entries[n-1].Epoch; {
		case epoch == top:
			h.end = max(h.end, last+1)
			return
		case epoch < top:
			h.entries = h.entries[:0]
			h.dropped = true
		}
	}
	h.entries = append(h.entries, EpochEntry{Epoch: epoch, StartOffset: base})
	h.end = last + 1
	h.trim()
}

// trim drops the oldest entries beyond the size bound.
func (h *EpochHistory) trim() {
	if over := len(h.entries) - h.Size(); over > 0 {
		h.entries = append(h.entries[:0], h.entries[over:]...)
		h.dropped = true
	}
}

// Cut forgets everything at and after offset: after a truncation diverging
// at offset, or before re-reading from offset. End becomes at most offset.
// On a nil h, which is empty, it does nothing.
func (h *EpochHistory) Cut(offset int64) {
	if h == nil {
		return
	}
	n := len(h.entries)
	for n > 0 && h.entries[n-1].StartOffset >= offset {
		n--
	}
	h.entries = h.entries[:n]
	if n > 0 {
		h.end = min(h.end, offset)
	}
}

// EpochOf returns the leader epoch of the record at offset: the epoch of the
// last entry starting at or before it. ok is false when the history does not
// cover offset: it is empty, offset is below its first entry (never seen,
// or dropped), or offset is at or after End.
func (h *EpochHistory) EpochOf(offset int64) (epoch int32, ok bool) {
	h = h.read()
	if len(h.entries) == 0 || offset < h.entries[0].StartOffset || offset >= h.end {
		return NoEpoch, false
	}
	for i := len(h.entries) - 1; i >= 0; i-- {
		if h.entries[i].StartOffset <= offset {
			return h.entries[i].Epoch, true
		}
	}
	return NoEpoch, false
}

// String formats the history as [e<epoch>:<start> ...)<end>, with a leading
// "…" when entries were dropped.
func (h *EpochHistory) String() string {
	h = h.read()
	var b strings.Builder
	b.WriteByte('[')
	if h.dropped {
		b.WriteString("… ")
	}
	for i, e := range h.entries {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("e" + strconv.Itoa(int(e.Epoch)) + ":" + strconv.FormatInt(e.StartOffset, 10))
	}
	b.WriteByte(')')
	if len(h.entries) > 0 {
		b.WriteString(strconv.FormatInt(h.end, 10))
	}
	return b.String()
}

// The binary encoding, all integers big-endian:
//
//	magic   "KEH"   3 bytes
//	version 1 or 2  1 byte
//	flags           1 byte   bit 0: Dropped; other bits must be 0
//	size            uint32   the bound (1..65536)
//	count           uint32   number of entries (≤ size)
//	end             int64    End; -1 when count is 0
//	topic id        16 bytes version 2 only: TopicID, never zero
//	entries         count × (epoch int32, start offset int64)
//	crc             uint32   CRC-32C (Castagnoli) of every byte before it
//
// A history with a topic ID is written as version 2, one without as
// version 1 (as before topic IDs were kept, so earlier releases read it).
// 25 bytes (41 with the topic ID) plus 12 per entry: 793 bytes (809) for a
// full default history.
const (
	historyMagic      = "KEH"
	historyVersion    = 1
	historyVersionID  = 2
	historyHeaderSize = 3 + 1 + 1 + 4 + 4 + 8
	historyIDSize     = 16
	historyEntrySize  = 4 + 8
	historyFlagDrop   = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrNilHistory is what UnmarshalBinary returns on a nil *EpochHistory. It
// matches errors.ErrInvalidArgument (the receiver is the refused argument).
var ErrNilHistory error = &nilHistoryError{}

type nilHistoryError struct{}

func (*nilHistoryError) Error() string {
	return "seek: UnmarshalBinary into a nil *EpochHistory: " + errors.ErrInvalidArgument.Error()
}

func (*nilHistoryError) Unwrap() error { return errors.ErrInvalidArgument }

// ErrCorruptHistory is matched (errors.Is) by every error UnmarshalBinary
// and EpochHistoryOf return for input that is not a valid history.
var ErrCorruptHistory = errors.New("seek: invalid epoch history")

// HistoryError is the error UnmarshalBinary and EpochHistoryOf return: what
// is wrong with the input. It matches ErrCorruptHistory; returned by
// EpochHistoryOf, whose arguments are refused, it matches
// errors.ErrInvalidArgument too.
type HistoryError struct {
	// Version is the encoding version read, 0 when none was.
	Version int
	// Reason says what is wrong.
	Reason string

	argument bool // the input was a call's arguments (EpochHistoryOf), not an encoding
}

func (e *HistoryError) Error() string { return "seek: invalid epoch history: " + e.Reason }

// Unwrap returns ErrCorruptHistory.
func (e *HistoryError) Unwrap() error { return ErrCorruptHistory }

// Is matches errors.ErrInvalidArgument when the history was given as a
// call's arguments.
func (e *HistoryError) Is(target error) bool {
	return e.argument && target == errors.ErrInvalidArgument
}

// MarshalBinary encodes the history (encoding.BinaryMarshaler). It never
// fails.
func (h *EpochHistory) MarshalBinary() ([]byte, error) {
	h = h.read()
	return h.AppendBinary(make([]byte, 0, historyHeaderSize+historyIDSize+historyEntrySize*len(h.entries)+4))
}

// AppendBinary appends the encoded history to b (encoding.BinaryAppender).
// It never fails.
func (h *EpochHistory) AppendBinary(b []byte) ([]byte, error) {
	h = h.read()
	from := len(b)
	b = append(b, historyMagic...)
	hasID := h.topicID != (TopicID{})
	if hasID {
		b = append(b, historyVersionID)
	} else {
		b = append(b, historyVersion)
	}
	var flags byte
	if h.dropped {
		flags |= historyFlagDrop
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(h.Size()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(h.entries)))
	b = binary.BigEndian.AppendUint64(b, uint64(h.End()))
	if hasID {
		b = append(b, h.topicID[:]...)
	}
	for _, e := range h.entries {
		b = binary.BigEndian.AppendUint32(b, uint32(e.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.StartOffset))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[from:], castagnoli)), nil
}

// UnmarshalBinary replaces h with the history encoded in data
// (encoding.BinaryUnmarshaler), version 1 or 2. It returns a *HistoryError
// (matching ErrCorruptHistory) and leaves h unchanged when data is not
// exactly one valid encoding: wrong magic, unknown version or flags, a size
// or count out of bounds, a length that does not match the count, a CRC
// mismatch, a zero topic ID (version 2), or entries that are negative or not
// strictly increasing, or do not end before End. It never panics, and it allocates at most what data's length
// justifies. A nil h has nowhere to decode into: UnmarshalBinary returns
// ErrNilHistory (not ErrCorruptHistory: data was not read).
func (h *EpochHistory) UnmarshalBinary(data []byte) error {
	if h == nil {
		return ErrNilHistory
	}
	fail := func(v int, reason string) error { return &HistoryError{Version: v, Reason: reason} }
	if len(data) < historyHeaderSize+4 {
		return fail(0, "short input ("+strconv.Itoa(len(data))+" bytes)")
	}
	if string(data[:3]) != historyMagic {
		return fail(0, "bad magic")
	}
	v := int(data[3])
	head := historyHeaderSize
	switch v {
	case historyVersion:
	case historyVersionID:
		head += historyIDSize
	default:
		return fail(v, "unsupported version "+strconv.Itoa(v))
	}
	flags := data[4]
	if flags&^historyFlagDrop != 0 {
		return fail(v, "unknown flags")
	}
	size := binary.BigEndian.Uint32(data[5:])
	count := binary.BigEndian.Uint32(data[9:])
	end := int64(binary.BigEndian.Uint64(data[13:]))
	switch {
	case size == 0 || size > maxHistorySize:
		return fail(v, "size "+strconv.FormatUint(uint64(size), 10)+" out of range")
	case count > size:
		return fail(v, "count exceeds size")
	case uint64(len(data)) != uint64(head)+historyEntrySize*uint64(count)+4:
		return fail(v, "length does not match count")
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(data[len(body):]); got != want {
		return fail(v, "CRC mismatch")
	}
	if count == 0 && end != NoOffset {
		return fail(v, "empty history with an end")
	}
	var id TopicID
	copy(id[:], body[historyHeaderSize:head])
	if v == historyVersionID && id == (TopicID{}) {
		return fail(v, "zero topic ID")
	}
	entries := make([]EpochEntry, count)
	for i := range entries {
		p := body[head+historyEntrySize*i:]
		entries[i] = EpochEntry{Epoch: int32(binary.BigEndian.Uint32(p)), StartOffset: int64(binary.BigEndian.Uint64(p[4:]))}
	}
	if err := checkEntries(entries, end); err != nil {
		err.Version = v
		return err
	}
	h.entries, h.size, h.dropped, h.topicID = entries, int(size), flags&historyFlagDrop != 0, id
	h.end = 0
	if count > 0 {
		h.end = end
	}
	return nil
}
