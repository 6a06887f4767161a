package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/internal/compress"
)

// Records of a poll whose predecessor was released are intact: the
// released memory is reused (the keys and values of compressed batches are
// decompressed into it, the records written over it) and nothing of a
// poll's records is overwritten while it is held. Every record arrives
// once, in order, with its own value, under each codec, with headers.
func TestReleaseReusesMemory(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "zstd": kgo.ZstdCompression(), "snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression()}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			const parts, per = 3, 3000
			c := newCluster(t, parts)
			for p := int32(0); p < parts; p++ {
				produceRange(t, c, p, 0, per, kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(2*time.Millisecond),
					kgo.MaxBufferedRecords(200))
			}
			// Small fetches: many polls, each released before the next.
			cons := newConsumer(t, c, consumer.FetchMaxPartitionBytes(1<<10), consumer.FetchMaxBytes(4<<10))
			var as []consumer.Assignment
			for p := int32(0); p < parts; p++ {
				as = append(as, consumer.Assignment{Topic: topic, Partition: p, Start: consumer.At(0)})
			}
			if err := cons.Assign(as...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			next := map[int32]int64{}
			var held consumer.Fetches // one poll kept across the next
			var heldValues [][]byte
			polls := 0
			for got := 0; got < parts*per; {
				f, err := cons.Poll(ctx)
				if err != nil {
					t.Fatalf("poll after %d records: %v", got, err)
				}
				if len(f.Errors)+len(f.Truncations) > 0 {
					t.Fatalf("errors %v truncations %v", f.Errors, f.Truncations)
				}
				polls++
				for _, r := range f.Records {
					if r.Offset != next[r.Partition] {
						t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
					}
					if want := fmt.Sprintf("p%d-%d", r.Partition, r.Offset); string(r.Value) != want {
						t.Fatalf("partition %d offset %d: value %q, want %q", r.Partition, r.Offset, r.Value, want)
					}
					next[r.Partition]++
				}
				got += len(f.Records)
				// The poll held since the last round still has its
				// values: nothing reused memory it is in.
				for i, r := range held.Records {
					if !bytes.Equal(r.Value, heldValues[i]) {
						t.Fatalf("a held record's value changed from %q to %q", heldValues[i], r.Value)
					}
				}
				held.Release()
				held, heldValues = consumer.Fetches{}, nil
				if polls%2 == 0 {
					held = f
					for _, r := range f.Records {
						heldValues = append(heldValues, bytes.Clone(r.Value))
					}
					continue
				}
				// Released at once, twice: through a copy and itself.
				cp := f
				cp.Release()
				if cp.Records != nil {
					t.Fatal("Release left Records set")
				}
				f.Release()
			}
			if polls < 10 {
				t.Fatalf("only %d polls: the test needs many", polls)
			}
		})
	}
}

// With PoisonReleased, a value kept past its Release reads as 0xa5 bytes
// once its memory is handed back: a use after Release shows at once.
func TestPoisonReleasedShowsUseAfterRelease(t *testing.T) {
	c := newCluster(t, 1)
	// One compressed batch: the values of an uncompressed one alias the
	// fetch response rather than a released decompression buffer.
	produceOneBatch(t, c, 0, 0, 500, compress.Zstd)
	cons := newConsumer(t, c, consumer.PoisonReleased())
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	f := pollOnce(t, cons)
	kept := f.Records[0] // the struct is copied; its Value still aliases
	if want := fmt.Sprintf("p0-%d", kept.Offset); string(kept.Value) != want {
		t.Fatalf("before Release: %q, want %q", kept.Value, want)
	}
	f.Release()
	if !bytes.Equal(kept.Value, bytes.Repeat([]byte{0xa5}, len(kept.Value))) {
		t.Fatalf("after Release the value reads %q, not the poison", kept.Value)
	}
}

// Records the application dropped are not kept reachable by the consumer
// as it goes on fetching (whether their values alias a fetch response or
// a decompressed batch).
func TestPolledRecordsAreReleased(t *testing.T) {
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.ZstdCompression()} {
		t.Run(fmt.Sprint(codec), func(t *testing.T) {
			c := newCluster(t, 1)
			big := bytes.Repeat([]byte("v"), 16<<10)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
				kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			send := func(n int, v []byte) {
				for i := 0; i < n; i++ {
					if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(100, big)
			cons := newConsumer(t, c)
			if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
				t.Fatal(err)
			}
			var values []weak.Pointer[byte]
			for len(values) < 100 {
				f, err := cons.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range f.Records {
					values = append(values, weak.Make(&r.Value[0]))
				}
			}
			send(3, []byte("small"))
			for got := 0; got < 3; {
				f, err := cons.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got += len(f.Records)
			}
			runtime.GC()
			runtime.GC()
			for i, w := range values {
				if w.Value() != nil {
					t.Fatalf("the value of record %d is still reachable", i)
				}
			}
			runtime.KeepAlive(cons)
		})
	}
}

// An application that does not release its records still gets their
// decompression buffers reused once it drops them, and never while it
// keeps them (and releasing some polls changes none of this): records kept across many later polls (and collections) keep
// their values, and every record arrives once, in order, with its own.
// zstd declares its output size (decompressed straight into the buffer);
// lz4 and gzip do not (decompressed elsewhere, copied into it).
func TestDroppedBuffersComeBackByThemselves(t *testing.T) {
	for _, codec := range []compress.Codec{compress.Zstd, compress.LZ4, compress.Gzip} {
		t.Run(codec.String(), func(t *testing.T) { droppedBuffersComeBack(t, codec) })
	}
}

func droppedBuffersComeBack(t *testing.T, codec compress.Codec) {
	const n, per = 40, 500 // each batch about 7 KiB decompressed
	c := batches(t, n, per, codec)
	// Small fetches: about a batch an answer, so that later answers are
	// decoded into buffers that came back.
	cons := newConsumer(t, c, consumer.MaxPollRecords(per), consumer.FetchMaxPartitionBytes(1<<10), consumer.FetchMaxBytes(4<<10))
	if err := cons.Assign(consumer.Assignment{Topic: topic, Partition: 0, Start: consumer.At(0)}); err != nil {
		t.Fatal(err)
	}
	before := consumer.ReturnedBuffers()
	type kept struct {
		f      consumer.Fetches
		values [][]byte
	}
	var keep []kept
	next := int64(0)
	for polls := 0; next < n*per; polls++ {
		f := pollOnce(t, cons)
		for _, r := range f.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf("p0-%d", r.Offset) {
				t.Fatalf("offset %d value %q, want offset %d", r.Offset, r.Value, next)
			}
			next++
		}
		switch polls % 4 {
		case 0: // kept to the end
			k := kept{f: f}
			for _, r := range f.Records {
				k.values = append(k.values, bytes.Clone(r.Value))
			}
			keep = append(keep, k)
		case 1: // released: its buffers go back by hand, once
			f.Release()
		} // the others dropped
		runtime.GC()
		time.Sleep(time.Millisecond) // the finalizers' turn
		for _, k := range keep {
			for i, r := range k.f.Records {
				if !bytes.Equal(r.Value, k.values[i]) {
					t.Fatalf("a kept record's value changed from %q to %q", k.values[i], r.Value)
				}
			}
		}
	}
	// Finalizers run after a collection, on their own goroutine: give a
	// loaded machine time.
	if !consumer.CollectUntil(5*time.Second, func() bool { return consumer.ReturnedBuffers() > before }) {
		t.Fatal("no dropped buffer came back")
	}
	runtime.KeepAlive(keep)
}
