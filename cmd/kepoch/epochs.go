package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/internal/wire"
)

func epochs(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("epochs", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093", "seed brokers, comma separated")
	topic := fs.String("topic", "", "topic (required)")
	partition := fs.Int("partition", 0, "partition")
	depth := fs.Int("depth", 10, "how many leader epochs back to look")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("-topic is required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags go before them: -topic T -partition P)", fs.Args())
	}
	if *partition < 0 || *partition > math.MaxInt32 {
		return fmt.Errorf("-partition %d: out of range [0, %d]", *partition, math.MaxInt32)
	}
	if *depth < 1 || *depth > math.MaxInt32 {
		return fmt.Errorf("-depth %d: must be at least 1", *depth)
	}
	var seeds []string
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		return fmt.Errorf("-brokers: no broker given")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lineage, err := readLineage(ctx, cl, *topic, int32(*partition), int32(*depth))
	if err != nil {
		return err
	}
	lineage.print(w)
	return nil
}

// lineage is a partition's leader and the end offset of each of its recent
// leader epochs, as the leader answers OffsetForLeaderEpoch.
type lineage struct {
	topic     string
	partition int32
	leader    int32
	epoch     int32
	ends      []epochEnd // newest first
}

type epochEnd struct {
	asked, epoch int32
	end          int64
}

func (l lineage) print(w io.Writer) {
	fmt.Fprintf(w, "%s/%d: leader %d, leader epoch %d\n", l.topic, l.partition, l.leader, l.epoch)
	for _, e := range l.ends {
		switch {
		case e.epoch < 0:
			fmt.Fprintf(w, "  epoch %3d: unknown to the leader (no such epoch in its log)\n", e.asked)
		case e.epoch != e.asked:
			fmt.Fprintf(w, "  epoch %3d: no records; the log answers with epoch %d ending at %d\n", e.asked, e.epoch, e.end)
		default:
			fmt.Fprintf(w, "  epoch %3d: ends at offset %d\n", e.asked, e.end)
		}
	}
}

func readLineage(ctx context.Context, cl *kgo.Client, topic string, partition, depth int32) (lineage, error) {
	l := lineage{topic: topic, partition: partition}
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return l, err
	}
	found := false
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return l, fmt.Errorf("metadata for %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				l.leader, l.epoch, found = p.Leader, p.LeaderEpoch, true
			}
		}
	}
	if !found {
		return l, fmt.Errorf("%s/%d: %w", topic, partition, kerr.UnknownTopicOrPartition)
	}
	if l.leader < 0 {
		return l, fmt.Errorf("%s/%d has no leader", topic, partition)
	}
	for e := l.epoch; e >= 0 && e > l.epoch-depth; e-- {
		p, err := wire.OffsetForLeaderEpoch(ctx, cl.Broker(int(l.leader)), topic, partition, l.epoch, e)
		if err != nil {
			return l, err
		}
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return l, fmt.Errorf("OffsetForLeaderEpoch(%d) on broker %d: %w", e, l.leader, err)
		}
		l.ends = append(l.ends, epochEnd{asked: e, epoch: p.LeaderEpoch, end: p.EndOffset})
	}
	return l, nil
}
