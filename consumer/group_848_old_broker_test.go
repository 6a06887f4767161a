package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kepoch/kepoch/consumer"
	"github.com/kepoch/kepoch/errors"
)

// TestGroupConsumerProtocolUnsupported: with ProtocolConsumer against
// brokers that do not know ConsumerGroupHeartbeat (Kafka before 4.0), the
// membership ends with a GroupError carrying UNSUPPORTED_VERSION, as the
// KIP-848 loop documents. kgo refuses such a request itself (the broker
// never answers UNSUPPORTED_VERSION for an API it does not list), and the
// member retried it forever: Poll returned nothing and no error.
func TestGroupConsumerProtocolUnsupported(t *testing.T) {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.ConsumerGroupHeartbeat), -1)
	c := newClusterWith(t, 1, kfake.MaxVersions(v))
	cons := newConsumer(t, c, append(groupOpts("old-broker"), consumer.WithGroupProtocol(consumer.ProtocolConsumer))...)
	if err := cons.Subscribe(topic); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		f, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("no group error before %v", err)
		}
		for _, err := range f.Errors {
			var ge *consumer.GroupError
			if errors.As(err, &ge) && errors.Is(err, kerr.UnsupportedVersion) {
				return
			}
			t.Logf("error %v", err)
		}
	}
}
