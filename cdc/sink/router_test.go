package sink

import (
	"testing"

	"github.com/eventforge/eventforge/contract"
)

func TestRouter(t *testing.T) {
	r := Router{Topics: map[string]string{contract.AggregateOrder: contract.Topic}, Fallback: "eventforge.{aggregatetype}"}
	if got := r.Topic("order"); got != contract.Topic {
		t.Errorf("order → %q", got)
	}
	if got := r.Topic("payment"); got != "eventforge.payment" {
		t.Errorf("payment → %q", got)
	}
}
