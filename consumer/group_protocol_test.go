package consumer

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// unhex turns spaced hex into bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func strp(s string) *string { return &s }

// The expected bytes below are written by hand from the ConsumerProtocol
// schema (ConsumerProtocolSubscription / ConsumerProtocolAssignment, not
// flexible, big endian), field by field.
var subscriptionCases = []struct {
	name string
	sub  groupSubscription
	hex  string
}{
	{
		name: "v0 one topic, null user data",
		sub:  groupSubscription{Version: 0, Topics: []string{"t"}, Generation: -1},
		hex: `0000                 version 0
		      00000001 0001 74   topics ["t"]
		      ffffffff           user data null`,
	},
	{
		name: "v1 owned partitions",
		sub: groupSubscription{Version: 1, Topics: []string{"ab"}, UserData: []byte{}, Generation: -1,
			Owned: []topicParts{{Topic: "ab", Partitions: []int32{1}}}},
		hex: `0001
		      00000001 0002 6162
		      00000000                         user data, empty
		      00000001 0002 6162 00000001 00000001   owned [ab [1]]`,
	},
	{
		name: "v3 cooperative-sticky with generation and rack",
		sub: groupSubscription{Version: 3, Topics: []string{"a", "bc"}, UserData: encodeStickyGeneration(5),
			Owned: []topicParts{{Topic: "a", Partitions: []int32{0, 2}}}, Generation: 5, Rack: strp("r1")},
		hex: `0003
		      00000002 0001 61 0002 6263                     topics [a bc]
		      00000004 00000005                              user data: generation 5
		      00000001 0001 61 00000002 00000000 00000002    owned [a [0 2]]
		      00000005                                       generation 5
		      0002 7231                                      rack "r1"`,
	},
	{
		name: "v3 no rack, no generation",
		sub:  groupSubscription{Version: 3, Topics: []string{"x"}, Generation: -1},
		hex: `0003 00000001 0001 78 ffffffff
		      00000000     owned []
		      ffffffff     generation -1
		      ffff         rack null`,
	},
}

func stripComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		var keep []string
		for _, f := range strings.Fields(line) {
			if _, err := hex.DecodeString(f); err != nil || len(f)%2 != 0 {
				break
			}
			keep = append(keep, f)
		}
		out = append(out, strings.Join(keep, ""))
	}
	return strings.Join(out, "")
}

func TestSubscriptionKnownBytes(t *testing.T) {
	for _, tc := range subscriptionCases {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, stripComments(tc.hex))
			got := tc.sub.encode(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("encode:\n got %x\nwant %x", got, want)
			}
			// franz-go's kmsg encoder writes the same bytes (it follows
			// the Java schema).
			k := kmsg.NewConsumerMemberMetadata()
			k.Version, k.Topics, k.UserData, k.Generation, k.Rack = tc.sub.Version, tc.sub.Topics, tc.sub.UserData, tc.sub.Generation, tc.sub.Rack
			for _, o := range tc.sub.Owned {
				k.OwnedPartitions = append(k.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: o.Topic, Partitions: o.Partitions})
			}
			if kb := k.AppendTo(nil); !bytes.Equal(kb, want) {
				t.Fatalf("kmsg encodes\n %x\nwant %x", kb, want)
			}
			dec, err := decodeSubscription(want, "m")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(dec, tc.sub) {
				t.Fatalf("decode: %+v\nwant %+v", dec, tc.sub)
			}
		})
	}
}

func TestAssignmentKnownBytes(t *testing.T) {
	a := groupAssignment{Version: 3, Topics: []topicParts{{Topic: "a", Partitions: []int32{1}}, {Topic: "b", Partitions: []int32{0, 3}}}}
	want := unhex(t, stripComments(`0003
		00000002
		0001 61 00000001 00000001              a [1]
		0001 62 00000002 00000000 00000003     b [0 3]
		ffffffff                               user data null`))
	if got := a.encode(nil); !bytes.Equal(got, want) {
		t.Fatalf("encode:\n got %x\nwant %x", got, want)
	}
	k := kmsg.NewConsumerMemberAssignment()
	k.Version = 3
	k.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "a", Partitions: []int32{1}}, {Topic: "b", Partitions: []int32{0, 3}}}
	if kb := k.AppendTo(nil); !bytes.Equal(kb, want) {
		t.Fatalf("kmsg encodes\n %x\nwant %x", kb, want)
	}
	dec, err := decodeAssignment(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, a) {
		t.Fatalf("decode %+v", dec)
	}
	// The coordinator sends empty bytes to a member the leader left out.
	if dec, err := decodeAssignment(nil); err != nil || len(dec.Topics) != 0 {
		t.Fatalf("empty assignment: %+v %v", dec, err)
	}
}

// A newer version is read as version 3 with its trailing fields ignored,
// as the Java client does.
func TestNewerVersionsReadAsLatest(t *testing.T) {
	sub := groupSubscription{Version: 3, Topics: []string{"t"}, Generation: 7, Rack: strp("r")}
	b := sub.encode(nil)
	b[1] = 9                                 // version 9
	b = append(b, 0xde, 0xad, 0xbe, 0xef, 1) // fields version 9 added
	dec, err := decodeSubscription(b, "m")
	if err != nil {
		t.Fatal(err)
	}
	if dec.Version != 9 || dec.Generation != 7 || *dec.Rack != "r" || dec.Topics[0] != "t" {
		t.Fatalf("decoded %+v", dec)
	}
	a := groupAssignment{Version: 5, Topics: []topicParts{{Topic: "t", Partitions: []int32{2}}}}
	ab := append(a.encode(nil), 0, 0, 0, 0)
	if dec, err := decodeAssignment(ab); err != nil || dec.Topics[0].Partitions[0] != 2 {
		t.Fatalf("assignment v5: %+v %v", dec, err)
	}
}

// Every truncation of valid data, and hostile lengths, give a typed error,
// never a panic or a huge allocation.
func TestMalformedGroupData(t *testing.T) {
	full := subscriptionCases[2].sub.encode(nil)
	for n := 0; n < len(full); n++ {
		_, err := decodeSubscription(full[:n], "m-1")
		var ge *GroupDataError
		if !errors.As(err, &ge) || !errors.Is(err, ErrMalformedGroupData) || ge.Member != "m-1" {
			t.Fatalf("subscription cut at %d: %v", n, err)
		}
	}
	as := groupAssignment{Version: 1, Topics: []topicParts{{Topic: "a", Partitions: []int32{1, 2}}}}
	afull := as.encode(nil)
	for n := 1; n < len(afull); n++ {
		if _, err := decodeAssignment(afull[:n]); !errors.Is(err, ErrMalformedGroupData) {
			t.Fatalf("assignment cut at %d: %v", n, err)
		}
	}
	for name, b := range map[string]string{
		"negative version":   "ffff 00000000 ffffffff",
		"negative array":     "0000 fffffffe ffffffff",
		"huge array":         "0000 7fffffff 0001 61",
		"negative string":    "0000 00000001 fffe",
		"negative partition": "0000 00000001 0001 61 00000001 ffffffff ffffffff",
		"duplicate":          "0000 00000001 0001 61 00000002 00000001 00000001 ffffffff",
		"empty topic":        "0000 00000001 0000 00000001 00000001 ffffffff",
	} {
		if _, err := decodeAssignment(unhex(t, b)); !errors.Is(err, ErrMalformedGroupData) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := decodeSubscription(unhex(t, "0000 7fffffff"), ""); !errors.Is(err, ErrMalformedGroupData) {
		t.Errorf("huge topic array: %v", err)
	}
}

func TestStickyGeneration(t *testing.T) {
	for _, tc := range []struct {
		sub  groupSubscription
		want int32
	}{
		{groupSubscription{Version: 3, Generation: 4, UserData: encodeStickyGeneration(2)}, 4},
		{groupSubscription{Version: 1, Generation: -1, UserData: encodeStickyGeneration(2)}, 2},
		{groupSubscription{Version: 3, Generation: -1, UserData: encodeStickyGeneration(2)}, 2},
		{groupSubscription{Version: 0, Generation: -1}, -1},
		{groupSubscription{Version: 0, Generation: -1, UserData: []byte{1}}, -1},
	} {
		if got := stickyGeneration(&tc.sub); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.sub, got, tc.want)
		}
	}
}

func FuzzDecodeGroupData(f *testing.F) {
	for _, tc := range subscriptionCases {
		f.Add(tc.sub.encode(nil))
	}
	a := groupAssignment{Version: 3, Topics: []topicParts{{Topic: "a", Partitions: []int32{1}}}}
	f.Add(a.encode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := decodeSubscription(b, ""); err == nil {
			// Re-encoding at the version read (at most 3) decodes to
			// the same subscription.
			s.Version = min(s.Version, 3)
			again, err := decodeSubscription(s.encode(nil), "")
			if err != nil || !reflect.DeepEqual(normalizeSub(again), normalizeSub(s)) {
				t.Fatalf("round trip %+v → %+v (%v)", s, again, err)
			}
		}
		if a, err := decodeAssignment(b); err == nil && len(b) > 0 {
			again, err := decodeAssignment(a.encode(nil))
			if err != nil || !reflect.DeepEqual(setOf(again.Topics), setOf(a.Topics)) {
				t.Fatalf("round trip %+v → %+v (%v)", a, again, err)
			}
		}
	})
}

func normalizeSub(s groupSubscription) groupSubscription {
	if len(s.Topics) == 0 {
		s.Topics = nil
	}
	if len(s.Owned) == 0 {
		s.Owned = nil
	}
	for i := range s.Owned {
		if len(s.Owned[i].Partitions) == 0 {
			s.Owned[i].Partitions = []int32{}
		}
	}
	return s
}
