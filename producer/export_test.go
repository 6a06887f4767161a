package producer

// TxnWakePending reports whether p's transaction loop has a wake-up
// pending: only while a coordinator request waits to be sent.
func TxnWakePending(p *Producer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.txnWake) > 0
}
