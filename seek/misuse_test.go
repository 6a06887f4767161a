package seek

import (
	"strings"
	"testing"

	"github.com/kepoch/kepoch/errors"
)

// TestOptionsValidated: every Config field Validate refuses gives an error
// matching errors.ErrInvalidOption that names the field and its value.
func TestOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		set        func(*Config)
	}{
		{"Policy", "0", func(c *Config) { c.Policy = 0 }},
		{"Policy", "9", func(c *Config) { c.Policy = 9 }},
		{"RetryTicks", "0", func(c *Config) { c.RetryTicks = 0 }},
		{"MaxEpochWaits", "-2", func(c *Config) { c.MaxEpochWaits = -2 }},
		{"LineageSize", "1", func(c *Config) { c.LineageSize = 1 }},
	} {
		cfg := DefaultConfig()
		tc.set(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, errors.ErrInvalidOption) {
			t.Errorf("%s %s: Validate = %v; want ErrInvalidOption", tc.name, tc.want, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "option "+tc.name+": "+tc.want+" ") {
			t.Errorf("%s %s: %q does not name the option and its value", tc.name, tc.want, msg)
		}
		if _, err := NewPartition(cfg); !errors.Is(err, errors.ErrInvalidOption) {
			t.Errorf("%s %s: NewPartition = %v; want ErrInvalidOption", tc.name, tc.want, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig refused: %v", err)
	}
}

// TestMisuseTyped: EpochHistoryOf's refused arguments and UnmarshalBinary
// into a nil history match errors.ErrInvalidArgument as well as their own
// sentinels, and name the refused value; a corrupt encoding is not an
// invalid argument.
func TestMisuseTyped(t *testing.T) {
	for _, tc := range []struct {
		entries []EpochEntry
		end     int64
		want    string
	}{
		{[]EpochEntry{{-1, 0}}, 5, "(epoch -1, offset 0)"},
		{[]EpochEntry{{1, -4}}, 5, "(epoch 1, offset -4)"},
		{[]EpochEntry{{2, 0}, {2, 3}}, 5, "(epoch 2, offset 3)"},
		{[]EpochEntry{{1, 0}, {2, 3}}, 3, "end 3"},
	} {
		_, err := EpochHistoryOf(tc.entries, tc.end, 0)
		if !errors.Is(err, errors.ErrInvalidArgument) || !errors.Is(err, ErrCorruptHistory) {
			t.Errorf("EpochHistoryOf(%v, %d) = %v; want ErrInvalidArgument and ErrCorruptHistory", tc.entries, tc.end, err)
			continue
		}
		if _, ok := errors.AsType[*HistoryError](err); !ok {
			t.Errorf("EpochHistoryOf(%v, %d) = %T; want a *HistoryError", tc.entries, tc.end, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EpochHistoryOf(%v, %d) = %q; want it to name %s", tc.entries, tc.end, err, tc.want)
		}
	}
	var nilH *EpochHistory
	if err := nilH.UnmarshalBinary(nil); !errors.Is(err, ErrNilHistory) || !errors.Is(err, errors.ErrInvalidArgument) {
		t.Errorf("nil.UnmarshalBinary = %v; want ErrNilHistory and ErrInvalidArgument", err)
	}
	if err := NewEpochHistory(0).UnmarshalBinary([]byte("bad")); !errors.Is(err, ErrCorruptHistory) || errors.Is(err, errors.ErrInvalidArgument) {
		t.Errorf("UnmarshalBinary(garbage) = %v; want ErrCorruptHistory and not ErrInvalidArgument", err)
	}
}
