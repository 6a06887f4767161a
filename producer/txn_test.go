package producer

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAddPartitionsResults: an AddPartitionsToTxn answer's codes are read
// from the field its version carries them in, each partition once. kgo
// hands back a v3 answer with Transactions filled from Topics as well
// (and a v4 one with Topics filled from its first transaction); reading
// both counted every partition twice.
func TestAddPartitionsResults(t *testing.T) {
	req := &AddPartitionsRequest{TransactionalID: txnID, Producer: pid, Partitions: []TopicPartition{tp0, tp1}}
	topics := func(codes ...int16) []kmsg.AddPartitionsToTxnResponseTopic {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = "t"
		for i, c := range codes {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = int32(i), c
			rt.Partitions = append(rt.Partitions, rp)
		}
		return []kmsg.AddPartitionsToTxnResponseTopic{rt}
	}
	txn := func(id string, codes ...int16) kmsg.AddPartitionsToTxnResponseTransaction {
		tr := kmsg.NewAddPartitionsToTxnResponseTransaction()
		tr.TransactionalID = id
		tt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		tt.Topic = "t"
		for i, c := range codes {
			tp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			tp.Partition, tp.ErrorCode = int32(i), c
			tt.Partitions = append(tt.Partitions, tp)
		}
		tr.Topics = append(tr.Topics, tt)
		return tr
	}
	abortable := kerr.TransactionAbortable.Code
	both := []AddPartitionResult{{TP: tp0}, {TP: tp1, Code: abortable}}
	cases := []struct {
		name string
		resp func(*kmsg.AddPartitionsToTxnResponse)
		want []AddPartitionResult
	}{
		{"v3, Topics only", func(r *kmsg.AddPartitionsToTxnResponse) {
			r.Version, r.Topics = 3, topics(0, abortable)
		}, both},
		{"v3 as kgo returns it (Transactions filled too)", func(r *kmsg.AddPartitionsToTxnResponse) {
			r.Version, r.Topics = 3, topics(0, abortable)
			r.Transactions = []kmsg.AddPartitionsToTxnResponseTransaction{txn(txnID, 0, abortable)}
		}, both},
		{"v4, Topics filled from the first transaction", func(r *kmsg.AddPartitionsToTxnResponse) {
			r.Version, r.Topics = 4, topics(abortable, abortable)
			r.Transactions = []kmsg.AddPartitionsToTxnResponseTransaction{txn("other", abortable, abortable), txn(txnID, 0, abortable)}
		}, both},
		{"v4, top-level code", func(r *kmsg.AddPartitionsToTxnResponse) {
			r.Version, r.ErrorCode = 4, kerr.ClusterAuthorizationFailed.Code
		}, []AddPartitionResult{{TP: tp0, Code: kerr.ClusterAuthorizationFailed.Code}, {TP: tp1, Code: kerr.ClusterAuthorizationFailed.Code}}},
		{"v4, not our transaction", func(r *kmsg.AddPartitionsToTxnResponse) {
			r.Version = 4
			r.Transactions = []kmsg.AddPartitionsToTxnResponseTransaction{txn("other", 0, 0)}
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := kmsg.NewPtrAddPartitionsToTxnResponse()
			c.resp(resp)
			if got := addPartitionsResults(resp, req); !slices.Equal(got, c.want) {
				t.Fatalf("results %v; want %v", got, c.want)
			}
		})
	}
}

// TestRetriedAnswered: the attempts of a coordinator request answered
// while the transport ran it, beyond the one whose answer it returned, were
// answered with a code it retries (each may come after the attempt was
// applied); a request that ended in an error returned no answer.
func TestRetriedAnswered(t *testing.T) {
	lookup := kerr.NotCoordinator // a refused lookup
	for _, c := range []struct {
		answers uint64
		err     error
		want    bool
	}{
		{1, nil, false},
		{2, nil, true},
		{0, lookup, false},
		{1, lookup, true},
		{0, context.DeadlineExceeded, false},
		{1, context.DeadlineExceeded, true},
	} {
		if got := retriedAnswered(c.answers, c.err); got != c.want {
			t.Errorf("retriedAnswered(%d, %v) = %v; want %v", c.answers, c.err, got, c.want)
		}
	}
}

// An InitProducerId answered without error but without an identity (ID or
// epoch negative) is the coordinator's fault: the same request is sent
// again and the TxnState stays Initializing, not fatal with an error
// matching ErrInvalidArgument (SetProducer's refusal of a misuse).
func TestTxnInitProducerIDWithoutIdentityAskedAgain(t *testing.T) {
	for _, id := range []ProducerID{{ID: -1, Epoch: -1}, {ID: 7, Epoch: -1}, {ID: -1, Epoch: 0}} {
		seq, _ := NewSequencer(Config{Transactional: true})
		tx, _ := NewTxnState(TxnConfig{TransactionalID: txnID}, seq)
		if _, err := tx.InitTransactions(); err != nil {
			t.Fatal(err)
		}
		step, err := tx.HandleInitProducerID(InitProducerIDResult{Producer: id})
		if err != nil || step.Done || tx.State() != TxnInitializing {
			t.Fatalf("%v: %+v %v, state %v; want InitProducerId asked again", id, step, err, tx.State())
		}
		if g, ok := step.Send.(*InitProducerIDRequest); !ok || *g != (InitProducerIDRequest{TransactionalID: txnID, Producer: NoProducerID}) {
			t.Fatalf("%v: send %#v; want the same InitProducerId", id, step.Send)
		}
		step, err = tx.HandleInitProducerID(InitProducerIDResult{Producer: ProducerID{ID: 3, Epoch: 0}})
		if err != nil || !step.Done || step.Err != nil || tx.State() != TxnReady {
			t.Fatalf("%v, then an identity: %+v %v, state %v", id, step, err, tx.State())
		}
	}
}
