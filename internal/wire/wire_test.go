package wire

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kepoch/kepoch/errors"
)

// answerer answers every request with the response its function builds
// from the request.
type answerer func(kmsg.Request) kmsg.Response

func (a answerer) Request(_ context.Context, r kmsg.Request) (kmsg.Response, error) {
	return a(r), nil
}

// shape is an answer's entries: topic name and partition numbers.
type shape struct {
	topic string
	id    [16]byte
	parts []int32
}

var (
	id1 = [16]byte{1}
	id2 = [16]byte{2}
)

// wrongShapes are answers to a question about t/0 (topic ID id1) that do
// not hold exactly that partition.
var wrongShapes = map[string][]shape{
	"other partition":      {{topic: "t", id: id1, parts: []int32{1}}},
	"other topic":          {{topic: "u", id: id2, parts: []int32{0}}},
	"extra partition":      {{topic: "t", id: id1, parts: []int32{0, 1}}},
	"same partition twice": {{topic: "t", id: id1, parts: []int32{0, 0}}},
	"extra topic":          {{topic: "t", id: id1, parts: []int32{0}}, {topic: "u", id: id2, parts: []int32{0}}},
	"nothing":              nil,
}

var rightShape = []shape{{topic: "t", id: id1, parts: []int32{0}}}

// Each helper returns the asked partition's entry of an answer holding
// exactly it, and refuses as malformed any other answer (it returned the
// single entry of an answer about another partition or topic as the asked
// one's).
func TestAnswerMustBeThePartitionAsked(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(answer []shape) (int64, error){
		"ListOffsets": func(answer []shape) (int64, error) {
			br := answerer(func(r kmsg.Request) kmsg.Response {
				resp := r.(*kmsg.ListOffsetsRequest).ResponseKind().(*kmsg.ListOffsetsResponse)
				for _, s := range answer {
					st := kmsg.NewListOffsetsResponseTopic()
					st.Topic = s.topic
					for _, p := range s.parts {
						sp := kmsg.NewListOffsetsResponseTopicPartition()
						sp.Partition, sp.Offset = p, 7
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp
			})
			r, err := ListOffset(ctx, br, "t", 0, -1, -2)
			return r.Offset, err
		},
		"OffsetForLeaderEpoch": func(answer []shape) (int64, error) {
			br := answerer(func(r kmsg.Request) kmsg.Response {
				resp := r.(*kmsg.OffsetForLeaderEpochRequest).ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
				for _, s := range answer {
					st := kmsg.NewOffsetForLeaderEpochResponseTopic()
					st.Topic = s.topic
					for _, p := range s.parts {
						sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
						sp.Partition, sp.EndOffset = p, 7
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp
			})
			r, err := OffsetForLeaderEpoch(ctx, br, "t", 0, -1, 3)
			return r.EndOffset, err
		},
		"Produce": func(answer []shape) (int64, error) {
			br := answerer(func(r kmsg.Request) kmsg.Response {
				resp := r.(*kmsg.ProduceRequest).ResponseKind().(*kmsg.ProduceResponse)
				resp.Version = 13
				for _, s := range answer {
					st := kmsg.NewProduceResponseTopic()
					st.TopicID = s.id // v13+: by ID, no name
					for _, p := range s.parts {
						sp := kmsg.NewProduceResponseTopicPartition()
						sp.Partition, sp.BaseOffset = p, 7
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp
			})
			r, err := Produce(ctx, br, "t", id1, 0, nil, 0)
			return r.BaseOffset, err
		},
		"Fetch": func(answer []shape) (int64, error) {
			resp := kmsg.NewPtrFetchResponse()
			for _, s := range answer {
				st := kmsg.NewFetchResponseTopic()
				st.TopicID = s.id
				for _, p := range s.parts {
					sp := kmsg.NewFetchResponseTopicPartition()
					sp.Partition, sp.HighWatermark = p, 7
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			r, err := FetchAnswer(resp, "t", id1, 0)
			if err != nil {
				return 0, err
			}
			return r.HighWatermark, nil
		},
	}
	for api, call := range calls {
		if got, err := call(rightShape); err != nil || got != 7 {
			t.Errorf("%s, the partition asked: %d, %v", api, got, err)
		}
		for name, answer := range wrongShapes {
			if got, err := call(answer); !errors.Is(err, ErrMalformedAnswer) {
				t.Errorf("%s, %s: %d, %v; want ErrMalformedAnswer", api, name, got, err)
			}
		}
	}
}

// A Fetch or Produce answer naming the topic by name (versions before
// topic IDs, or a request without one) is matched by name.
func TestAnswerTopicByName(t *testing.T) {
	resp := kmsg.NewPtrFetchResponse()
	st := kmsg.NewFetchResponseTopic()
	st.Topic = "t"
	sp := kmsg.NewFetchResponseTopicPartition()
	st.Partitions = append(st.Partitions, sp)
	resp.Topics = append(resp.Topics, st)
	if _, err := FetchAnswer(resp, "t", id1, 0); err != nil {
		t.Fatalf("by name: %v", err)
	}
	if _, err := FetchAnswer(resp, "u", [16]byte{}, 0); !errors.Is(err, ErrMalformedAnswer) {
		t.Fatalf("another name: %v; want ErrMalformedAnswer", err)
	}
}
