package producer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/producer"
)

// An acked-write check the new leader never answers is not dropped in
// silence: once it fails for good (a Kafka error that is not retriable,
// TOPIC_AUTHORIZATION_FAILED for a producer allowed to write but not to
// describe) or keeps failing past its retries (a retriable error forever),
// the acknowledged ranges it was to verify are reported to
// OnAckedWritesLost, Unconfirmed, with an Err matching ErrAckCheckFailed
// and the broker's error.
func TestFailedLedgerCheckReportsUnverified(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    *kerr.Error
		minAsks int32
	}{
		{"retriable", kerr.KafkaStorageError, 21},
		{"final", kerr.TopicAuthorizationFailed, 1},
		// A code this client does not know: final, and reported with
		// its code (it was reported as UNKNOWN_SERVER_ERROR).
		{"unknown code", &kerr.Error{Message: "UNKNOWN_CODE_9999", Code: 9999}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1)
			p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond), producer.RetryBackoff(time.Millisecond))
			ctx := testCtx(t, 20*time.Second)
			mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(0, "b")))

			var asks atomic.Int32
			c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				asks.Add(1)
				req := kr.(*kmsg.OffsetForLeaderEpochRequest)
				resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
				for _, rt := range req.Topics {
					st := kmsg.NewOffsetForLeaderEpochResponseTopic()
					st.Topic = rt.Topic
					for _, rp := range rt.Partitions {
						sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, tc.code.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "no report of the unverified writes", func() bool { return len(rec.Lost()) > 0 })
			l := rec.Lost()
			if len(l) != 1 || l[0].From != 0 || l[0].To != 2 || !l[0].Unconfirmed || l[0].Untracked ||
				!errors.Is(l[0].Err, producer.ErrAckCheckFailed) || l[0].CurrentLeaderEpoch != 1 {
				t.Fatalf("reports %+v; want [0, 2) unverified after %v", l, tc.code)
			}
			if code, ok := errors.CodeOf(l[0].Err); !ok || code != tc.code.Code {
				t.Fatalf("reports %+v; want [0, 2) unverified after %v", l, tc.code)
			}
			if n := asks.Load(); n < tc.minAsks {
				t.Fatalf("reported after %d requests; want %d at least", n, tc.minAsks)
			}
		})
	}
}

// A check kgo refuses before sending it (the new leader's ApiVersions does
// not list OffsetForLeaderEpoch: kgo fails the request with an error of its
// own, not a Kafka one) can never succeed: it is abandoned at its first
// attempt, its ranges reported Unconfirmed with an Err matching
// ErrAckCheckFailed, not retried twenty times first. The retry backoff is
// an hour, so a report at all comes from the first attempt; the producer's
// own ApiVersions question (which found the key missing) is asked once.
func TestUnsupportedLedgerCheckAbandonedAtOnce(t *testing.T) {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.OffsetForLeaderEpoch), -1) // removes the key
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, topic), kfake.MaxVersions(vs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.ApiVersions), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kr.(*kmsg.ApiVersionsRequest).ClientSoftwareName == "kepoch" {
			asked.Add(1)
		}
		return nil, nil, false
	})
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond), producer.RetryBackoff(time.Hour))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(0, "b")))
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "no report of the unverified writes", func() bool { return len(rec.Lost()) > 0 })
	l := rec.Lost()
	if len(l) != 1 || l[0].From != 0 || l[0].To != 2 || !l[0].Unconfirmed || l[0].Untracked ||
		!errors.Is(l[0].Err, producer.ErrAckCheckFailed) || l[0].CurrentLeaderEpoch != 1 {
		t.Fatalf("reports %+v; want [0, 2) unverified", l)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d ApiVersions questions from the check; want 1 (one attempt)", n)
	}
}

// An acked-write check that keeps failing with an error that is not
// Kafka's (the connection closed under its request) has the leader's
// ApiVersions asked after its first failure only: what a broker lists does
// not change from one failure to the next (it asked after every one, 21
// questions for one check). The check is retried and then abandoned as
// before.
func TestLedgerCheckAsksApiVersionsOnce(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var asked, checks atomic.Int32
	c.ControlKey(int16(kmsg.ApiVersions), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kr.(*kmsg.ApiVersionsRequest).ClientSoftwareName == "kepoch" {
			asked.Add(1)
		}
		return nil, nil, false
	})
	p, rec := newRecorded(t, c, producer.MetadataMaxAge(100*time.Millisecond), producer.RetryBackoff(time.Millisecond))
	ctx := testCtx(t, 20*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "a"), prec(0, "b")))
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		checks.Add(1)
		return nil, errors.New("connection closed by the test"), true
	})
	if err := c.MoveTopicPartition(topic, 0, (c.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "no report of the unverified writes", func() bool { return len(rec.Lost()) > 0 })
	l := rec.Lost()
	if len(l) != 1 || l[0].From != 0 || l[0].To != 2 || !l[0].Unconfirmed || !errors.Is(l[0].Err, producer.ErrAckCheckFailed) {
		t.Fatalf("reports %+v; want [0, 2) unverified", l)
	}
	if n := checks.Load(); n < 21 {
		t.Fatalf("reported after %d attempts; want 21 (retried)", n)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d ApiVersions questions for %d failed attempts; want 1", asked.Load(), checks.Load())
	}
}
