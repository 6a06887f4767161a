package producer

import (
	"math/rand/v2"
	"sync"
)

// Partitioner chooses a record's partition among n. It is called with the
// producer's lock held, once per record without an explicit partition, and
// must be fast and must not call back into the Producer.
type Partitioner interface {
	// Partition returns a partition in [0, n). Produce refuses a record
	// it returns another partition for (ErrPartitionerOutOfRange).
	Partition(r *Record, n int32) int32
	// BatchClosed tells the partitioner that topic's batch for partition
	// was closed (full or sent), so a sticky partitioner may move on.
	BatchClosed(topic string, partition int32)
}

// DefaultPartitioner is compatible with the Java client: a keyed record goes
// to murmur2(key) mod n, so the same key lands on the same partition whichever
// client wrote it; unkeyed records stick to one partition until its batch
// closes, then move to another at random (KIP-480), among the partitions
// that have a leader when any has (as Java's since KIP-794): unkeyed records
// do not wait in a partition that cannot take them (the producer closes
// the open batch of a partition that loses its leader, and a batch that
// expires unsent ends like a closed one, so the sticky choice moves on).
func DefaultPartitioner() Partitioner { return &stickyKeyPartitioner{sticky: map[string]int32{}} }

// availabilityPartitioner is a Partitioner that can leave out, for records
// without a key, the partitions that have no leader (available says which
// have one).
type availabilityPartitioner interface {
	partitionAvailable(r *Record, n int32, available func(topic string, partition int32) bool) int32
}

type stickyKeyPartitioner struct {
	mu     sync.Mutex
	sticky map[string]int32
}

func (p *stickyKeyPartitioner) Partition(r *Record, n int32) int32 {
	return p.partitionAvailable(r, n, nil)
}

func (p *stickyKeyPartitioner) partitionAvailable(r *Record, n int32, available func(string, int32) bool) int32 {
	if n <= 0 {
		return -1 // no partition to choose (called directly: the producer never asks)
	}
	if r.Key != nil {
		return KeyPartition(r.Key, n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sticky[r.Topic]
	if !ok || s >= n {
		s = pick(r.Topic, n, available)
		p.sticky[r.Topic] = s
	}
	return s
}

// pick returns a partition of topic in [0, n) at random, one that is
// available if any is.
func pick(topic string, n int32, available func(string, int32) bool) int32 {
	start := rand.Int32N(n)
	if available == nil {
		return start
	}
	for i := range n {
		if s := (start + i) % n; available(topic, s) {
			return s
		}
	}
	return start
}

// topicForgetter is a Partitioner that keeps state per topic and can drop
// a topic's (the producer calls it when it drops a deleted topic's state).
type topicForgetter interface {
	forgetTopic(topic string)
}

func (p *stickyKeyPartitioner) forgetTopic(topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sticky, topic)
}

func (p *stickyKeyPartitioner) BatchClosed(topic string, partition int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sticky[topic]; ok && s == partition {
		delete(p.sticky, topic) // the next unkeyed record picks anew
	}
}

// KeyPartition is the Java client's partition for a key: the murmur2 hash
// of the key, made positive, modulo n; -1 (no partition) when n ≤ 0.
func KeyPartition(key []byte, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(n))
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, over the key's bytes.
func murmur2(b []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
	)
	h := uint32(seed) ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h = h*m ^ k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
