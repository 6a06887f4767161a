package consumer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/kepoch/kepoch/errors"
)

// The classic group protocol carries two opaque byte strings the consumer
// defines itself: a member's subscription (JoinGroup protocol metadata) and
// its assignment (SyncGroup). Their layout is the Java client's
// ConsumerProtocol, so that kepoch, Java, librdkafka and franz-go consumers
// can share one group. Neither is a flexible message: no tagged fields,
// int16-length strings, int32-length bytes and arrays, big endian.
//
//	Subscription (versions 0-3):
//	  Version         int16
//	  Topics          [string]
//	  UserData        nullable bytes
//	  OwnedPartitions [Topic string, Partitions [int32]]   v1+
//	  GenerationId    int32 (-1: none)                      v2+
//	  RackId          nullable string                       v3+
//
//	Assignment (versions 0-3, all alike):
//	  Version            int16
//	  AssignedPartitions [Topic string, Partitions [int32]]
//	  UserData           nullable bytes
//
// A newer version than 3 is read as version 3 and its trailing fields are
// ignored (the rule every Java version applies: later versions only append).

// groupProtocolType is the JoinGroup protocol type of consumers.
const groupProtocolType = "consumer"

// subscriptionVersion is the subscription version kepoch writes.
const subscriptionVersion = 3

// ErrMalformedGroupData is matched by every *GroupDataError.
var ErrMalformedGroupData = errors.New("kepoch: malformed consumer group protocol data")

// GroupDataError reports consumer group protocol bytes (a member's
// subscription, an assignment, or an assignor's user data) that cannot be
// decoded. It matches ErrMalformedGroupData.
type GroupDataError struct {
	// What is "subscription", "assignment" or "cooperative-sticky user data".
	What string
	// Member is the member whose data it is, when known.
	Member string
	// Offset is the byte offset where decoding failed.
	Offset int
	// Reason says what was wrong.
	Reason string
}

func (e *GroupDataError) Error() string {
	s := "kepoch: malformed " + e.What
	if e.Member != "" {
		s += " of member " + e.Member
	}
	return fmt.Sprintf("%s at byte %d: %s", s, e.Offset, e.Reason)
}

// Is makes the error match ErrMalformedGroupData.
func (e *GroupDataError) Is(target error) bool { return target == ErrMalformedGroupData }

// topicParts is a set of partitions of one topic, as group protocol
// messages list them.
type topicParts struct {
	Topic      string
	Partitions []int32
}

// groupSubscription is a decoded (or to-be-encoded) subscription.
type groupSubscription struct {
	Version    int16
	Topics     []string
	UserData   []byte // nil: null
	Owned      []topicParts
	Generation int32   // -1: none
	Rack       *string // nil: null
}

// groupAssignment is a decoded (or to-be-encoded) assignment.
type groupAssignment struct {
	Version  int16
	Topics   []topicParts
	UserData []byte
}

// --- encoding ---

func appendInt16(b []byte, v int16) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
func appendInt32(b []byte, v int32) []byte { return binary.BigEndian.AppendUint32(b, uint32(v)) }

func appendString(b []byte, s string) []byte {
	b = appendInt16(b, int16(len(s)))
	return append(b, s...)
}

func appendNullableBytes(b, v []byte) []byte {
	if v == nil {
		return appendInt32(b, -1)
	}
	b = appendInt32(b, int32(len(v)))
	return append(b, v...)
}

func appendTopicPartitions(b []byte, tps []topicParts) []byte {
	b = appendInt32(b, int32(len(tps)))
	for _, tp := range tps {
		b = appendString(b, tp.Topic)
		b = appendInt32(b, int32(len(tp.Partitions)))
		for _, p := range tp.Partitions {
			b = appendInt32(b, p)
		}
	}
	return b
}

// encode appends the subscription at its Version (0-3).
func (s *groupSubscription) encode(b []byte) []byte {
	b = appendInt16(b, s.Version)
	b = appendInt32(b, int32(len(s.Topics)))
	for _, t := range s.Topics {
		b = appendString(b, t)
	}
	b = appendNullableBytes(b, s.UserData)
	if s.Version >= 1 {
		b = appendTopicPartitions(b, s.Owned)
	}
	if s.Version >= 2 {
		b = appendInt32(b, s.Generation)
	}
	if s.Version >= 3 {
		if s.Rack == nil {
			b = appendInt16(b, -1)
		} else {
			b = appendString(b, *s.Rack)
		}
	}
	return b
}

// encode appends the assignment at its Version.
func (a *groupAssignment) encode(b []byte) []byte {
	b = appendInt16(b, a.Version)
	b = appendTopicPartitions(b, a.Topics)
	return appendNullableBytes(b, a.UserData)
}

// validGroupString reports whether s can be written as a protocol string.
func validGroupString(s string) bool { return len(s) <= math.MaxInt16 }

// --- decoding ---

// groupReader reads the big-endian primitives of the group protocol,
// remembering the first failure.
type groupReader struct {
	b   []byte
	off int
	err string
}

func (r *groupReader) fail(reason string) {
	if r.err == "" {
		r.err = reason
	}
}

func (r *groupReader) take(n int) []byte {
	if r.err != "" {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail(fmt.Sprintf("need %d bytes, have %d", n, len(r.b)-r.off))
		return nil
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *groupReader) int16() int16 {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int16(binary.BigEndian.Uint16(v))
}

func (r *groupReader) int32() int32 {
	v := r.take(4)
	if v == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(v))
}

func (r *groupReader) string() string {
	n := r.int16()
	if n < 0 {
		r.fail(fmt.Sprintf("negative string length %d", n))
		return ""
	}
	return string(r.take(int(n)))
}

func (r *groupReader) nullableString() *string {
	n := r.int16()
	if n == -1 {
		return nil
	}
	if n < 0 {
		r.fail(fmt.Sprintf("negative string length %d", n))
		return nil
	}
	s := string(r.take(int(n)))
	return &s
}

func (r *groupReader) nullableBytes() []byte {
	n := r.int32()
	if n == -1 {
		return nil
	}
	if n < 0 {
		r.fail(fmt.Sprintf("negative bytes length %d", n))
		return nil
	}
	return slices.Clone(r.take(int(n)))
}

// arrayLen reads an array length; a null array (-1) is empty. Each element
// takes at least min bytes, which bounds the length by what is left (no
// allocation from a hostile length).
func (r *groupReader) arrayLen(min int) int {
	n := r.int32()
	if r.err != "" {
		return 0
	}
	if n == -1 {
		return 0
	}
	if n < 0 {
		r.fail(fmt.Sprintf("negative array length %d", n))
		return 0
	}
	if int64(n)*int64(min) > int64(len(r.b)-r.off) {
		r.fail(fmt.Sprintf("array of %d elements in %d bytes", n, len(r.b)-r.off))
		return 0
	}
	return int(n)
}

func (r *groupReader) topicPartitions() []topicParts {
	n := r.arrayLen(6)
	var out []topicParts
	for i := 0; i < n && r.err == ""; i++ {
		t := r.string()
		np := r.arrayLen(4)
		ps := make([]int32, 0, np)
		for j := 0; j < np && r.err == ""; j++ {
			ps = append(ps, r.int32())
		}
		out = append(out, topicParts{Topic: t, Partitions: ps})
	}
	return out
}

// decodeSubscription decodes a member's subscription; member names it in
// the error.
func decodeSubscription(b []byte, member string) (groupSubscription, error) {
	r := groupReader{b: b}
	s := groupSubscription{Generation: -1}
	s.Version = r.int16()
	if r.err == "" && s.Version < 0 {
		r.fail(fmt.Sprintf("negative version %d", s.Version))
	}
	n := r.arrayLen(2)
	for i := 0; i < n && r.err == ""; i++ {
		s.Topics = append(s.Topics, r.string())
	}
	s.UserData = r.nullableBytes()
	if s.Version >= 1 {
		s.Owned = r.topicPartitions()
	}
	if s.Version >= 2 {
		s.Generation = r.int32()
	}
	if s.Version >= 3 {
		s.Rack = r.nullableString()
	}
	if r.err != "" {
		return groupSubscription{}, &GroupDataError{What: "subscription", Member: member, Offset: r.off, Reason: r.err}
	}
	return s, nil
}

// decodeAssignment decodes an assignment. Empty bytes are an empty
// assignment (the coordinator sends them to members the leader left out).
func decodeAssignment(b []byte) (groupAssignment, error) {
	if len(b) == 0 {
		return groupAssignment{}, nil
	}
	r := groupReader{b: b}
	var a groupAssignment
	a.Version = r.int16()
	if r.err == "" && a.Version < 0 {
		r.fail(fmt.Sprintf("negative version %d", a.Version))
	}
	a.Topics = r.topicPartitions()
	a.UserData = r.nullableBytes()
	if r.err == "" {
		seen := map[TopicPartition]bool{}
		for _, t := range a.Topics {
			for _, p := range t.Partitions {
				tp := TopicPartition{t.Topic, p}
				switch {
				case t.Topic == "":
					r.fail("empty topic name")
				case p < 0:
					r.fail(fmt.Sprintf("negative partition %d of %q", p, t.Topic))
				case seen[tp]:
					r.fail(fmt.Sprintf("partition %v assigned twice", tp))
				}
				seen[tp] = true
			}
		}
	}
	if r.err != "" {
		return groupAssignment{}, &GroupDataError{What: "assignment", Offset: r.off, Reason: r.err}
	}
	return a, nil
}

// encodeStickyGeneration is the cooperative-sticky assignor's user data: the
// member's generation, one int32 (Java's CooperativeStickyAssignor).
func encodeStickyGeneration(gen int32) []byte { return appendInt32(nil, gen) }

// stickyGeneration is the generation a cooperative-sticky member's owned
// partitions belong to: the subscription's own field (v2+), else the user
// data's int32; -1 when neither says.
func stickyGeneration(s *groupSubscription) int32 {
	if s.Version >= 2 && s.Generation >= 0 {
		return s.Generation
	}
	if len(s.UserData) >= 4 {
		return int32(binary.BigEndian.Uint32(s.UserData))
	}
	return -1
}

// --- sets of partitions ---

// tpSet is a set of partitions.
type tpSet map[TopicPartition]struct{}

func (s tpSet) add(tp TopicPartition) { s[tp] = struct{}{} }

func (s tpSet) has(tp TopicPartition) bool {
	_, ok := s[tp]
	return ok
}

// sorted lists the set by topic, then partition.
func (s tpSet) sorted() []TopicPartition {
	out := make([]TopicPartition, 0, len(s))
	for tp := range s {
		out = append(out, tp)
	}
	sortTPs(out)
	return out
}

// minus returns the partitions of s not in o.
func (s tpSet) minus(o tpSet) tpSet {
	out := tpSet{}
	for tp := range s {
		if !o.has(tp) {
			out.add(tp)
		}
	}
	return out
}

func sortTPs(tps []TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// group lists the set as the protocol does: topics sorted, partitions
// sorted within each.
func (s tpSet) group() []topicParts {
	var out []topicParts
	for _, tp := range s.sorted() {
		if n := len(out); n > 0 && out[n-1].Topic == tp.Topic {
			out[n-1].Partitions = append(out[n-1].Partitions, tp.Partition)
			continue
		}
		out = append(out, topicParts{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	return out
}

func setOf(tps []topicParts) tpSet {
	s := tpSet{}
	for _, t := range tps {
		for _, p := range t.Partitions {
			s.add(TopicPartition{t.Topic, p})
		}
	}
	return s
}
