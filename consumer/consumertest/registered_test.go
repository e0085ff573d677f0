package consumertest_test

import (
	"testing"

	"github.com/eventforge/eventforge/consumer/consumertest"
	"github.com/eventforge/eventforge/consumer/registry"
)

// TestRegisteredConsumers runs the handler contract suite for every
// registered consumer.
func TestRegisteredConsumers(t *testing.T) {
	for _, c := range registry.All() {
		t.Run(c.Name, func(t *testing.T) {
			consumertest.Run(t, c.Name, c.Handler)
		})
	}
}
