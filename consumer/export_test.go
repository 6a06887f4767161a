package consumer

import "fmt"

// DebugPartition describes a partition's machine and fetch state (tests).
func DebugPartition(c *Consumer, topic string, partition int32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[TopicPartition{topic, partition}]
	if p == nil {
		return "unassigned"
	}
	return fmt.Sprintf("%s fetch=%+v sent=%v buffered=%v", p.m.String(), p.fetch, p.sent, p.buf != nil)
}
