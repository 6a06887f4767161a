package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/consumer"
)

// demo shows kepoch's consumer catching a log truncation on an embedded
// Kafka (franz-go's in-process kfake, three brokers, no set-up):
//
//  1. 30 payments are written and consumed (offsets 0..29, leader epoch 0);
//  2. the cluster restarts having lost the last 10 acknowledged records —
//     what an unclean leader election does — and a new leader (epoch 1)
//     writes 5 refunds at offsets 20..24, where payments 20..29 were;
//  3. the consumer reports the truncation with the exact divergence point
//     and the delivered offsets that were replaced, then reads the new
//     lineage from there, each record once.
//
// The loss is real: the restarted broker's log no longer holds the records
// (kfake's persisted segment is cut before the last batch), so every answer
// the consumer gets is the broker's own.
func demo(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print every record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	const topic = "payments"

	dir, err := os.MkdirTemp("", "kepoch-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ports, held, err := freePorts(3)
	if err != nil {
		return err
	}
	// The first start takes over the listeners freePorts holds, so no other
	// process can take the ports in between; the restart listens on the
	// same ports again.
	listen := func(network, address string) (net.Listener, error) {
		if l, ok := held[address]; ok {
			delete(held, address)
			return l, nil
		}
		return net.Listen(network, address)
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	start := func() (*kfake.Cluster, error) {
		return kfake.NewCluster(kfake.NumBrokers(3), kfake.Ports(ports...), kfake.ListenFn(listen), kfake.DataDir(dir), kfake.SeedTopics(1, topic))
	}
	cluster, err := start()
	if err != nil {
		return fmt.Errorf("starting the embedded cluster: %w", err)
	}
	defer func() { cluster.Close() }()
	seeds := cluster.ListenAddrs()
	fmt.Fprintf(w, "embedded Kafka (kfake), 3 brokers at %v, topic %q\n", seeds, topic)

	// 20 payments one by one, then 10 in one batch: the batch the
	// "unclean election" will lose.
	if _, err := produce(ctx, seeds, topic, "payment", 0, 20, false); err != nil {
		return err
	}
	if _, err := produce(ctx, seeds, topic, "payment", 20, 10, true); err != nil {
		return err
	}

	var reported []consumer.TruncationEvent
	cons, err := consumer.New(
		consumer.SeedBrokers(seeds...),
		consumer.TruncationPolicy(consumer.PolicyEarliest),
		consumer.FetchMaxWait(50*time.Millisecond),
		consumer.RetryBackoff(50*time.Millisecond),
		consumer.MetadataMaxAge(250*time.Millisecond),
		consumer.OnTruncation(func(e consumer.TruncationEvent) { reported = append(reported, e) }),
	)
	if err != nil {
		return err
	}
	defer cons.Close(context.Background())
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.Earliest()}); err != nil {
		return err
	}
	recs, err := pollN(ctx, cons, 30)
	if err != nil {
		return err
	}
	show(w, *verbose, recs)
	lastPayment := recs[len(recs)-1].Offset
	pos, _ := cons.Position(topic, 0)
	fmt.Fprintf(w, "consumed offsets %d..%d; position %v (offset@leader epoch)\n", recs[0].Offset, lastPayment, pos)

	// The "unclean election": the log loses its last batch, a new leader
	// epoch begins, and new records take the lost offsets.
	cluster.Close()
	if err := cutLastBatch(dir, topic); err != nil {
		return err
	}
	if cluster, err = start(); err != nil {
		return fmt.Errorf("restarting the embedded cluster: %w", err)
	}
	// kfake, unlike Kafka, cannot locate an old epoch while the new one
	// holds no records yet, so the consumer's OffsetForLeaderEpoch waits
	// until the new leader has written (a real broker answers at once).
	written := make(chan struct{})
	cluster.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		cluster.SleepControl(func() { <-written })
		return nil, nil, false
	})
	if err := cluster.MoveTopicPartition(topic, 0, (cluster.LeaderFor(topic, 0)+1)%3); err != nil {
		return err
	}
	fmt.Fprintf(w, "broker restarted having lost its last batch of acknowledged payments; leadership moved to broker %d\n", cluster.LeaderFor(topic, 0))
	offs, err := produce(ctx, seeds, topic, "refund", 0, 5, false)
	close(written)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "new leader wrote refund-0..refund-4 at offsets %d..%d, where payments %d..%d were\n", offs[0], offs[len(offs)-1], offs[0], lastPayment)

	recs, err = pollN(ctx, cons, 5)
	if err != nil {
		return err
	}
	if len(reported) != 1 {
		return fmt.Errorf("expected one truncation report, got %v", reported)
	}
	e := reported[0]
	fmt.Fprintf(w, "kepoch reported: %v\n", e)
	fmt.Fprintf(w, "  consumed to %v; the leader says epoch %d ends at offset %d\n", e.Consumed, e.Divergent.Epoch, e.Divergent.Offset)
	fmt.Fprintf(w, "  delivered offsets %d..%d no longer exist as consumed: compensate for them\n", e.Replaced.From, e.Replaced.To-1)
	for _, b := range e.ReplacedBatches {
		fmt.Fprintf(w, "  replaced batch %d..%d: producer %d epoch %d sequence %d, %d records, crc %08x\n",
			b.Base, b.Last, b.ProducerID, b.ProducerEpoch, b.BaseSequence, b.Records, b.CRC)
	}
	show(w, *verbose, recs)
	// What is claimed below is checked first: the records after the report
	// are exactly the refunds, each once, from the divergence point on.
	if len(recs) != len(offs) {
		return fmt.Errorf("after the report: %d records, want the %d refunds", len(recs), len(offs))
	}
	for i, r := range recs {
		if want := fmt.Sprintf("refund-%d", i); r.Offset != offs[i] || string(r.Value) != want || r.LeaderEpoch <= e.Consumed.Epoch {
			return fmt.Errorf("after the report: record %d is %s at %d@%d, want %s at %d in a newer epoch than %d",
				i, r.Value, r.Offset, r.LeaderEpoch, want, offs[i], e.Consumed.Epoch)
		}
	}
	if recs[0].Offset != e.Divergent.Offset {
		return fmt.Errorf("the new lineage was read from %d, not from the divergence point %d", recs[0].Offset, e.Divergent.Offset)
	}
	fmt.Fprintf(w, "then read the new lineage from the divergence point: %s..%s at offsets %d..%d, leader epoch %d\n",
		recs[0].Value, recs[len(recs)-1].Value, recs[0].Offset, recs[len(recs)-1].Offset, recs[0].LeaderEpoch)
	pos, _ = cons.Position(topic, 0)
	if pos.Offset != recs[len(recs)-1].Offset+1 {
		return fmt.Errorf("position %v after the last refund at %d", pos, recs[len(recs)-1].Offset)
	}
	fmt.Fprintf(w, "position %v; nothing skipped, nothing delivered twice from one lineage\n", pos)

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	l, err := readLineage(ctx, cl, topic, 0, 5)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "the leader's own record of its epochs (kepoch epochs):")
	l.print(w)
	return nil
}

// produce writes n records and returns their offsets: one record at a
// time, or all in one batch (a linger long enough to gather them).
func produce(ctx context.Context, seeds []string, topic, prefix string, from, n int, oneBatch bool) ([]int64, error) {
	linger := time.Duration(0)
	if oneBatch {
		linger = 200 * time.Millisecond
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(linger))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		rs = append(rs, kgo.StringRecord(fmt.Sprintf("%s-%d", prefix, i)))
	}
	var offs []int64
	if oneBatch {
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return nil, err
		}
	} else {
		for _, r := range rs {
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range rs {
		offs = append(offs, r.Offset)
	}
	return offs, nil
}

func pollN(ctx context.Context, cons *consumer.Consumer, n int) ([]consumer.Record, error) {
	var out []consumer.Record
	for len(out) < n {
		f, err := cons.Poll(ctx)
		if err != nil {
			return out, fmt.Errorf("poll: %w (have %d of %d records)", err, len(out), n)
		}
		if err := f.Err(); err != nil {
			return out, err
		}
		out = append(out, f.Records...)
	}
	return out, nil
}

func show(w io.Writer, verbose bool, recs []consumer.Record) {
	if !verbose {
		return
	}
	for _, r := range recs {
		fmt.Fprintf(w, "  %d@%d %s\n", r.Offset, r.LeaderEpoch, r.Value)
	}
}

// cutLastBatch removes the last record batch of the topic's partition 0
// from kfake's persisted segment: one byte short, the batch is dropped when
// the broker loads its log. The snapshot is removed so the log is rebuilt
// from the segment.
func cutLastBatch(dir, topic string) error {
	pdir := filepath.Join(dir, "partitions", topic+"-0")
	seg := filepath.Join(pdir, "0.dat")
	st, err := os.Stat(seg)
	if err != nil {
		return fmt.Errorf("the embedded broker's log segment: %w", err)
	}
	if err := os.Truncate(seg, st.Size()-1); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(pdir, "snapshot.json")); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// freePorts listens on n free TCP ports of 127.0.0.1 and returns the ports
// and the open listeners by address (the demo restarts its cluster on the
// same ports, so the consumer reconnects as it would to a restarted
// broker).
func freePorts(n int) ([]int, map[string]net.Listener, error) {
	var ports []int
	held := map[string]net.Listener{}
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range held {
				l.Close()
			}
			return nil, nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		ports = append(ports, port)
		held[fmt.Sprintf("127.0.0.1:%d", port)] = l
	}
	return ports, held, nil
}
