package kepochtest

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/internal/batch"
)

// FuzzParseSegment: parseSegment reads batch headers from kfake's segment
// files, which a cut (or a crash while kfake wrote them) can leave partial.
// Whatever the bytes, it neither panics nor reports a batch outside them:
// the batches it returns are whole, in order and back to back from the
// start; on well-formed batches it returns each one's offsets.
func FuzzParseSegment(f *testing.F) {
	var whole []byte
	bld := batch.NewBuilder(nil)
	for i, n := range []int{1, 4} {
		bld.Reset(batch.DefaultSpec())
		for j := range n {
			if err := bld.Append(time.Now().UnixMilli(), nil, []byte{byte(i), byte(j)}, nil); err != nil {
				f.Fatal(err)
			}
		}
		enc, err := bld.Finish()
		if err != nil {
			f.Fatal(err)
		}
		// Finish's bytes are the builder's: copy them out.
		whole = append(whole, enc...)
	}
	bs := parseSegment(7, whole)
	if len(bs) != 2 || bs[0].Records != 1 || bs[1].Records != 4 || bs[1].Last-bs[1].Base != 3 || bs[0].seg != 7 {
		f.Fatalf("parseSegment of batches of 1 and 4 records: %+v", bs)
	}
	f.Add(whole)
	f.Add(whole[:len(whole)-1])
	f.Add(make([]byte, 61))
	f.Fuzz(func(t *testing.T, raw []byte) {
		pos := int64(0)
		for i, b := range parseSegment(0, raw) {
			if b.idx != i || b.pos != pos || b.size < 61 || b.pos+b.size > int64(len(raw)) {
				t.Fatalf("batch %d of %d bytes: %+v (expected at %d)", i, len(raw), b, pos)
			}
			pos += b.size
		}
	})
}
