package verify

import (
	"testing"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

func TestRelayDuplicates(t *testing.T) {
	rec := func(id string, replay bool) kafkaread.Record {
		h := map[string]string{contract.HeaderID: id}
		if replay {
			h[dlq.HeaderReplaySource] = "t.dlq/0/1"
		}
		return kafkaread.Record{Headers: h}
	}
	relay, replays := relayDuplicates([]kafkaread.Record{
		rec("a", false), rec("a", false), // the relay published a twice
		rec("b", false), rec("b", true), // b replayed from the DLQ
		rec("c", false),
	})
	if relay != 1 || replays != 1 {
		t.Fatalf("relayDuplicates = %d relay, %d replays; want 1 and 1", relay, replays)
	}
}
