package errors_test

import (
	"context"
	stderrors "errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kepoch/kepoch/errors"
)

func TestFromCode(t *testing.T) {
	tests := []struct {
		code     int16
		want     error // identity expected from errors.Is
		wantName string
		unknown  bool
	}{
		{code: 0},
		{code: -1, want: kerr.UnknownServerError, wantName: "UNKNOWN_SERVER_ERROR"},
		{code: 1, want: kerr.OffsetOutOfRange, wantName: "OFFSET_OUT_OF_RANGE"},
		{code: 6, want: kerr.NotLeaderForPartition, wantName: "NOT_LEADER_FOR_PARTITION"},
		{code: 74, want: kerr.FencedLeaderEpoch, wantName: "FENCED_LEADER_EPOCH"},
		{code: 75, want: kerr.UnknownLeaderEpoch, wantName: "UNKNOWN_LEADER_EPOCH"},
		{code: 90, want: kerr.ProducerFenced, wantName: "PRODUCER_FENCED"},
		{code: 136, want: kerr.ControllerIDNotRegistered, wantName: "CONTROLLER_ID_NOT_REGISTERED"},
		{code: 30000, unknown: true},
		{code: -7, unknown: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			err := errors.FromCode(tt.code)
			if tt.code == 0 {
				if err != nil {
					t.Fatalf("FromCode(0) = %v, want nil", err)
				}
				return
			}
			code, ok := errors.CodeOf(err)
			if !ok || code != tt.code {
				t.Fatalf("CodeOf(FromCode(%d)) = %d, %v", tt.code, code, ok)
			}
			if tt.unknown {
				var ue *errors.UnknownCodeError
				if !errors.As(err, &ue) || ue.Code != tt.code {
					t.Fatalf("FromCode(%d) = %#v, want *UnknownCodeError", tt.code, err)
				}
				if errors.Is(err, kerr.UnknownServerError) {
					t.Fatalf("an unknown code must not match UNKNOWN_SERVER_ERROR")
				}
				if _, ok := errors.Info(tt.code); ok {
					t.Fatalf("Info(%d) found an unknown code", tt.code)
				}
				return
			}
			if err != tt.want || !errors.Is(err, tt.want) {
				t.Fatalf("FromCode(%d) = %v, want the kerr value %v", tt.code, err, tt.want)
			}
			ke, ok := errors.AsType[*kerr.Error](err)
			if !ok || ke.Message != tt.wantName {
				t.Fatalf("name = %v, want %s", ke, tt.wantName)
			}
			info, ok := errors.Info(tt.code)
			if !ok || info.Name != tt.wantName || info.Err != tt.want || info.Meaning == "" {
				t.Fatalf("Info(%d) = %+v", tt.code, info)
			}
		})
	}
}

func TestCodesTable(t *testing.T) {
	codes := errors.Codes()
	if len(codes) < 130 {
		t.Fatalf("Codes() has %d entries; kerr knows more than 130", len(codes))
	}
	seen := map[int16]bool{}
	for i, c := range codes {
		if i > 0 && codes[i-1].Code >= c.Code {
			t.Fatalf("Codes() not strictly ascending at %d: %d then %d", i, codes[i-1].Code, c.Code)
		}
		seen[c.Code] = true
		if c.Code == 0 || c.Name == "" || c.Meaning == "" || strings.Contains(c.Meaning, "\n") {
			t.Errorf("code %d: bad entry %+v", c.Code, c)
		}
		if errors.FromCode(c.Code) != c.Err {
			t.Errorf("code %d: FromCode does not return the listed value", c.Code)
		}
		if c.Retriable != errors.IsRetriable(c.Err) {
			t.Errorf("code %d (%s): Codes says retriable=%v, IsRetriable says %v", c.Code, c.Name, c.Retriable, !c.Retriable)
		}
	}
	// Every code kerr knows is listed: probe kerr directly.
	for c := -1; c < 200; c++ {
		ke, ok := kerr.ErrorForCode(int16(c)).(*kerr.Error)
		if c == 0 || !ok || ke.Code != int16(c) {
			continue
		}
		if !seen[int16(c)] {
			t.Errorf("kerr knows code %d (%s), Codes() does not list it", c, ke.Message)
		}
	}
}

func TestReexportedCodes(t *testing.T) {
	tests := []struct {
		got  error
		code int16
	}{
		{errors.ErrOffsetOutOfRange, 1},
		{errors.ErrCorruptMessage, 2},
		{errors.ErrUnknownTopicOrPartition, 3},
		{errors.ErrLeaderNotAvailable, 5},
		{errors.ErrNotLeader, 6},
		{errors.ErrRequestTimedOut, 7},
		{errors.ErrReplicaNotAvailable, 9},
		{errors.ErrNotEnoughReplicas, 19},
		{errors.ErrNotEnoughReplicasAfter, 20},
		{errors.ErrOutOfOrderSequence, 45},
		{errors.ErrDuplicateSequence, 46},
		{errors.ErrInvalidProducerEpoch, 47},
		{errors.ErrInvalidTxnState, 48},
		{errors.ErrInvalidProducerIDMapping, 49},
		{errors.ErrConcurrentTransactions, 51},
		{errors.ErrKafkaStorageError, 56},
		{errors.ErrUnknownProducerID, 59},
		{errors.ErrFencedLeaderEpoch, 74},
		{errors.ErrUnknownLeaderEpoch, 75},
		{errors.ErrOffsetNotAvailable, 78},
		{errors.ErrProducerFenced, 90},
		{errors.ErrUnknownTopicID, 100},
		{errors.ErrTransactionAbortable, 120},
	}
	for _, tt := range tests {
		if got := errors.FromCode(tt.code); got != tt.got {
			t.Errorf("re-exported value for code %d is %v, FromCode gives %v", tt.code, tt.got, got)
		}
	}
}

func TestSentinels(t *testing.T) {
	kepoch := []error{errors.ErrLogTruncation, errors.ErrOffsetBelowLogStart, errors.ErrTopicIDChanged,
		errors.ErrClosed, errors.ErrUnknownOutcome, errors.ErrNotSent,
		errors.ErrCorruptBatch, errors.ErrCompression, errors.ErrUnsupportedMagic, errors.ErrLeaderUnreachable,
		errors.ErrInvalidOption, errors.ErrInvalidArgument}
	for i, a := range kepoch {
		if !strings.HasPrefix(a.Error(), "kepoch: ") {
			t.Errorf("%q lacks the kepoch prefix", a)
		}
		for j, b := range kepoch {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("Is(%q, %q) = %v", a, b, !(i == j))
			}
		}
		if _, ok := errors.CodeOf(a); ok && a != errors.ErrOffsetBelowLogStart && a != errors.ErrLeaderUnreachable {
			t.Errorf("%q carries a Kafka code", a)
		}
	}
	if !errors.Is(errors.ErrOffsetBelowLogStart, errors.ErrOffsetOutOfRange) ||
		!errors.Is(errors.ErrOffsetBelowLogStart, kerr.OffsetOutOfRange) {
		t.Error("ErrOffsetBelowLogStart must match OFFSET_OUT_OF_RANGE")
	}
	if errors.Is(errors.ErrOffsetOutOfRange, errors.ErrOffsetBelowLogStart) {
		t.Error("a plain OFFSET_OUT_OF_RANGE must not match ErrOffsetBelowLogStart")
	}
	if c, ok := errors.CodeOf(errors.ErrOffsetBelowLogStart); !ok || c != 1 {
		t.Errorf("CodeOf(ErrOffsetBelowLogStart) = %d, %v", c, ok)
	}
	if c, ok := errors.CodeOf(errors.ErrLeaderUnreachable); !ok || c != 13 || !errors.Is(errors.ErrLeaderUnreachable, errors.ErrNetworkException) {
		t.Errorf("CodeOf(ErrLeaderUnreachable) = %d, %v; want NETWORK_EXCEPTION (13), which it matches", c, ok)
	}
}

func TestLogTruncationError(t *testing.T) {
	err := &errors.LogTruncationError{Divergences: []errors.Divergence{
		{Topic: "t", Partition: 0, Consumed: errors.Position{Offset: 300, LeaderEpoch: 5}, Divergent: errors.Position{Offset: 200, LeaderEpoch: 4}},
		{Topic: "t", Partition: 2, Consumed: errors.Position{Offset: 10, LeaderEpoch: 2}, Divergent: errors.Position{Offset: -1, LeaderEpoch: -1}, Unknown: true},
	}}
	wrapped := fmt.Errorf("poll: %w", &errors.PartitionError{Op: "validate", Topic: "t", Partition: 0, Offset: 300, LeaderEpoch: 5, Err: err})

	for _, e := range []error{err, wrapped} {
		for _, target := range []error{errors.ErrLogTruncation, errors.ErrOffsetOutOfRange, kerr.OffsetOutOfRange} {
			if !errors.Is(e, target) {
				t.Errorf("Is(%v, %v) = false", e, target)
			}
		}
		for _, target := range []error{errors.ErrOffsetBelowLogStart, errors.ErrTopicIDChanged, kerr.FencedLeaderEpoch} {
			if errors.Is(e, target) {
				t.Errorf("Is(%v, %v) = true", e, target)
			}
		}
		lt, ok := errors.AsType[*errors.LogTruncationError](e)
		if !ok || lt != err {
			t.Fatalf("As(%v) did not find the truncation error", e)
		}
		if errors.IsRetriable(e) {
			t.Errorf("truncation must not be retriable")
		}
	}
	want := "kepoch: log truncation detected: t[0] consumed to 300@5, log diverges at 200@4; t[2] consumed to 10@2, divergence point unknown"
	if got := err.Error(); got != want {
		t.Errorf("Error() =\n%s\nwant\n%s", got, want)
	}
	if d, ok := err.For("t", 2); !ok || !d.Unknown || d.Consumed.Offset != 10 {
		t.Errorf("For(t, 2) = %+v, %v", d, ok)
	}
	if _, ok := err.For("t", 1); ok {
		t.Errorf("For(t, 1) found a partition that was not reported")
	}
	// A plain OFFSET_OUT_OF_RANGE is not truncation.
	if errors.Is(kerr.OffsetOutOfRange, errors.ErrLogTruncation) {
		t.Error("OFFSET_OUT_OF_RANGE matched ErrLogTruncation")
	}
}

func TestPartitionError(t *testing.T) {
	tests := []struct {
		err  *errors.PartitionError
		want string
	}{
		{&errors.PartitionError{Op: "fetch", Topic: "orders", Partition: 3, Offset: 100, LeaderEpoch: 5, Err: kerr.FencedLeaderEpoch},
			"fetch orders[3] offset 100 epoch 5: FENCED_LEADER_EPOCH: The leader epoch in the request is older than the epoch on the broker"},
		{&errors.PartitionError{Op: "lookup", Topic: "t", Partition: 0, Offset: -1, LeaderEpoch: -1, Err: errors.ErrClosed},
			"lookup t[0]: kepoch: closed"},
		{&errors.PartitionError{Op: "produce", Topic: "t", Partition: 1, Offset: -1, LeaderEpoch: 0, Err: nil},
			"produce t[1] epoch 0: <nil>"},
		{&errors.PartitionError{Op: "lookup", Topic: "t", Partition: -1, Offset: -1, LeaderEpoch: -1, Err: kerr.UnknownTopicOrPartition},
			"lookup t: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if errors.Unwrap(tt.err) != tt.err.Err {
			t.Errorf("Unwrap did not return Err")
		}
	}
	pe := &errors.PartitionError{Op: "fetch", Topic: "t", Partition: 0, Offset: 1, LeaderEpoch: 1, Err: kerr.NotLeaderForPartition}
	w := fmt.Errorf("x: %w", pe)
	if !errors.Is(w, errors.ErrNotLeader) || !errors.Is(w, kerr.NotLeaderForPartition) {
		t.Error("Is through PartitionError failed")
	}
	if ke, ok := errors.AsType[*kerr.Error](w); !ok || ke.Code != 6 {
		t.Error("As *kerr.Error through PartitionError failed")
	}
	if got, ok := errors.AsType[*errors.PartitionError](w); !ok || got != pe {
		t.Error("As *PartitionError failed")
	}
}

type classified bool

func (c classified) Error() string   { return "classified" }
func (c classified) Retriable() bool { return bool(c) }

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestIsRetriable(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	pe := func(err error) error {
		return &errors.PartitionError{Op: "fetch", Topic: "t", Partition: 0, Offset: 5, LeaderEpoch: 1, Err: err}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"deadline wrapped in an OpError", &net.OpError{Op: "dial", Err: context.DeadlineExceeded}, false},
		{"closed", errors.ErrClosed, false},
		{"log truncation sentinel", errors.ErrLogTruncation, false},
		{"log truncation", &errors.LogTruncationError{}, false},
		{"topic recreated", pe(errors.ErrTopicIDChanged), false},
		{"below log start", pe(errors.ErrOffsetBelowLogStart), false},
		{"unknown outcome", errors.ErrUnknownOutcome, false},
		{"corrupt batch", fmt.Errorf("decode: %w", errors.ErrCorruptBatch), false},
		{"invalid option", fmt.Errorf("consumer: option X: 0 is not positive: %w", errors.ErrInvalidOption), false},
		{"invalid argument over a retriable code", fmt.Errorf("%w: %w", errors.ErrInvalidArgument, errors.ErrNotLeader), false},
		{"leader unreachable", pe(fmt.Errorf("%w (for 10s)", errors.ErrLeaderUnreachable)), true},
		{"unknown leader epoch", errors.ErrUnknownLeaderEpoch, true},
		{"fenced leader epoch", pe(errors.ErrFencedLeaderEpoch), true},
		{"not leader", pe(errors.ErrNotLeader), true},
		{"leader not available", errors.ErrLeaderNotAvailable, true},
		{"unknown topic", errors.ErrUnknownTopicOrPartition, true},
		{"request timed out", errors.ErrRequestTimedOut, true},
		{"offset not available", errors.ErrOffsetNotAvailable, true},
		{"offset out of range", pe(errors.ErrOffsetOutOfRange), false},
		{"out of order sequence", errors.ErrOutOfOrderSequence, false},
		{"unknown producer id", errors.ErrUnknownProducerID, false},
		{"invalid producer epoch", errors.ErrInvalidProducerEpoch, false},
		{"producer fenced", errors.ErrProducerFenced, false},
		{"unknown server error", errors.ErrUnknownServerError, false},
		{"override: corrupt message", kerr.CorruptMessage, false},
		{"override: concurrent transactions", kerr.ConcurrentTransactions, true},
		{"override: election not needed", kerr.ElectionNotNeeded, false},
		{"unknown code", errors.FromCode(30000), false},
		{"EOF", io.EOF, true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"net closed", net.ErrClosed, true},
		{"connection reset", reset, true},
		{"dial refused", refused, true},
		{"deadline exceeded on I/O", os.ErrDeadlineExceeded, true},
		{"timeout net.Error", timeoutErr{}, true},
		{"Retriable() true", fmt.Errorf("w: %w", classified(true)), true},
		{"Retriable() false", classified(false), false},
		{"plain error", stderrors.New("boom"), false},
		{"join all retriable", errors.Join(errors.ErrNotLeader, io.EOF), true},
		{"join mixed", errors.Join(errors.ErrNotLeader, errors.ErrProducerFenced), false},
		{"join of nils", errors.Join(nil, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.IsRetriable(tt.err); got != tt.want {
				t.Fatalf("IsRetriable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestProduceNotApplied(t *testing.T) {
	pe := func(err error) error {
		return &errors.PartitionError{Op: "produce", Topic: "t", Partition: 0, Offset: -1, LeaderEpoch: 3, Err: err}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not sent", fmt.Errorf("produce: %w", errors.ErrNotSent), true},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset after write", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"EOF", io.EOF, false},
		{"context canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"not leader: appended, then leadership lost (KAFKA-13574)", pe(errors.ErrNotLeader), false},
		{"unknown topic", pe(errors.ErrUnknownTopicOrPartition), true},
		{"not enough replicas", pe(errors.ErrNotEnoughReplicas), true},
		{"not enough replicas after append", pe(errors.ErrNotEnoughReplicasAfter), false},
		{"request timed out", pe(errors.ErrRequestTimedOut), false},
		{"network exception", errors.ErrNetworkException, false},
		{"storage error", errors.ErrKafkaStorageError, false},
		{"out of order sequence", pe(errors.ErrOutOfOrderSequence), true},
		{"unknown producer id", errors.ErrUnknownProducerID, true},
		{"invalid producer epoch", errors.ErrInvalidProducerEpoch, true},
		{"producer fenced", errors.ErrProducerFenced, true},
		{"duplicate sequence means already written", errors.ErrDuplicateSequence, false},
		{"message too large", errors.ErrMessageTooLarge, true},
		{"corrupt message", errors.ErrCorruptMessage, true},
		{"unknown server error", errors.ErrUnknownServerError, false},
		{"unknown code", errors.FromCode(30000), false},
		{"unknown outcome", errors.ErrUnknownOutcome, false},
		{"plain error", stderrors.New("boom"), false},
		{"join all rejected", errors.Join(errors.ErrUnknownTopicOrPartition, errors.ErrNotSent), true},
		{"join mixed", errors.Join(errors.ErrUnknownTopicOrPartition, errors.ErrRequestTimedOut), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.ProduceNotApplied(tt.err); got != tt.want {
				t.Fatalf("ProduceNotApplied(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestForwarders(t *testing.T) {
	base := errors.New("base")
	w := fmt.Errorf("w: %w", base)
	if errors.Unwrap(w) != base || !errors.Is(w, base) {
		t.Fatal("Unwrap/Is")
	}
	j := errors.Join(base, io.EOF)
	if !errors.Is(j, io.EOF) {
		t.Fatal("Join")
	}
	var target *errors.PartitionError
	if errors.As(w, &target) {
		t.Fatal("As found a PartitionError that is not there")
	}
}
