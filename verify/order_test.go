package verify

import (
	"testing"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

func TestOrderCounts(t *testing.T) {
	dlq := func(key, id, consumer string) kafkaread.Record {
		return kafkaread.Record{Key: key, Headers: map[string]string{contract.HeaderID: id, "dlq.consumer": consumer}}
	}
	tests := []struct {
		name       string
		records    []kafkaread.Record
		dead       []kafkaread.Record
		committed  map[int32]int64
		deliveries int
		dups       int
		dlq        int
		passed     bool
	}{
		{name: "one delivery, committed", records: []kafkaread.Record{rec(2, 4, "o1", "e1"), rec(2, 5, "o2", "e2")}, committed: map[int32]int64{2: 5}, deliveries: 1, passed: true},
		{name: "one delivery, offset not committed", records: []kafkaread.Record{rec(2, 4, "o1", "e1")}, committed: map[int32]int64{2: 4}, deliveries: 1},
		{name: "republished, committed past both", records: []kafkaread.Record{rec(2, 4, "o1", "e1"), rec(2, 7, "o1", "e1")}, committed: map[int32]int64{2: 8}, deliveries: 2, dups: 1, passed: true},
		{name: "republished, committed past the first only", records: []kafkaread.Record{rec(2, 4, "o1", "e1"), rec(2, 7, "o1", "e1")}, committed: map[int32]int64{2: 5}, deliveries: 2, dups: 1},
		{name: "dead-lettered", records: []kafkaread.Record{rec(1, 0, "o1", "e1")}, dead: []kafkaread.Record{dlq("o1", "e1", "fulfillment"), dlq("o2", "e9", "fulfillment")}, committed: map[int32]int64{1: 1}, deliveries: 1, dlq: 1, passed: true},
		{name: "not in kafka yet", records: []kafkaread.Record{rec(1, 0, "o2", "e2")}, committed: map[int32]int64{1: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := orderCounts("o1", 1, tt.records, tt.dead, map[string]map[int32]int64{"fulfillment": tt.committed})
			if r.Deliveries != tt.deliveries || r.DuplicateDeliveries != tt.dups || r.DeadLettered["fulfillment"] != tt.dlq || r.Committed["fulfillment"] != tt.passed {
				t.Fatalf("got deliveries %d dups %d dlq %d committed %v; want %d %d %d %v",
					r.Deliveries, r.DuplicateDeliveries, r.DeadLettered["fulfillment"], r.Committed["fulfillment"], tt.deliveries, tt.dups, tt.dlq, tt.passed)
			}
			if r.LogicalEvents != 1 || len(r.Records) != tt.deliveries {
				t.Fatalf("logical %d records %v", r.LogicalEvents, r.Records)
			}
		})
	}
}
