package producer

import (
	"testing"
	"time"
)

// TestBrokerAPIsCache: a broker's ApiVersions answer is reused for the same
// node at the same address for less than ledgerAPIsTTL; a node metadata now
// places at another address (another broker process), or an answer that
// old, is asked again.
func TestBrokerAPIsCache(t *testing.T) {
	var c brokerAPIs
	t0 := time.Unix(1000, 0)
	if _, ok := c.lookup(1, "a:9092", t0); ok {
		t.Fatal("hit in an empty cache")
	}
	c.store(1, "a:9092", t0, map[int16]bool{23: true})
	if got, ok := c.lookup(1, "a:9092", t0.Add(ledgerAPIsTTL-time.Millisecond)); !ok || !got[23] || got[1] {
		t.Fatalf("lookup %v %v; want the stored keys", got, ok)
	}
	if _, ok := c.lookup(2, "a:9092", t0); ok {
		t.Fatal("hit for another node")
	}
	if _, ok := c.lookup(1, "b:9092", t0); ok {
		t.Fatal("hit for the node at another address")
	}
	if _, ok := c.lookup(1, "a:9092", t0.Add(ledgerAPIsTTL)); ok {
		t.Fatal("hit after the TTL")
	}
	c.store(1, "b:9092", t0, map[int16]bool{})
	if got, ok := c.lookup(1, "b:9092", t0); !ok || got[23] {
		t.Fatalf("lookup %v %v; want the new address's answer", got, ok)
	}
}
