package consumer

import (
	"testing"
	"time"

	"github.com/kepoch/kepoch/internal/batch"
)

// FuzzCountRecords: countRecords reads the record counts of a Fetch
// answer's batch headers, which come from the network. Whatever the bytes,
// it neither panics nor returns a count below 0 or above len(b) (Poll
// sizes a slice by it), and on well-formed batches it returns their record
// count.
func FuzzCountRecords(f *testing.F) {
	var whole []byte
	for i, n := range []int{1, 3, 7} {
		bld := batch.NewBuilder(nil)
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
		whole = append(whole, enc...)
	}
	if got := countRecords(whole); got != 11 {
		f.Fatalf("countRecords of batches of 1, 3 and 7 records: %d", got)
	}
	f.Add(whole)
	f.Add(whole[:len(whole)-1])
	f.Add(make([]byte, batch.HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n := countRecords(b); n < 0 || n > len(b) {
			t.Fatalf("countRecords of %d bytes: %d", len(b), n)
		}
	})
}
