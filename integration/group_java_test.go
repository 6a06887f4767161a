package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kepoch/kepoch/consumer"
)

// javaLib is the folder of the Kafka jars scripts/kafka-local.sh runs the
// cluster from; they include kafka-clients, the Java consumer.
func javaLib() string {
	version := os.Getenv("KEPOCH_KAFKA_VERSION")
	if version == "" {
		version = "4.1.2"
	}
	cache := os.Getenv("KEPOCH_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "kepoch")
	}
	return filepath.Join(cache, "kafka-"+version, "lib")
}

// javaMember is a Java KafkaConsumer (testdata/JavaMember.java) in a
// group, run as a child process.
type javaMember struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu      sync.Mutex
	owned   map[int32]bool
	records map[int32][]javaRecord
	events  []string
	closed  bool
	stderr  strings.Builder
}

type javaRecord struct {
	offset int64
	epoch  int32
}

func startJava(t *testing.T, group, topic, protocol, assignor string) *javaMember {
	t.Helper()
	lib := javaLib()
	if _, err := exec.LookPath("java"); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("KEPOCH_KAFKA") != "" {
			// Where the cluster is expected the interop claim must be
			// proven, never skipped.
			t.Fatalf("no java on PATH: the Java interop test needs a JDK 17+ (%v)", err)
		}
		t.Skip("no java: the Java interop test needs a JDK 17+")
	}
	if _, err := os.Stat(filepath.Join(lib, "kafka-clients-4.1.2.jar")); err != nil && os.Getenv("KEPOCH_KAFKA_VERSION") == "" {
		t.Fatalf("Kafka jars not found in %s (scripts/kafka-local.sh fetches them)", lib)
	}
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "testdata", "JavaMember.java")
	args := []string{"-Xmx256m", "-Dlog4j2.level=warn", "-cp", filepath.Join(lib, "*"), src, strings.Join(Seeds, ","), group, topic, protocol}
	if assignor != "" {
		args = append(args, assignor)
	}
	j := &javaMember{t: t, done: make(chan struct{}), owned: map[int32]bool{}, records: map[int32][]javaRecord{}}
	j.cmd = exec.Command("java", args...)
	var err error
	if j.stdin, err = j.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	j.cmd.Stderr = &lockedWriter{mu: &j.mu, b: &j.stderr}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go j.read(stdout)
	t.Cleanup(func() {
		j.stop(30 * time.Second)
		if t.Failed() {
			j.mu.Lock()
			t.Logf("java member events %v\nstderr:\n%s", j.events, j.stderr.String())
			j.mu.Unlock()
		}
	})
	return j
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (j *javaMember) read(r io.Reader) {
	defer close(j.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		j.mu.Lock()
		switch f[0] {
		case "assigned", "revoked", "lost":
			j.events = append(j.events, line)
			if len(f) > 1 {
				for _, tp := range strings.Split(f[1], ",") {
					i := strings.LastIndexByte(tp, '-')
					p, _ := strconv.Atoi(tp[i+1:])
					j.owned[int32(p)] = f[0] == "assigned"
					if f[0] != "assigned" {
						delete(j.owned, int32(p))
					}
				}
			}
		case "record":
			p, _ := strconv.Atoi(f[1])
			o, _ := strconv.ParseInt(f[2], 10, 64)
			e, _ := strconv.Atoi(f[3])
			j.records[int32(p)] = append(j.records[int32(p)], javaRecord{o, int32(e)})
		case "closed":
			j.closed = true
		}
		j.mu.Unlock()
	}
}

func (j *javaMember) ownedCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.owned)
}

func (j *javaMember) ownedPartitions() map[int32]bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[int32]bool{}
	for p := range j.owned {
		out[p] = true
	}
	return out
}

func (j *javaMember) recordsOf(p int32) []javaRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]javaRecord(nil), j.records[p]...)
}

// stop closes stdin (the member commits and leaves) and waits.
func (j *javaMember) stop(d time.Duration) {
	_ = j.stdin.Close()
	select {
	case <-j.done:
	case <-time.After(d):
		_ = j.cmd.Process.Kill()
		<-j.done
	}
	_ = j.cmd.Wait()
}

// waitUntil polls cond every 100ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGroupInteropWithJava runs a kepoch member and a Java KafkaConsumer
// (kafka-clients 4.1) in one group on the real cluster: they split the
// partitions (kepoch leading the classic protocol with cooperative-sticky
// or range, Java leading, or the coordinator assigning under KIP-848);
// each continues exactly from the other's commits when it takes partitions
// over, and the Java consumer's commits carry leader epochs that kepoch
// reads back.
func TestGroupInteropWithJava(t *testing.T) {
	c := Require(t)
	for _, tc := range []struct {
		name        string
		protocol    consumer.GroupProtocol
		kepochFirst bool
		assignor    string
		javaClass   string
	}{
		{"classic cooperative-sticky, kepoch leads", consumer.ProtocolClassic, true, consumer.CooperativeStickyAssignor, "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"},
		{"classic cooperative-sticky, Java leads", consumer.ProtocolClassic, false, consumer.CooperativeStickyAssignor, "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"},
		{"classic range, kepoch leads", consumer.ProtocolClassic, true, consumer.RangeAssignor, "org.apache.kafka.clients.consumer.RangeAssignor"},
		{"classic roundrobin, kepoch leads", consumer.ProtocolClassic, true, consumer.RoundRobinAssignor, "org.apache.kafka.clients.consumer.RoundRobinAssignor"},
		{"consumer protocol", consumer.ProtocolConsumer, true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			logf := func(format string, args ...any) {
				t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
			}
			topic, group := TopicName("java-interop"), TopicName("java-interop")
			if _, err := c.CreateTopic(ctx, topic, [][]int32{{1, 2}, {2, 3}, {3, 1}, {1, 3}}, nil); err != nil {
				t.Fatal(err)
			}
			// Every record is written in leader epoch 1, not 0 (what
			// an unset epoch field also holds): a commit that dropped
			// or zeroed its epoch would then be told apart, here and
			// by the other client, whose validation of epoch 0 at
			// offset 10 finds that epoch ended at 0 (a truncation).
			for p := int32(0); p < 4; p++ {
				st, err := c.MoveLeader(ctx, topic, p)
				if err != nil {
					t.Fatal(err)
				}
				if st.LeaderEpoch < 1 {
					t.Fatalf("after moving the leader: %v", st)
				}
			}
			produce := func(from, to int) {
				t.Helper()
				for p := int32(0); p < 4; p++ {
					var vs []string
					for i := from; i < to; i++ {
						vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
					}
					if _, err := ProduceValues(ctx, AcksAll, topic, p, vs...); err != nil {
						t.Fatal(err)
					}
				}
			}
			produce(0, 10)

			var mu sync.Mutex
			kOwned := map[int32]bool{}
			kRecords := map[int32][]consumer.Record{}
			opts := append(groupConsumerOpts(group), consumer.WithGroupProtocol(tc.protocol),
				consumer.OnAssigned(func(_ context.Context, tps []consumer.TopicPartition) {
					mu.Lock()
					defer mu.Unlock()
					for _, tp := range tps {
						kOwned[tp.Partition] = true
					}
				}),
				consumer.OnRevoked(func(_ context.Context, tps []consumer.TopicPartition) {
					mu.Lock()
					defer mu.Unlock()
					for _, tp := range tps {
						delete(kOwned, tp.Partition)
					}
				}))
			if tc.assignor != "" {
				opts = append(opts, consumer.Assignors(tc.assignor))
			}
			k := newConsumer(t, opts...)
			kCount := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(kOwned)
			}
			pctx, stopPoll := context.WithCancel(ctx)
			polling := make(chan struct{})
			startPolling := func() {
				go func() {
					defer close(polling)
					for {
						f, err := k.Poll(pctx)
						if err != nil {
							return
						}
						mu.Lock()
						for _, r := range f.Records {
							kRecords[r.Partition] = append(kRecords[r.Partition], r)
						}
						mu.Unlock()
						if len(f.Errors)+len(f.Truncations) > 0 {
							t.Errorf("kepoch member: errors %v, truncations %v", f.Errors, f.Truncations)
						}
					}
				}()
			}
			kTotal := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, rs := range kRecords {
					n += len(rs)
				}
				return n
			}

			var j *javaMember
			if tc.kepochFirst {
				if err := k.Subscribe(topic); err != nil {
					t.Fatal(err)
				}
				startPolling()
				waitUntil(t, 30*time.Second, "kepoch owns 4 and read 40", func() bool { return kCount() == 4 && kTotal() == 40 })
				if err := k.CommitSync(ctx, nil); err != nil {
					t.Fatal(err)
				}
				cm, err := k.Committed(ctx, tp(topic, 0), tp(topic, 1), tp(topic, 2), tp(topic, 3))
				if err != nil {
					t.Fatal(err)
				}
				for p := int32(0); p < 4; p++ {
					st, err := c.Describe(ctx, topic, p)
					if err != nil {
						t.Fatal(err)
					}
					if om := cm[tp(topic, p)]; om.Offset != 10 || om.LeaderEpoch != st.LeaderEpoch {
						t.Fatalf("kepoch's commit of %d: %+v; want 10 with leader epoch %d", p, om, st.LeaderEpoch)
					}
				}
				logf("kepoch member read 40 records and committed")
				j = startJava(t, group, topic, tc.protocol.String(), tc.javaClass)
			} else {
				j = startJava(t, group, topic, tc.protocol.String(), tc.javaClass)
				waitUntil(t, 60*time.Second, "Java owns 4 and read 40", func() bool {
					n := 0
					for p := int32(0); p < 4; p++ {
						n += len(j.recordsOf(p))
					}
					return j.ownedCount() == 4 && n == 40
				})
				logf("Java member read 40 records")
				time.Sleep(time.Second) // Java autocommits every 200 ms
				if err := k.Subscribe(topic); err != nil {
					t.Fatal(err)
				}
				startPolling()
			}
			waitUntil(t, 90*time.Second, "2 partitions each", func() bool { return kCount() == 2 && j.ownedCount() == 2 })
			jOwned := j.ownedPartitions()
			logf("split: Java owns %v; Java events %v", jOwned, j.events)
			produce(10, 15)
			// Each member reads its partitions from where the other
			// left them: the first member read (and committed) 0..9 of
			// every partition, so the second starts at 10.
			waitUntil(t, 30*time.Second, "the new records", func() bool {
				for p := int32(0); p < 4; p++ {
					if jOwned[p] {
						if rs := j.recordsOf(p); len(rs) == 0 || rs[len(rs)-1].offset != 14 {
							return false
						}
					} else {
						mu.Lock()
						rs := kRecords[p]
						mu.Unlock()
						if len(rs) == 0 || rs[len(rs)-1].Offset != 14 {
							return false
						}
					}
				}
				return true
			})
			for p := int32(0); p < 4; p++ {
				if tc.kepochFirst && jOwned[p] {
					if rs := j.recordsOf(p); rs[0].offset != 10 || len(rs) != 5 {
						t.Fatalf("Java took %d over from kepoch's commit 10 but read %v", p, rs)
					}
				}
				if !tc.kepochFirst && !jOwned[p] {
					mu.Lock()
					rs := kRecords[p]
					mu.Unlock()
					if rs[0].Offset != 10 || len(rs) != 5 {
						t.Fatalf("kepoch took %d over from Java's commit 10 but read from %d (%d records)", p, rs[0].Offset, len(rs))
					}
				}
			}
			// Java leaves (committing on close); kepoch takes everything
			// and continues from Java's commits, which carry the epochs.
			j.stop(60 * time.Second)
			waitUntil(t, 60*time.Second, "kepoch owns 4", func() bool { return kCount() == 4 })
			cm, err := k.Committed(ctx, tp(topic, 0), tp(topic, 1), tp(topic, 2), tp(topic, 3))
			if err != nil {
				t.Fatal(err)
			}
			for p := int32(0); p < 4; p++ {
				if jOwned[p] {
					st, err := c.Describe(ctx, topic, p)
					if err != nil {
						t.Fatal(err)
					}
					if om := cm[tp(topic, p)]; om.Offset != 15 || om.LeaderEpoch != st.LeaderEpoch {
						t.Fatalf("Java's commit of %d: %+v; want 15 with leader epoch %d", p, om, st.LeaderEpoch)
					}
				}
			}
			produce(15, 17)
			waitUntil(t, 30*time.Second, "kepoch reads on", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for p := int32(0); p < 4; p++ {
					rs := kRecords[p]
					if len(rs) == 0 || rs[len(rs)-1].Offset != 16 {
						return false
					}
				}
				return true
			})
			mu.Lock()
			for p := int32(0); p < 4; p++ {
				if jOwned[p] {
					rs := kRecords[p]
					i := 0
					for i < len(rs) && rs[i].Offset < 15 {
						i++
					}
					if tc.kepochFirst && i != 10 || len(rs)-i != 2 || rs[i].Offset != 15 {
						t.Errorf("partition %d after Java left: kepoch read %d records before 15, then from %d", p, i, rs[i].Offset)
					}
				}
			}
			mu.Unlock()
			stopPoll()
			<-polling
			logf("Java commits read back with epochs %v", cm)
		})
	}
}

func tp(topic string, p int32) consumer.TopicPartition {
	return consumer.TopicPartition{Topic: topic, Partition: p}
}
