package verify

import (
	"strings"
	"testing"

	"github.com/eventforge/eventforge/internal/kafkaread"
)

func rec(p int32, off int64, key, id string) kafkaread.Record {
	return kafkaread.Record{Partition: p, Offset: off, Key: key, Headers: map[string]string{"id": id}}
}

func TestCheckDeliveries(t *testing.T) {
	events := []outboxEvent{{id: "e1", key: "o1", typ: "OrderCreated"}, {id: "e2", key: "o1", typ: "OrderCancelled"}, {id: "e3", key: "o2", typ: "OrderCreated"}}
	tests := []struct {
		name       string
		records    []kafkaread.Record
		slotPassed bool
		want       Report
	}{
		{
			name:       "all once in order",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e2"), rec(1, 0, "o2", "e3")},
			slotPassed: true,
			want:       Report{Deliveries: 3},
		},
		{
			name:       "republished after a relay crash",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e1"), rec(0, 2, "o1", "e2"), rec(1, 0, "o2", "e3")},
			slotPassed: true,
			want:       Report{Deliveries: 4, DuplicateDeliveries: 1},
		},
		{
			name:       "missing while the slot confirmed past it",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e2")},
			slotPassed: true,
			want:       Report{Deliveries: 2, Lost: 1},
		},
		{
			name:       "missing while the slot is behind",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e2")},
			slotPassed: false,
			want:       Report{Deliveries: 2, Unpublished: 1},
		},
		{
			name:       "cancel before create",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e2"), rec(0, 1, "o1", "e1"), rec(1, 0, "o2", "e3")},
			slotPassed: true,
			want:       Report{Deliveries: 3, OrderingViolations: 1},
		},
		{
			name:       "one order in two partitions",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(2, 0, "o1", "e2"), rec(1, 0, "o2", "e3")},
			slotPassed: true,
			want:       Report{Deliveries: 3, OrderingViolations: 1},
		},
		{
			name:       "late replay of an old event after a newer one is not a violation",
			records:    []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e2"), rec(0, 2, "o1", "e1"), rec(1, 0, "o2", "e3")},
			slotPassed: true,
			want:       Report{Deliveries: 4, DuplicateDeliveries: 1},
		},
	}
	a := &auditor{cfg: DefaultConfig()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			a.checkDeliveries(&r, events, tt.records, tt.slotPassed)
			if r.Deliveries != tt.want.Deliveries || r.DuplicateDeliveries != tt.want.DuplicateDeliveries || r.Lost != tt.want.Lost ||
				r.Unpublished != tt.want.Unpublished || r.OrderingViolations != tt.want.OrderingViolations {
				t.Fatalf("got %+v, want %+v", r, tt.want)
			}
			if (tt.want.Lost+tt.want.OrderingViolations > 0) != (len(r.Violations) > 0) {
				t.Fatalf("violations %v do not match the counters", r.Violations)
			}
		})
	}
}

func TestCheckConsumer(t *testing.T) {
	records := []kafkaread.Record{rec(0, 0, "o1", "e1"), rec(0, 1, "o1", "e2"), rec(1, 0, "o2", "e3"), rec(1, 1, "o3", "e4")}
	tests := []struct {
		name        string
		committed   map[int32]int64
		marks, dead map[string]bool
		lost, pend  int
	}{
		{name: "caught up", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e2": true, "e3": true, "e4": true}},
		{name: "in flight", committed: map[int32]int64{0: 1}, marks: map[string]bool{"e1": true}, pend: 3},
		{name: "applied before the offset commit", committed: map[int32]int64{0: 1}, marks: map[string]bool{"e1": true, "e2": true}, pend: 2},
		{name: "offset passed an unapplied event", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, lost: 1},
		{name: "dead-lettered is not lost", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, dead: map[string]bool{"e2": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Report{Pending: map[string]int{}, DeadLettered: map[string]int{}}
			checkConsumer(&r, "fulfillment", records, tt.committed, tt.marks, tt.dead)
			if r.Lost != tt.lost || r.Pending["fulfillment"] != tt.pend {
				t.Fatalf("lost %d pending %d, want %d %d (%v)", r.Lost, r.Pending["fulfillment"], tt.lost, tt.pend, r.Violations)
			}
			if tt.lost > 0 && !strings.Contains(strings.Join(r.Violations, "\n"), "e2") {
				t.Fatalf("violation does not name the event: %v", r.Violations)
			}
		})
	}
}

func TestReportOK(t *testing.T) {
	if !(&Report{Unpublished: 3, Pending: map[string]int{"x": 2}}).OK() {
		t.Fatal("in-flight work is not a violation")
	}
	for _, r := range []Report{{Lost: 1}, {DuplicateEffects: 1}, {MarksWithoutEffect: 1}, {EffectsWithoutMark: 1}, {OrderingViolations: 1}} {
		if r.OK() {
			t.Fatalf("%+v reported OK", r)
		}
	}
}
