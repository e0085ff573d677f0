package verify

import (
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

func rec(p int32, off int64, key, id string) kafkaread.Record {
	return kafkaread.Record{Partition: p, Offset: off, Key: key, Headers: map[string]string{contract.HeaderID: id}}
}

// typed is rec with the event type header.
func typed(p int32, off int64, key, id, typ string) kafkaread.Record {
	r := rec(p, off, key, id)
	r.Headers[contract.HeaderType] = typ
	return r
}

func TestCheckDeliveries(t *testing.T) {
	events := []outboxEvent{{id: "e1", key: "o1", typ: contract.TypeOrderCreated}, {id: "e2", key: "o1", typ: contract.TypeOrderCancelled}, {id: "e3", key: "o2", typ: contract.TypeOrderCreated}}
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
			a.checkDeliveries(&r, events, tt.records, tt.slotPassed, nil)
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
		purged      map[string]bool
		lost, pend  int
	}{
		{name: "caught up", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e2": true, "e3": true, "e4": true}},
		{name: "in flight", committed: map[int32]int64{0: 1}, marks: map[string]bool{"e1": true}, pend: 3},
		{name: "applied before the offset commit", committed: map[int32]int64{0: 1}, marks: map[string]bool{"e1": true, "e2": true}, pend: 2},
		{name: "offset passed an unapplied event", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, lost: 1},
		{name: "dead-lettered is not lost", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, dead: map[string]bool{"e2": true}},
		{name: "purged from the DLQ is not lost", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, purged: map[string]bool{"e2": true}},
		{name: "purged for another consumer is lost", committed: map[int32]int64{0: 2, 1: 2}, marks: map[string]bool{"e1": true, "e3": true, "e4": true}, purged: map[string]bool{"e9": true}, lost: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Report{Pending: map[string]int{}, DeadLettered: map[string]int{}, Purged: map[string]int{}}
			checkConsumer(&r, "fulfillment", records, tt.committed, tt.marks, tt.dead, tt.purged)
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
	if r := (&Report{Unpublished: 3, Pending: map[string]int{"x": 2}, Drained: true}); !r.OK() || len(r.Failures()) != 0 {
		t.Fatalf("in-flight work is not a violation: %v", r.Failures())
	}
	for _, r := range []Report{{Lost: 1}, {DuplicateEffects: 1}, {MarksWithoutEffect: 1}, {EffectsWithoutMark: 1}, {OrderingViolations: 1}} {
		r.Drained = true
		if r.OK() || r.ContractKept() || len(r.Failures()) != 1 {
			t.Fatalf("%+v reported OK (failures %v)", r, r.Failures())
		}
	}
	for _, r := range []Report{{UnpublishedPastGrace: 1, Unpublished: 1, Drained: true}, {Drained: false}, {RelayDeadLettered: 1, Drained: true}} {
		if r.OK() || !r.ContractKept() || len(r.Failures()) != 1 {
			t.Fatalf("%+v: OK %v, contract kept %v, failures %v; want a failure that is no contract violation", r, r.OK(), r.ContractKept(), r.Failures())
		}
	}
}

func TestCheckDeliveriesGraceAndPrunedOutbox(t *testing.T) {
	created, cancelled := contract.TypeOrderCreated, contract.TypeOrderCancelled
	tests := []struct {
		name       string
		events     []outboxEvent
		records    []kafkaread.Record
		slotPassed bool
		want       Report
		mention    string
	}{
		{
			name:    "unpublished within the grace",
			events:  []outboxEvent{{id: "e1", key: "o1", typ: created, age: 59 * time.Second}},
			want:    Report{Unpublished: 1},
			mention: "",
		},
		{
			name:    "unpublished beyond the grace",
			events:  []outboxEvent{{id: "e1", key: "o1", typ: created, age: 61 * time.Second}, {id: "e2", key: "o2", typ: created, age: time.Second}},
			want:    Report{Unpublished: 2, UnpublishedPastGrace: 1},
			mention: "e1",
		},
		{
			name:       "old and missing once the slot confirmed past it is lost, not unpublished",
			events:     []outboxEvent{{id: "e1", key: "o1", typ: created, age: time.Hour}},
			slotPassed: true,
			want:       Report{Lost: 1},
			mention:    "e1",
		},
		{
			name:       "outbox pruned, records in order",
			records:    []kafkaread.Record{typed(0, 0, "o1", "e1", created), typed(0, 1, "o1", "e2", cancelled), typed(0, 2, "o1", "e1", created)},
			slotPassed: true,
			want:       Report{Deliveries: 3, DuplicateDeliveries: 1},
		},
		{
			name:       "outbox pruned, cancel before create in one partition",
			records:    []kafkaread.Record{typed(3, 0, "o1", "e2", cancelled), typed(3, 1, "o1", "e1", created)},
			slotPassed: true,
			want:       Report{Deliveries: 2, OrderingViolations: 1},
			mention:    "e2",
		},
		{
			name:       "cancel before create, only the cancel still in the outbox",
			events:     []outboxEvent{{id: "e2", key: "o1", typ: cancelled}},
			records:    []kafkaread.Record{typed(3, 0, "o1", "e2", cancelled), typed(3, 1, "o1", "e1", created)},
			slotPassed: true,
			want:       Report{Deliveries: 2, OrderingViolations: 1},
			mention:    "e2",
		},
		{
			name:       "cancel before create, both in the outbox, is reported once",
			events:     []outboxEvent{{id: "e1", key: "o1", typ: created}, {id: "e2", key: "o1", typ: cancelled}},
			records:    []kafkaread.Record{typed(3, 0, "o1", "e2", cancelled), typed(3, 1, "o1", "e1", created)},
			slotPassed: true,
			want:       Report{Deliveries: 2, OrderingViolations: 1},
			mention:    "e1",
		},
	}
	a := &auditor{cfg: DefaultConfig()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Report
			a.checkDeliveries(&r, tt.events, tt.records, tt.slotPassed, nil)
			if r.Deliveries != tt.want.Deliveries || r.DuplicateDeliveries != tt.want.DuplicateDeliveries || r.Lost != tt.want.Lost ||
				r.Unpublished != tt.want.Unpublished || r.UnpublishedPastGrace != tt.want.UnpublishedPastGrace || r.OrderingViolations != tt.want.OrderingViolations {
				t.Fatalf("got %+v, want %+v", r, tt.want)
			}
			all := strings.Join(r.Violations, "\n")
			if (tt.mention == "") != (len(r.Violations) == 0) || !strings.Contains(all, tt.mention) {
				t.Fatalf("violations %q, want one naming %q", r.Violations, tt.mention)
			}
		})
	}
}

func TestDefaultConsumersAreEveryConsumer(t *testing.T) {
	got := DefaultConsumers()
	want := registry.DefaultGroups()
	if want["fulfillment"] != "eventforge-fulfillment" || want["ledger"] != "eventforge-ledger" {
		t.Fatalf("registry groups %v lack fulfillment or ledger with their default groups", want)
	}
	if len(got) != len(want) {
		t.Fatalf("default consumers %v, want %v", got, want)
	}
	for name, group := range want {
		if got[name] != group {
			t.Fatalf("default consumers %v, want %v", got, want)
		}
		if _, err := registry.Handler(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := DefaultConfig().withDefaults().Validate(); err != nil {
		t.Fatalf("every consumer must have an effect check: %v", err)
	}
	if cfg := (Config{}).withDefaults(); len(cfg.Consumers) != len(want) {
		t.Fatalf("an empty --consumer audits %v, want every consumer", cfg.Consumers)
	}
}
