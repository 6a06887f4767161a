package batch

import (
	"sync"
	"sync/atomic"

	"github.com/kepoch/kepoch/internal/compress"
)

// parallelMinBytes is ParallelMinBytes; tests lower it to reach the
// parallel path with small inputs.
var parallelMinBytes = ParallelMinBytes

// parallelMaxBytes bounds a window's compressed size, and so the memory
// decompressed ahead.
const parallelMaxBytes = 4 << 20

// maxWindow bounds the number of batches in a window.
const maxWindow = 16

// aheadJob is a batch of a window: its position and compressed payload.
type aheadJob struct {
	pos     int
	codec   compress.Codec
	payload []byte
}

// takeAhead returns the decompressed payload of the batch at it.pos when
// it was decompressed ahead, or, when Options.Parallel allows and the
// window ahead is worth it, decompresses that batch and the next ones
// concurrently first. ok is false when the caller must decompress the
// batch itself. Under ownPayload the output is the batch's alone (it was
// decompressed into a fresh buffer, which is not reused).
func (it *Iterator) takeAhead() (out []byte, ok bool, err error) {
	// Batches of the window that decode passed over without decompressing
	// (an aborted transaction's) are skipped.
	for it.next < len(it.ahead) && it.ahead[it.next].pos < it.pos {
		it.recycle(&it.ahead[it.next])
		it.next++
	}
	if it.next == len(it.ahead) || it.ahead[it.next].pos != it.pos {
		it.dropAhead()
		if it.o.Parallel <= 1 || it.pos < it.inlineTo || !it.decompressAhead() {
			return nil, false, nil
		}
	}
	a := &it.ahead[it.next]
	it.next++
	out, err = a.out, a.err
	// The buffer is still the yielded batch's: it goes back to the spares,
	// which are only drawn from by the next window, after the caller's
	// next Next.
	it.recycle(a)
	return out, true, err
}

// recycle keeps a's buffer for a later window (unless ownPayload gave it
// to its batch for good) and clears a.
func (it *Iterator) recycle(a *aheadBatch) {
	if !it.ownPayload() && cap(a.out) > 0 {
		it.spare = append(it.spare, a.out[:0])
	}
	*a = aheadBatch{}
}

// dropAhead forgets the batches decompressed ahead, keeping their buffers.
func (it *Iterator) dropAhead() {
	for i := it.next; i < len(it.ahead); i++ {
		it.recycle(&it.ahead[i])
	}
	it.ahead, it.next = it.ahead[:0], 0
}

// decompressAhead finds the window of compressed batches that starts at
// it.pos (up to 16 complete v2 batches, 4 MiB compressed, that need
// decompressing) and decompresses them concurrently into it.ahead. It
// reports false, with nothing done, when the window has a single batch or
// is smaller than ParallelMinBytes. Only what decompression needs is read
// here; every batch is still validated in order by decode before its
// output is used.
func (it *Iterator) decompressAhead() bool {
	win, bytes := it.jobs[:0], 0
	defer func() {
		clear(win) // the payloads alias the input, which must not be kept alive
		it.jobs = win[:0]
	}()
	// A window of many batches per goroutine amortizes their start (waking
	// an idle thread can take longer than a job) and the wait for the last.
	pos := it.pos
	for len(win) < maxWindow && bytes < parallelMaxBytes {
		rem := it.data[pos:]
		if len(rem) < HeaderSize {
			break
		}
		var h Header
		readHeader(rem, &h)
		if h.Length < minLength || int64(len(rem)) < LogOverhead+int64(h.Length) || h.Magic != Magic {
			break // decode reports it, or the iteration ends there
		}
		raw := rem[:LogOverhead+int(h.Length)]
		pos += len(raw)
		codec := h.Attributes.Codec()
		// Batches decode does not decompress: uncompressed ones, those it
		// rejects, empty ones, and data batches below the start.
		if codec == compress.None || !codec.Valid() || len(raw) == HeaderSize ||
			!h.Attributes.Control() && h.LastOffset() < it.o.StartOffset {
			if len(win) == 0 {
				return false // the batch at it.pos needs no decompression
			}
			continue
		}
		win = append(win, aheadJob{pos: pos - len(raw), codec: codec, payload: raw[HeaderSize:]})
		bytes += len(raw)
	}
	if len(win) < 2 || bytes < parallelMinBytes {
		// Not worth it: the batches scanned are decompressed in line,
		// without scanning again for each of them.
		it.inlineTo = pos
		return false
	}
	for _, j := range win {
		a := aheadBatch{pos: j.pos}
		if !it.ownPayload() && len(it.spare) > 0 {
			a.out = it.spare[len(it.spare)-1]
			it.spare = it.spare[:len(it.spare)-1]
		}
		it.ahead = append(it.ahead, a)
	}
	it.runWindow(win)
	return true
}

// runWindow decompresses the batches of win into it.ahead. Jobs are claimed
// in order by whoever is free: the caller and up to Parallel-1 goroutines,
// all done when it returns. A goroutine that starts late (waking an idle
// thread can take longer than a job) finds the jobs done and returns.
func (it *Iterator) runWindow(win []aheadJob) {
	var claimed atomic.Int32
	work := func() {
		for {
			i := int(claimed.Add(1)) - 1
			if i >= len(win) {
				return
			}
			a := &it.ahead[i]
			a.out, a.err = it.d.Decompress(a.out, win[i].payload, win[i].codec) // a.out unextended on error
		}
	}
	var wg sync.WaitGroup
	for range min(it.o.Parallel, len(win)) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}
