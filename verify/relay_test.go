package verify

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// deadLetter is a row of the relay's dead-letter table for the audited
// slot; replayed sets replayed_at.
func deadLetter(id, order, typ, lsn string, replayed bool) deadletter.Row {
	d := deadletter.Row{EventID: id, Slot: DefaultConfig().Slot, LSN: lsn, Topic: DefaultConfig().Topic, AggregateID: order, Type: typ,
		ErrorCode: "MSG_SIZE_TOO_LARGE", Attempts: 2, DeadLetteredAt: time.Date(2025, 5, 1, 10, 0, 0, 0, time.UTC)}
	if replayed {
		at := d.DeadLetteredAt.Add(time.Hour)
		d.ReplayedAt = &at
	}
	return d
}

func TestCheckDeliveriesRelayDeadLetters(t *testing.T) {
	created, cancelled := contract.TypeOrderCreated, contract.TypeOrderCancelled
	o1 := []outboxEvent{{id: "e1", key: "o1", typ: created, age: time.Hour}, {id: "e2", key: "o1", typ: cancelled, age: time.Hour}}
	tests := []struct {
		name       string
		events     []outboxEvent
		records    []kafkaread.Record
		relay      relayDeadLetters
		slotPassed bool
		want       Report
		mention    []string
	}{
		{
			name:       "dead-lettered, slot past it: neither lost nor unpublished",
			events:     o1,
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", false)},
			slotPassed: true,
			want:       Report{Deliveries: 1, RelayDeadLettered: 1},
			mention:    []string{"dead-lettered by the relay: event e1 (OrderCreated of order o1)", "MSG_SIZE_TOO_LARGE", ReplayDeadLettersCommand},
		},
		{
			name:    "dead-lettered before the slot confirmed past it: not unpublished beyond the grace",
			events:  o1,
			records: []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled)},
			relay:   relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", false)},
			want:    Report{Deliveries: 1, RelayDeadLettered: 1},
			mention: []string{"event e1", ReplayDeadLettersCommand},
		},
		{
			name:       "dead-lettered, outbox row pruned: still reported",
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", false)},
			slotPassed: true,
			want:       Report{Deliveries: 1, RelayDeadLettered: 1},
			mention:    []string{"event e1"},
		},
		{
			name:       "several, reported in WAL order",
			events:     []outboxEvent{{id: "e1", key: "o1", typ: created}, {id: "e3", key: "o2", typ: created}},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/100", false), "e3": deadLetter("e3", "o2", created, "0/FF", false)},
			slotPassed: true,
			want:       Report{RelayDeadLettered: 2},
			mention:    []string{"event e3", "event e1"},
		},
		{
			name:       "not in the dead-letter table: lost",
			events:     o1,
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled)},
			slotPassed: true,
			want:       Report{Deliveries: 1, Lost: 1},
			mention:    []string{"lost: outbox event e1"},
		},
		{
			name:       "replayed after a later event of its order: no ordering violation",
			events:     o1,
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled), typed(0, 1, "o1", "e1", created)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", true)},
			slotPassed: true,
			want:       Report{Deliveries: 2, RelayReplayed: 1},
		},
		{
			name:       "replayed after a later event of its order, outbox pruned: no ordering violation",
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled), typed(0, 1, "o1", "e1", created)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", true)},
			slotPassed: true,
			want:       Report{Deliveries: 2, RelayReplayed: 1},
		},
		{
			name: "replayed, the other events of its order still checked",
			events: []outboxEvent{{id: "e1", key: "o1", typ: created}, {id: "e2", key: "o1", typ: cancelled},
				{id: "e4", key: "o1", typ: cancelled}},
			records: []kafkaread.Record{typed(0, 0, "o1", "e4", cancelled), typed(0, 1, "o1", "e2", cancelled),
				typed(0, 2, "o1", "e1", created)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", true)},
			slotPassed: true,
			want:       Report{Deliveries: 3, RelayReplayed: 1, OrderingViolations: 1},
			mention:    []string{"ordering: event e4 of order o1"},
		},
		{
			name:       "replayed but not in the topic, slot past it: lost like any published event",
			events:     o1,
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", true)},
			slotPassed: true,
			want:       Report{Deliveries: 1, RelayReplayed: 1, Lost: 1},
			mention:    []string{"lost: outbox event e1"},
		},
		{
			name:       "not marked replayed but in the topic: delivered",
			events:     o1,
			records:    []kafkaread.Record{typed(0, 0, "o1", "e2", cancelled), typed(0, 1, "o1", "e1", created)},
			relay:      relayDeadLetters{"e1": deadLetter("e1", "o1", created, "0/16B3748", false)},
			slotPassed: true,
			want:       Report{Deliveries: 2},
		},
	}
	a := &auditor{cfg: DefaultConfig()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Report{Drained: true}
			a.checkDeliveries(&r, tt.events, tt.records, tt.slotPassed, tt.relay)
			got := Report{Deliveries: r.Deliveries, Lost: r.Lost, Unpublished: r.Unpublished, UnpublishedPastGrace: r.UnpublishedPastGrace,
				OrderingViolations: r.OrderingViolations, RelayDeadLettered: r.RelayDeadLettered, RelayReplayed: r.RelayReplayed}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v (violations %q)", got, tt.want, r.Violations)
			}
			if len(tt.mention) == 0 && len(r.Violations) > 0 {
				t.Fatalf("violations %q, want none", r.Violations)
			}
			all := strings.Join(r.Violations, "\n")
			last := -1
			for _, m := range tt.mention {
				i := strings.Index(all, m)
				if i < 0 {
					t.Fatalf("violations %q, want one naming %q", r.Violations, m)
				}
				if i < last {
					t.Fatalf("violations %q: %q out of order", r.Violations, m)
				}
				last = i
			}
			if r.RelayDeadLettered > 0 && (r.OK() || !r.ContractKept()) {
				t.Fatalf("relay dead letters: OK %v, contract kept %v; want a failure that is no contract violation", r.OK(), r.ContractKept())
			}
		})
	}
}

func TestAttributeRelayDeadLetters(t *testing.T) {
	const id, order = "0195f5a8-0000-7000-8000-000000000001", "0195f5a8-0000-7000-8000-0000000000aa"
	a := attribute(nil, nil, nil, nil, relayDeadLetters{id: deadLetter(id, order, contract.TypeOrderCreated, "0/1", false)})
	if len(a.ids) != 1 || a.ids[0] != id || a.orders[0] != order || a.types[0] != contract.TypeOrderCreated {
		t.Fatalf("attribution %+v, want the dead letter's event, order and type", a)
	}
}

func TestDeadLetterTableDefaultIsTheRelays(t *testing.T) {
	f, _ := reflect.TypeOf(Config{}).FieldByName("DeadLetterTable")
	want := cdc.DefaultConfig().DeadLetterTable
	if got := f.Tag.Get("default"); got != want || DefaultConfig().DeadLetterTable != want {
		t.Fatalf("--dead-letter-table defaults to %q (config %q), the relay's to %q", got, DefaultConfig().DeadLetterTable, want)
	}
}
