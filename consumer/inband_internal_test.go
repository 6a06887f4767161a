package consumer

import (
	"testing"

	"github.com/kepoch/kepoch/seek"
)

// TestFetchAnswerChecked: an answer proves a fetch's LastFetchedEpoch was
// checked (seek.BatchFetched.Checked) only when one was sent, at Fetch v12
// or above, and the leader the fetch named answered itself and read the
// partition.
func TestFetchAnswerChecked(t *testing.T) {
	in := inflight{leader: 1, epoch: 5, lastFetchedEpoch: 3}
	noLast := in
	noLast.lastFetchedEpoch = seek.NoEpoch
	for _, tc := range []struct {
		name    string
		in      inflight
		from    int32
		version int16
		named   int32
		want    bool
	}{
		{"the leader, v12", in, 1, 12, seek.NoBroker, true},
		{"the leader, v17", in, 1, 17, seek.NoBroker, true},
		{"below v12: LastFetchedEpoch not sent", in, 1, 11, seek.NoBroker, false},
		{"no LastFetchedEpoch", noLast, 1, 17, seek.NoBroker, false},
		{"a replica's answer", in, 2, 17, seek.NoBroker, false},
		{"the leader names a read replica: it read nothing", in, 1, 17, 2, false},
		{"the leader names itself", in, 1, 17, 1, false},
	} {
		if got := tc.in.checked(tc.from, tc.version, tc.named); got != tc.want {
			t.Errorf("%s: checked = %v, want %v", tc.name, got, tc.want)
		}
	}
}
