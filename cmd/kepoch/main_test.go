package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoReportsTheTruncation(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"demo"}, &out, &errOut); code != 0 {
		t.Fatalf("demo exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{
		"consumed offsets 0..29; position 30@0",
		"kepoch reported: payments[0] diverged: consumed to 30@0, log diverges at 20@0, delivered offsets [20,30) replaced",
		"replaced batch 20..29: producer ",
		"refund-0..refund-4 at offsets 20..24, leader epoch 1",
		"position 25@1",
		"epoch   1: ends at offset 25",
		"epoch   0: ends at offset 20",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, &out, &errOut); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	if code := run(context.Background(), []string{"epochs"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "-topic is required") {
		t.Errorf("epochs without -topic: exit %d, stderr %q", code, errOut.String())
	}
	// Refused before any broker is asked (none listens on port 1).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"epochs", "-brokers", "127.0.0.1:1", "-topic", "t", "-partition", "4294967296"}, "-partition 4294967296: out of range"},
		{[]string{"epochs", "-brokers", "127.0.0.1:1", "-topic", "t", "-partition", "-1"}, "-partition -1: out of range"},
		{[]string{"epochs", "-brokers", "127.0.0.1:1", "-topic", "t", "-depth", "0"}, "-depth 0: must be at least 1"},
		{[]string{"epochs", "-brokers", "127.0.0.1:1", "-topic", "t", "extra"}, "unexpected arguments"},
		{[]string{"epochs", "-brokers", " , ", "-topic", "t"}, "-brokers: no broker given"},
	} {
		errOut.Reset()
		if code := run(context.Background(), c.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args[1:], code, errOut.String(), c.want)
		}
	}
}
