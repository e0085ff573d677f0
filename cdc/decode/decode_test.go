package decode

import (
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/contract"
)

func rel(id uint32, ns, name string, cols ...string) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: id, Namespace: ns, RelationName: name}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c})
	}
	return m
}

func insert(id uint32, vals ...*string) *pglogrepl.InsertMessage {
	td := &pglogrepl.TupleData{}
	for _, v := range vals {
		if v == nil {
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull})
			continue
		}
		td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(*v)})
	}
	return &pglogrepl.InsertMessage{RelationID: id, Tuple: td}
}

func s(v string) *string { return &v }

func TestDecoder(t *testing.T) {
	d := New("public", "outbox")
	// columns in a different order than the migration, plus an extra one
	if err := d.Relation(rel(1, "public", "outbox", "created_at", "type", "id", "extra", "aggregateid", "aggregatetype", "payload", "headers")); err != nil {
		t.Fatal(err)
	}
	if err := d.Relation(rel(2, "public", "audit", "id")); err != nil {
		t.Fatal(err)
	}

	ev, ok, err := d.Insert(insert(1, s("2026-01-01 00:00:00+00"), s(contract.TypeOrderCreated), s("e-1"), s("x"), s("o-1"), s("order"), s(`{"a":1}`), s(`{"traceparent":"00-abc-def-01"}`)))
	if err != nil || !ok {
		t.Fatalf("Insert: ok=%v err=%v", ok, err)
	}
	want := Event{ID: "e-1", AggregateType: contract.AggregateOrder, AggregateID: "o-1", Type: contract.TypeOrderCreated, Payload: []byte(`{"a":1}`), CreatedAt: "2026-01-01 00:00:00+00"}
	if ev.ID != want.ID || ev.AggregateType != want.AggregateType || ev.AggregateID != want.AggregateID || ev.Type != want.Type || string(ev.Payload) != string(want.Payload) || ev.CreatedAt != want.CreatedAt {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}
	if ev.Headers["traceparent"] != "00-abc-def-01" {
		t.Fatalf("headers = %v", ev.Headers)
	}

	if _, ok, err := d.Insert(insert(2, s("x"))); ok || err != nil {
		t.Fatalf("non-outbox row: ok=%v err=%v, want skipped", ok, err)
	}
	if _, _, err := d.Insert(insert(9, s("x"))); !errors.Is(err, ErrUnknownRelation) {
		t.Fatalf("unknown relation: err=%v", err)
	}
	if _, _, err := d.Insert(insert(1, s("t"), s("T"), nil, nil, s("o"), s("order"), s("{}"), nil)); err == nil {
		t.Fatal("row without id decoded without error")
	}
	if _, _, err := d.Insert(insert(1, s("t"), s("T"), s("e"), nil, s("o"), s("order"), s("{}"), s(`["not","object"]`))); err == nil {
		t.Fatal("non-object headers decoded without error")
	}
}

func TestDecoderRejectsIncompleteOutbox(t *testing.T) {
	d := New("public", "outbox")
	if err := d.Relation(rel(1, "public", "outbox", "id", "payload")); err == nil {
		t.Fatal("outbox without aggregate columns accepted")
	}
}
