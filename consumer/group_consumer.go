package consumer

import (
	"context"

	"github.com/kepoch/kepoch/errors"
)

// runConsumer runs the KIP-848 protocol (not yet implemented).
func (g *group) runConsumer() {
	g.fatal("heartbeat", errors.New("kepoch: the consumer group protocol is not implemented yet"))
}

func (g *group) leaveConsumer(ctx context.Context) {}
