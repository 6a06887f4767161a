package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/metadata"
)

// seenFetch is the session fields of a Fetch request a broker got.
type seenFetch struct{ id, epoch int32 }

// sessionWatchedCluster is a one-broker kfake cluster with one partition
// of topic that reports the session fields of every Fetch it gets (the
// first thousand).
func sessionWatchedCluster(t *testing.T) (*kfake.Cluster, chan seenFetch) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	reqs := make(chan seenFetch, 1000)
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		select {
		case reqs <- seenFetch{req.SessionID, req.SessionEpoch}:
		default:
		}
		return nil, nil, false
	})
	return c, reqs
}

// TestFetchSessionResetClosesTheOldOne: a fetch session the consumer starts
// over (here: a seek cancels the fetch in flight, whose fate on the broker
// is unknown) is closed by the full request that replaces it: KIP-227's
// full request naming the old session ID, with epoch 0 (Java's
// nextCloseExisting; kgo does the same). Started over with session ID 0,
// every seek with a fetch in flight left a session behind in the broker's
// session cache (max.incremental.fetch.session.cache.slots, shared by every
// client of the broker) until it aged out: a consumer that seeks often
// filled it, and the broker evicted other consumers' sessions, which then
// failed with FETCH_SESSION_ID_NOT_FOUND and fell back to full requests.
func TestFetchSessionResetClosesTheOldOne(t *testing.T) {
	c, reqs := sessionWatchedCluster(t)
	// No data: every fetch is a long poll, in flight when the seek comes.
	cons := newConsumer(t, c, consumer.FetchMaxWait(300*time.Millisecond))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	var (
		session int32 // the session the consumer's incremental requests named last
		fulls   int
		leaked  []int32
	)
	drain := func() {
		for {
			select {
			case r := <-reqs:
				switch {
				case r.epoch > 0:
					session = r.id
				case r.epoch == 0:
					fulls++
					// A full request after a session was opened
					// closes it (the same ID again if the first
					// attempt to close it failed).
					if session != 0 && r.id != session {
						leaked = append(leaked, session)
					}
				}
			default:
				return
			}
		}
	}
	for range 10 {
		before := session
		waitFor(t, 5*time.Second, "an incremental fetch in a new session", func() bool { drain(); return session != before })
		time.Sleep(50 * time.Millisecond)
		full := fulls
		if err := cons.Seek(topic, 0, 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the full request after the seek", func() bool { drain(); return fulls > full })
	}
	if len(leaked) > 0 {
		t.Fatalf("%d of %d seeks opened a new fetch session without closing the old one (sessions %v left on the broker)", len(leaked), 10, leaked)
	}
}

// TestCloseClosesFetchSession: Close asks the broker to drop the consumer's
// fetch session (its ID with the final epoch, as Java's and kgo's consumers
// do), instead of leaving it in the broker's session cache, which all its
// clients share, until it ages out.
func TestCloseClosesFetchSession(t *testing.T) {
	c, reqs := sessionWatchedCluster(t)
	cons, err := consumer.New(consumer.SeedBrokers(c.ListenAddrs()...), consumer.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	var session int32
	waitFor(t, 5*time.Second, "an incremental fetch in a session", func() bool {
		for {
			select {
			case r := <-reqs:
				if r.epoch > 0 {
					session = r.id
				}
			default:
				return session != 0
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case r := <-reqs:
			if r.epoch == -1 {
				if r.id != session {
					t.Fatalf("Close sent the final epoch for session %d, the consumer's was %d", r.id, session)
				}
				return
			}
		default:
			t.Fatalf("Close left fetch session %d on the broker (no request with the final epoch)", session)
		}
	}
}

// A refresher shared with WithMetadata and closed while the consumer runs
// makes Poll say so (an error matching errors.ErrClosed), instead of the
// consumer going on without metadata, where a partition whose leader moves
// waits for ever with nothing reported.
func TestSharedRefresherClosedFirst(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := metadata.NewRefresher(cl)
	cons, err := consumer.New(consumer.WithClient(cl), consumer.WithMetadata(r))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close(context.Background()) })
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, err := cons.Poll(ctx)
		if err == nil {
			continue
		}
		if !errors.Is(err, errors.ErrClosed) || ctx.Err() != nil {
			t.Fatalf("Poll after the shared refresher closed: %v, want an error matching ErrClosed", err)
		}
		return
	}
}
