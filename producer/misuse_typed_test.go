package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/kepoch/kepoch/errors"
	"github.com/kepoch/kepoch/internal/compress"
	"github.com/kepoch/kepoch/producer"
)

// wantRefused is the internal tests' wantTyped.
var wantRefused = producer.WantTyped

// TestOptionsValidated: every option New refuses gives an error matching
// errors.ErrInvalidOption that names the option and the refused value.
func TestOptionsValidated(t *testing.T) {
	seeds := producer.SeedBrokers("127.0.0.1:1")
	for _, tc := range []struct {
		option, value string
		opts          []producer.Opt
	}{
		{"SeedBrokers", "none given", nil},
		{"RequiredAcks", "3 is not an acknowledgement level", []producer.Opt{seeds, producer.RequiredAcks(3), producer.DisableIdempotence()}},
		{"RequiredAcks", "1 is not AcksAll", []producer.Opt{seeds, producer.RequiredAcks(producer.AcksLeader)}},
		{"DisableIdempotence", `TransactionalID "tx"`, []producer.Opt{seeds, producer.TransactionalID("tx"), producer.DisableIdempotence()}},
		{"Compression", "9 ", []producer.Opt{seeds, producer.Compression(9)}},
		{"CompressionLevel", "99 ", []producer.Opt{seeds, producer.Compression(compress.Zstd), producer.CompressionLevel(99)}},
		{"BatchMaxBytes", "10 ", []producer.Opt{seeds, producer.BatchMaxBytes(10)}},
		{"BatchMaxBytes", "67108865 ", []producer.Opt{seeds, producer.BatchMaxBytes(64<<20 + 1)}},
		{"MaxRequestBytes", "2048 ", []producer.Opt{seeds, producer.BatchMaxBytes(4096), producer.MaxRequestBytes(2048)}},
		{"MaxRequestBytes", "1073741825 ", []producer.Opt{seeds, producer.MaxRequestBytes(1<<30 + 1)}},
		{"Linger", "-1ms", []producer.Opt{seeds, producer.Linger(-time.Millisecond)}},
		{"MaxBufferedBytes", "1024 is less than BatchMaxBytes 4096", []producer.Opt{seeds, producer.MaxBufferedBytes(1024), producer.BatchMaxBytes(4096)}},
		{"RequestTimeout", "50ms", []producer.Opt{seeds, producer.RequestTimeout(50 * time.Millisecond)}},
		{"DeliveryTimeout", "1s is less than RequestTimeout 2s", []producer.Opt{seeds, producer.DeliveryTimeout(time.Second), producer.RequestTimeout(2 * time.Second)}},
		{"RetryBackoff", "0s", []producer.Opt{seeds, producer.RetryBackoff(0)}},
		{"MaxInFlight", "0 ", []producer.Opt{seeds, producer.MaxInFlight(0)}},
		{"MaxInFlight", "6 ", []producer.Opt{seeds, producer.MaxInFlight(6)}},
		{"MetadataMaxAge", "10ms", []producer.Opt{seeds, producer.MetadataMaxAge(10 * time.Millisecond)}},
		{"MetadataWait", "0s", []producer.Opt{seeds, producer.MetadataWait(0)}},
		{"AckLedgerRanges", "0 is not positive", []producer.Opt{seeds, producer.AckLedgerRanges(0)}},
		{"TransactionTimeout", "500ms", []producer.Opt{seeds, producer.TransactionalID("tx"), producer.TransactionTimeout(500 * time.Millisecond)}},
	} {
		p, err := producer.New(tc.opts...)
		if p != nil {
			p.Close(t.Context())
		}
		wantRefused(t, tc.option+" "+tc.value, err, errors.ErrInvalidOption, "producer: option "+tc.option+": ", tc.value)
	}
}

// TestMisuseTypedCalls: every call argument a producer refuses gives an
// error matching errors.ErrInvalidArgument naming the argument and the
// value, at once (no wait for metadata) and without queuing anything.
func TestMisuseTypedCalls(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c, producer.TransactionalID("tx-misuse"))
	ctx := testCtx(t, 10*time.Second)
	for _, tc := range []struct {
		what  string
		r     *producer.Record
		names []string
	}{
		{"nil record", nil, []string{"Produce", "argument r: nil"}},
		{"no topic", &producer.Record{Value: []byte("v")}, []string{"Produce", "argument r.Topic", `""`}},
		{"negative partition", &producer.Record{Topic: topic, Partition: -1, ExplicitPartition: true}, []string{"Produce", "argument r.Partition", "-1"}},
		{"very negative partition", &producer.Record{Topic: "other", Partition: -7, ExplicitPartition: true}, []string{"argument r.Partition", `-7 of "other"`}},
	} {
		called := false
		err := p.Produce(ctx, tc.r, func(producer.Result) { called = true })
		wantRefused(t, "Produce "+tc.what, err, errors.ErrInvalidArgument, tc.names...)
		res, err := p.ProduceSync(ctx, tc.r)
		wantRefused(t, "ProduceSync "+tc.what, err, errors.ErrInvalidArgument, tc.names...)
		if len(res) != 1 || !errors.Is(res[0].Err, errors.ErrInvalidArgument) {
			t.Errorf("ProduceSync %s: results %+v", tc.what, res)
		}
		if called {
			t.Errorf("Produce %s: the refused record's callback ran", tc.what)
		}
	}
	g := producer.GroupMetadata{GroupID: "g", GenerationID: -1}
	for _, tc := range []struct {
		what    string
		g       producer.GroupMetadata
		offsets map[string]map[int32]producer.OffsetAndEpoch
		names   []string
	}{
		{"no group", producer.GroupMetadata{}, nil, []string{"argument g.GroupID", `""`}},
		{"empty topic", g, map[string]map[int32]producer.OffsetAndEpoch{"": {0: {Offset: 1}}}, []string{"argument offsets", `topic ""`}},
		{"negative partition", g, map[string]map[int32]producer.OffsetAndEpoch{topic: {-1: {Offset: 1}}}, []string{"argument offsets", "partition -1"}},
		{"negative offset", g, map[string]map[int32]producer.OffsetAndEpoch{topic: {0: {Offset: -2}}}, []string{"argument offsets", "t[0]: offset -2"}},
	} {
		err := p.SendOffsetsToTransaction(ctx, tc.g, tc.offsets)
		wantRefused(t, "SendOffsetsToTransaction "+tc.what, err, errors.ErrInvalidArgument, append([]string{"producer: SendOffsetsToTransaction"}, tc.names...)...)
	}
}

// TestNilContextRefused: every call that takes a context refuses a nil one
// with an error matching errors.ErrInvalidArgument that names the call and
// the argument, and does nothing: no panic (InitTransactions panicked
// halfway, leaving its operation under way for every later transaction
// call), and the producers work on.
func TestNilContextRefused(t *testing.T) {
	c := newCluster(t, 1)
	p := newProducer(t, c)
	tp := newProducer(t, c, producer.TransactionalID("tx-nil-ctx"))
	var nilCtx context.Context // what a caller passing nil passes
	for _, tc := range []struct {
		call string
		f    func() error
	}{
		{"Produce", func() error { return p.Produce(nilCtx, prec(0, "a"), nil) }},
		{"ProduceSync", func() error {
			res, err := p.ProduceSync(nilCtx, prec(0, "a"))
			if len(res) != 1 || res[0].Err != err {
				t.Errorf("ProduceSync(nil): results %+v", res)
			}
			return err
		}},
		{"Flush", func() error { return p.Flush(nilCtx) }},
		{"Close", func() error { return p.Close(nilCtx) }},
		{"InitTransactions", func() error { return tp.InitTransactions(nilCtx) }},
		{"CommitTransaction", func() error { return tp.CommitTransaction(nilCtx) }},
		{"AbortTransaction", func() error { return tp.AbortTransaction(nilCtx) }},
		{"SendOffsetsToTransaction", func() error {
			return tp.SendOffsetsToTransaction(nilCtx, producer.GroupMetadata{GroupID: "g"}, nil)
		}},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s(nil): panic %v", tc.call, r)
				}
			}()
			wantRefused(t, tc.call+"(nil)", tc.f(), errors.ErrInvalidArgument, "producer: "+tc.call, "argument ctx")
		}()
	}
	// Nothing was done: the producers work on (Close closed nothing).
	ctx := testCtx(t, 10*time.Second)
	mustOK(t, sendAll(t, ctx, p, prec(0, "plain")))
	if err := tp.InitTransactions(ctx); err != nil {
		t.Fatalf("InitTransactions: %v", err)
	}
	if err := tp.BeginTransaction(); err != nil {
		t.Fatalf("BeginTransaction: %v", err)
	}
	mustOK(t, sendAll(t, ctx, tp, prec(0, "txn")))
	if err := tp.CommitTransaction(ctx); err != nil {
		t.Fatalf("CommitTransaction: %v", err)
	}
	wantCommitted(t, c, "plain", "txn")
}
