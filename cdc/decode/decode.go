// Package decode turns pgoutput messages about the outbox table into outbox
// events. It keeps the relation (table) descriptions the stream sends before
// the first row of each table and resolves outbox columns by name, so column
// order and extra columns do not matter.
package decode

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Event is one outbox row as committed.
type Event struct {
	ID            string            // outbox.id: the event ID, stable across redeliveries
	AggregateType string            // outbox.aggregatetype, e.g. "order"
	AggregateID   string            // outbox.aggregateid: the Kafka key
	Type          string            // outbox.type, e.g. "OrderCreated"
	Payload       []byte            // outbox.payload as JSON text
	Headers       map[string]string // outbox.headers, e.g. traceparent
	HeadersJSON   string            // outbox.headers as the JSON text it was decoded from
	CreatedAt     string            // outbox.created_at in PostgreSQL's text form
}

// Size approximates the event's memory footprint in bytes.
func (e *Event) Size() int {
	n := len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type) + len(e.Payload) + len(e.CreatedAt)
	for k, v := range e.Headers {
		n += len(k) + len(v)
	}
	return n
}

// ErrMalformedHeaders means an outbox row's headers are not a JSON object of
// strings, so no Kafka record can be built from it. Insert still returns the
// rest of the event (Headers nil, HeadersJSON as stored).
var ErrMalformedHeaders = errors.New("headers are not a JSON object of strings")

// ErrUnknownRelation means a row arrived for a relation the stream never
// described; the stream is corrupt or was joined mid-way.
var ErrUnknownRelation = errors.New("row for a relation not described by the stream")

// Decoder holds relation descriptions. The zero value is not usable; use New.
type Decoder struct {
	namespace, table string
	relations        map[uint32]*relation
}

type relation struct {
	outbox bool
	// column index of each outbox column; -1 when absent
	id, aggType, aggID, typ, payload, headers, createdAt int
}

// New returns a decoder for the outbox table namespace.table.
func New(namespace, table string) *Decoder {
	return &Decoder{namespace: namespace, table: table, relations: map[uint32]*relation{}}
}

// Relation records a RELATION message. It returns an error if the outbox
// table lacks a required column.
func (d *Decoder) Relation(m *pglogrepl.RelationMessage) error {
	r := &relation{id: -1, aggType: -1, aggID: -1, typ: -1, payload: -1, headers: -1, createdAt: -1}
	r.outbox = m.Namespace == d.namespace && m.RelationName == d.table
	for i, c := range m.Columns {
		switch c.Name {
		case "id":
			r.id = i
		case "aggregatetype":
			r.aggType = i
		case "aggregateid":
			r.aggID = i
		case "type":
			r.typ = i
		case "payload":
			r.payload = i
		case "headers":
			r.headers = i
		case "created_at":
			r.createdAt = i
		}
	}
	if r.outbox && (r.id < 0 || r.aggType < 0 || r.aggID < 0 || r.typ < 0 || r.payload < 0) {
		return fmt.Errorf("outbox table %s.%s lacks one of id, aggregatetype, aggregateid, type, payload", m.Namespace, m.RelationName)
	}
	d.relations[m.RelationID] = r
	return nil
}

// Insert decodes an INSERT. ok is false when the row is not in the outbox
// table (the publication may include other tables); such rows are skipped.
// An error wrapping ErrMalformedHeaders comes with the decoded event and ok
// true.
func (d *Decoder) Insert(m *pglogrepl.InsertMessage) (ev Event, ok bool, err error) {
	r, found := d.relations[m.RelationID]
	if !found {
		return Event{}, false, fmt.Errorf("relation %d: %w", m.RelationID, ErrUnknownRelation)
	}
	if !r.outbox {
		return Event{}, false, nil
	}
	cols := m.Tuple.Columns
	text := func(i int) (string, error) {
		if i < 0 || i >= len(cols) {
			return "", nil
		}
		c := cols[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			return string(c.Data), nil
		case pglogrepl.TupleDataTypeNull:
			return "", nil
		default:
			return "", fmt.Errorf("outbox column %d: unsupported tuple data type %q", i, c.DataType)
		}
	}
	fields := []struct {
		idx int
		dst *string
	}{{r.id, &ev.ID}, {r.aggType, &ev.AggregateType}, {r.aggID, &ev.AggregateID}, {r.typ, &ev.Type}, {r.createdAt, &ev.CreatedAt}}
	for _, f := range fields {
		if *f.dst, err = text(f.idx); err != nil {
			return Event{}, false, err
		}
	}
	if ev.ID == "" {
		return Event{}, false, errors.New("outbox row without id")
	}
	payload, err := text(r.payload)
	if err != nil {
		return Event{}, false, err
	}
	ev.Payload = []byte(payload)
	headers, err := text(r.headers)
	if err != nil {
		return Event{}, false, err
	}
	ev.HeadersJSON = headers
	if ev.Headers, err = ParseHeaders(ev.ID, headers); err != nil {
		return ev, true, err
	}
	return ev, true, nil
}

// ParseHeaders parses outbox.headers in its JSON text form; an empty text or
// object gives nil.
func ParseHeaders(eventID, text string) (map[string]string, error) {
	if text == "" || text == "{}" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(text), &h); err != nil {
		return nil, fmt.Errorf("outbox event %s: %w: %w", eventID, ErrMalformedHeaders, err)
	}
	return h, nil
}
