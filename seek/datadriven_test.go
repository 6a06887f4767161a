package seek

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the scripts under testdata/. Each script is one edge
// case; each command steps one event and prints the actions it caused and
// the state after. Regenerate the expectations with
//
//	go test ./seek -run TestScenarios -rewrite
//
// and review the diff.
//
// Commands (offsets and epochs are plain integers; req defaults to the
// request in flight):
//
//	new [policy=earliest|latest|none] [retry=N] [waits=N] [lineage=N] [inband]
//	leader id=N epoch=N [topic=X] [inband]   (inband: LeaderChanged.InBand)
//	broker-inband id=N [off]                 (BrokerInBand)
//	assign|seek (offset=N [epoch=N] [nearest] | earliest | latest | ts=N)
//	assign|seek offset=N history=E:S[,E:S...] end=N [topic=X]   (AtHistory; history=none: empty; topic: its topic ID)
//	revoke
//	batch base=N last=N epoch=N [checked] [req=N]
//	fetch-done [checked] [req=N]
//	fetch-error code=NAME [hint=ID@EPOCH [hint-inband]] [req=N]
//	diverging epoch=N end=N [req=N]
//	epoch-end (epoch=N end=N | code=NAME) [req=N]
//	listed (offset=N [epoch=N] | code=NAME) [req=N]
//	policy earliest|latest|none
//	pause | resume | tick
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var p *Partition
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				cfg := DefaultConfig()
				if s, ok := arg(d, "policy"); ok {
					cfg.Policy = parsePolicy(t, s)
				}
				cfg.RetryTicks = intArg(t, d, "retry", cfg.RetryTicks)
				cfg.MaxEpochWaits = intArg(t, d, "waits", cfg.MaxEpochWaits)
				cfg.LineageSize = intArg(t, d, "lineage", cfg.LineageSize)
				cfg.InBandValidation = d.HasArg("inband")
				var err error
				if p, err = NewPartition(cfg); err != nil {
					return err.Error() + "\n"
				}
				return p.String() + "\n"
			}
			if p == nil {
				t.Fatalf("%s: no partition; start the script with new", d.Pos)
			}
			ev := scriptEvent(t, d, p)
			var b strings.Builder
			for _, a := range p.Step(ev) {
				b.WriteString(a.String())
				b.WriteByte('\n')
			}
			b.WriteString(p.String())
			b.WriteByte('\n')
			return b.String()
		})
	})
}

// scriptEvent turns a script command into the event it names.
func scriptEvent(t *testing.T, d *datadriven.TestData, p *Partition) Event {
	req := RequestID(intArg(t, d, "req", int(p.inflight)))
	switch d.Cmd {
	case "leader":
		e := LeaderChanged{Leader: int32(intArg(t, d, "id", -1)), Epoch: int32(intArg(t, d, "epoch", -1)), InBand: d.HasArg("inband")}
		if s, ok := arg(d, "topic"); ok {
			copy(e.TopicID[:], s)
		}
		return e
	case "broker-inband":
		return BrokerInBand{Broker: int32(mustInt(t, d, "id")), InBand: !d.HasArg("off")}
	case "assign":
		return Assigned{Start: scriptStart(t, d)}
	case "seek":
		return Seek{Start: scriptStart(t, d)}
	case "revoke":
		return Revoked{}
	case "batch":
		return BatchFetched{Req: req, Base: int64(mustInt(t, d, "base")), Last: int64(mustInt(t, d, "last")), Epoch: int32(mustInt(t, d, "epoch")),
			Checked: d.HasArg("checked")}
	case "fetch-done":
		return FetchCompleted{Req: req, Checked: d.HasArg("checked")}
	case "fetch-error":
		e := FetchFailed{Req: req, Code: codeArg(t, d), HintInBand: d.HasArg("hint-inband")}
		if s, ok := arg(d, "hint"); ok {
			id, ep, _ := strings.Cut(s, "@")
			e.Hint = &Leader{ID: int32(atoi(t, id)), Epoch: int32(atoi(t, ep))}
		}
		return e
	case "diverging":
		return DivergingEpoch{Req: req, End: EpochEnd{Epoch: int32(mustInt(t, d, "epoch")), EndOffset: int64(mustInt(t, d, "end"))}}
	case "epoch-end":
		if d.HasArg("code") {
			return EpochEndOffset{Req: req, Code: codeArg(t, d), End: EpochEnd{Epoch: NoEpoch, EndOffset: NoOffset}}
		}
		return EpochEndOffset{Req: req, End: EpochEnd{Epoch: int32(mustInt(t, d, "epoch")), EndOffset: int64(mustInt(t, d, "end"))}}
	case "listed":
		if d.HasArg("code") {
			return ListedOffset{Req: req, Code: codeArg(t, d), Offset: NoOffset, Epoch: NoEpoch}
		}
		return ListedOffset{Req: req, Offset: int64(mustInt(t, d, "offset")), Epoch: int32(intArg(t, d, "epoch", -1))}
	case "policy":
		if len(d.CmdArgs) != 1 {
			t.Fatalf("%s: policy takes one argument", d.Pos)
		}
		return PolicyChanged{Policy: parsePolicy(t, d.CmdArgs[0].Key)}
	case "pause":
		return Paused{Paused: true}
	case "resume":
		return Paused{Paused: false}
	case "tick":
		return Tick{}
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return nil
}

func scriptStart(t *testing.T, d *datadriven.TestData) Start {
	switch {
	case d.HasArg("earliest"):
		return Earliest()
	case d.HasArg("latest"):
		return Latest()
	case d.HasArg("ts"):
		return AtTimestamp(int64(mustInt(t, d, "ts")))
	case d.HasArg("history"):
		s, _ := arg(d, "history")
		var entries []EpochEntry
		if s != "none" {
			for _, f := range strings.Split(s, ",") {
				e, o, _ := strings.Cut(f, ":")
				entries = append(entries, EpochEntry{Epoch: int32(atoi(t, e)), StartOffset: int64(atoi(t, o))})
			}
		}
		h, err := EpochHistoryOf(entries, int64(intArg(t, d, "end", -1)), 0)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		if s, ok := arg(d, "topic"); ok {
			var id TopicID
			copy(id[:], s)
			h.SetTopicID(id)
		}
		return AtHistory(int64(mustInt(t, d, "offset")), h)
	case d.HasArg("nearest"):
		return NearestTo(int64(mustInt(t, d, "offset")), int32(intArg(t, d, "epoch", -1)))
	}
	return AtEpoch(int64(mustInt(t, d, "offset")), int32(intArg(t, d, "epoch", -1)))
}

func parsePolicy(t *testing.T, s string) Policy {
	for p := PolicyEarliest; p <= PolicyNone; p++ {
		if p.String() == s {
			return p
		}
	}
	t.Fatalf("unknown policy %q", s)
	return 0
}

func codeArg(t *testing.T, d *datadriven.TestData) Code {
	s, _ := arg(d, "code")
	c, ok := ParseCode(s)
	if !ok {
		// A number: a code the machine does not name.
		n, err := strconv.ParseInt(s, 10, 16)
		if err != nil {
			t.Fatalf("%s: unknown code %q", d.Pos, s)
		}
		c = Code(n)
	}
	return c
}

func arg(d *datadriven.TestData, key string) (string, bool) {
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) == 0 {
		return "", ok
	}
	return a.Vals[0], true
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	s, ok := arg(d, key)
	if !ok {
		return def
	}
	return atoi(t, s)
}

func mustInt(t *testing.T, d *datadriven.TestData, key string) int {
	s, ok := arg(d, key)
	if !ok {
		t.Fatalf("%s: %s needs %s=", d.Pos, d.Cmd, key)
	}
	return atoi(t, s)
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(fmt.Errorf("bad integer %q: %w", s, err))
	}
	return n
}
