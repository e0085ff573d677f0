// Package consumertest is the contract suite of a consumer's Handler (see
// package engine). Run applies order events through the engine's own
// transaction path (engine.Runtime.ApplyBatch) to a real PostgreSQL
// database of internal/testenv and checks what every handler must do:
//
//   - a payload that does not decode wraps ErrMalformed (permanent) and
//     changes nothing;
//   - an event type the handler does not know wraps ErrUnknownType (permanent)
//     and changes nothing;
//   - an event of an order that does not exist is not_found (retried, then
//     dead-lettered) and changes nothing, not even the mark;
//   - Queue equals Apply: a batch of events applied in one transaction (the
//     handler's Queue when it is an engine.Batcher, Apply otherwise) leaves
//     the same state as the same events applied one per transaction;
//   - the probe tries what Apply writes: the handler is an engine.Prober,
//     its Probe changes nothing, and it fails wherever revoking the
//     privileges on a table makes Apply fail;
//   - redelivery changes nothing: an event delivered again, alone or within
//     a batch, after or before its successor, is a duplicate.
//
// "Changes nothing" is judged on the whole database: every table of the
// public schema, without timestamps and identity columns, whatever the
// handler's business tables are. So a new consumer needs no code here: its
// registration (package consumer/registry) puts it in the suite.
package consumertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Run runs the suite for the consumer called name with handler h.
func Run(t *testing.T, name string, h engine.Handler) {
	t.Run("malformed payload", func(t *testing.T) {
		s := newSuite(t, name, h)
		o := s.order()
		ev := s.created(o)
		ev.Payload = []byte(`{"order_id": "` + o.id)
		s.wantRefused(ev, engine.ClassPermanent, engine.ErrMalformed)
	})
	t.Run("unknown event type", func(t *testing.T) {
		s := newSuite(t, name, h)
		o := s.order()
		ev := s.created(o)
		ev.Type = "OrderTeleported"
		s.wantRefused(ev, engine.ClassPermanent, engine.ErrUnknownType)
	})
	t.Run("missing order", func(t *testing.T) {
		s := newSuite(t, name, h)
		o := order{id: uuid.Must(uuid.NewV7()).String(), customer: "c-missing", total: 20} // never stored
		s.wantRefused(s.created(o), engine.ClassNotFound, engine.ErrNotFound)
		s.wantRefused(s.cancelled(o), engine.ClassNotFound, engine.ErrNotFound)
	})
	t.Run("queue equals apply", func(t *testing.T) {
		events := func(s *suite, orders []order) []engine.Event {
			var evs []engine.Event
			for i, o := range orders {
				evs = append(evs, s.created(o))
				if i%2 == 0 {
					evs = append(evs, s.cancelled(o))
				}
			}
			return evs
		}
		one := newSuite(t, name, h)
		batched := newSuite(t, name, h)
		orders := []order{one.order(), one.order(), one.order()}
		for _, o := range orders {
			batched.store(o)
		}
		evs := events(one, orders)
		before := one.state()
		for _, ev := range evs {
			one.apply(ev)
		}
		batched.apply(evs...)
		if a, b := one.state(), batched.state(); a != b {
			t.Fatalf("events applied one per transaction leave\n%s\nthe same events in one batch leave\n%s", a, b)
		}
		if one.state() == before {
			t.Fatal("the events left the database as it was before them; the suite compares nothing")
		}
	})
	t.Run("probe tries what apply writes", func(t *testing.T) { probeTriesWhatApplyWrites(t, name, h) })
	t.Run("redelivery changes nothing", func(t *testing.T) {
		s := newSuite(t, name, h)
		o := s.order()
		created, cancelled := s.created(o), s.cancelled(o)
		s.apply(created)
		afterCreate := s.state()
		if applied, dups := s.apply(created); applied != 0 || dups != 1 {
			t.Fatalf("a redelivered OrderCreated: %d applied, %d duplicates; want 0 and 1", applied, dups)
		}
		if got := s.state(); got != afterCreate {
			t.Fatalf("a redelivered OrderCreated changed the database from\n%s\nto\n%s", afterCreate, got)
		}
		s.apply(cancelled, cancelled)
		afterCancel := s.state()
		if afterCancel == afterCreate {
			t.Fatal("OrderCancelled changed nothing; the suite compares nothing")
		}
		if applied, dups := s.apply(created, cancelled, created); applied != 0 || dups != 3 {
			t.Fatalf("a redelivered batch: %d applied, %d duplicates; want 0 and 3", applied, dups)
		}
		if got := s.state(); got != afterCancel {
			t.Fatalf("redelivery after the cancel changed the database from\n%s\nto\n%s", afterCancel, got)
		}
	})
}

// probeTriesWhatApplyWrites: h is an engine.Prober whose Probe changes
// nothing and fails wherever revoking the privileges on a table makes Apply
// fail, so that the runtime's probe finds a database that refuses h's
// writes for every event.
func probeTriesWhatApplyWrites(t *testing.T, name string, h engine.Handler) {
	p, ok := h.(engine.Prober)
	if !ok {
		t.Fatalf("the handler of %s is no engine.Prober: the runtime's probe cannot find a database that refuses its writes for every event", name)
	}
	s := newSuite(t, name, h)
	o := s.order()
	before := s.state()
	if err := s.inTx(p.Probe); err != nil {
		t.Fatalf("probe on a database that applies events: %v", err)
	}
	if after := s.state(); after != before {
		t.Fatalf("the probe changed the database from\n%s\nto\n%s", before, after)
	}
	// Without its privileges on a table, every event fails: so must
	// the probe, or the runtime would dead-letter them all.
	refused := 0
	for _, table := range s.tables() {
		if table == "processed_events" {
			continue
		}
		s.exec(`REVOKE ALL ON ` + quoteIdent(table) + ` FROM CURRENT_USER`)
		for _, ev := range []engine.Event{s.created(o), s.cancelled(o)} {
			if err := s.inTx(func(ctx context.Context, tx pgx.Tx) error { return h.Apply(ctx, tx, ev) }); err == nil {
				continue
			}
			refused++
			if err := s.inTx(p.Probe); err == nil {
				t.Errorf("%s fails without privileges on %s, and the probe succeeds", ev.Type, table)
			}
		}
		s.exec(`GRANT ALL ON ` + quoteIdent(table) + ` TO CURRENT_USER`)
	}
	if refused == 0 {
		t.Fatal("no table's privileges made an event fail; the suite compares nothing")
	}
}

// suite is one test's database and runtime.
type suite struct {
	t    *testing.T
	env  *testenv.Env
	rt   *engine.Runtime
	name string
	h    engine.Handler
	n    int
}

func newSuite(t *testing.T, name string, h engine.Handler) *suite {
	env := testenv.New(t)
	rt := engine.New(engine.Options{Name: name}, engine.PoolDB{Pool: env.Pool}, h, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return &suite{t: t, env: env, rt: rt, name: name, h: h}
}

// order is an order as the api stores it.
type order struct {
	id, customer string
	total        int64
}

// order stores a new order in status created.
func (s *suite) order() order {
	s.n++
	o := order{id: uuid.Must(uuid.NewV7()).String(), customer: fmt.Sprintf("c-%d", s.n), total: 20 * int64(s.n)}
	s.store(o)
	return o
}

func (s *suite) store(o order) {
	s.t.Helper()
	if _, err := s.env.Pool.Exec(context.Background(), `INSERT INTO orders (id, customer_id, currency, total_cents, status)
		VALUES ($1, $2, 'EUR', $3, 'created')`, o.id, o.customer, o.total); err != nil {
		s.t.Fatalf("storing order %s: %v", o.id, err)
	}
}

func (s *suite) created(o order) engine.Event {
	return s.event(o, contract.TypeOrderCreated, &eventforgev1.OrderCreated{OrderId: o.id, CustomerId: o.customer, Currency: "EUR",
		TotalCents: o.total, Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: o.total}}})
}

func (s *suite) cancelled(o order) engine.Event {
	return s.event(o, contract.TypeOrderCancelled, &eventforgev1.OrderCancelled{OrderId: o.id, CustomerId: o.customer, Reason: "changed mind"})
}

func (s *suite) event(o order, typ string, m proto.Message) engine.Event {
	s.t.Helper()
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		s.t.Fatal(err)
	}
	return engine.Event{ID: uuid.Must(uuid.NewV7()), Type: typ, Key: o.id, Payload: body, Topic: contract.Topic}
}

// apply applies evs in one transaction and fails the test on an error.
func (s *suite) apply(evs ...engine.Event) (applied, duplicates int) {
	s.t.Helper()
	applied, duplicates, err := s.rt.ApplyBatch(context.Background(), evs)
	if err != nil {
		s.t.Fatalf("applying %d events: %v", len(evs), err)
	}
	return applied, duplicates
}

// wantRefused checks that ev fails with sentinel and class and changes
// nothing, through the engine and, for a Batcher, through Apply and Queue
// alone, which must agree.
func (s *suite) wantRefused(ev engine.Event, class engine.Class, sentinel error) {
	s.t.Helper()
	before := s.state()
	_, _, err := s.rt.ApplyBatch(context.Background(), []engine.Event{ev})
	check := func(how string, err error) {
		s.t.Helper()
		if err == nil {
			s.t.Fatalf("%s: %s event of order %s applied; want %s", how, ev.Type, ev.Key, class)
		}
		if got := engine.Classify(err); got != class || !errors.Is(err, sentinel) {
			s.t.Fatalf("%s: %v, class %s; want %s wrapping %v", how, err, got, class, sentinel)
		}
		if after := s.state(); after != before {
			s.t.Fatalf("%s: the refused event changed the database from\n%s\nto\n%s", how, before, after)
		}
	}
	check("through the engine", err)
	check("Apply", s.inTx(func(ctx context.Context, tx pgx.Tx) error { return s.h.Apply(ctx, tx, ev) }))
	if b, ok := s.h.(engine.Batcher); ok {
		check("Queue", s.inTx(func(ctx context.Context, tx pgx.Tx) error {
			batch := &pgx.Batch{}
			if err := b.Queue(batch, ev); err != nil {
				return err
			}
			return tx.SendBatch(ctx, batch).Close()
		}))
	}
}

// inTx runs f in a transaction of its own, committed when f succeeds.
func (s *suite) inTx(f func(ctx context.Context, tx pgx.Tx) error) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, s.env.Pool, func(tx pgx.Tx) error { return f(ctx, tx) })
}

// tables lists the tables of the public schema.
func (s *suite) tables() []string {
	s.t.Helper()
	rows, err := s.env.Pool.Query(context.Background(), `SELECT table_name::text FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'goose%' ORDER BY table_name`)
	if err != nil {
		s.t.Fatalf("listing tables: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.t.Fatalf("listing tables: %v", err)
	}
	return names
}

// exec runs q on the suite's database.
func (s *suite) exec(q string) {
	s.t.Helper()
	if _, err := s.env.Pool.Exec(context.Background(), q); err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
}

// state describes every row of every table of the public schema, without
// the columns whose values depend on when or in which order rows were
// written (timestamps, identity columns), sorted.
func (s *suite) state() string {
	s.t.Helper()
	ctx := context.Background()
	rows, err := s.env.Pool.Query(ctx, `SELECT table_name, string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
		FROM information_schema.columns c
		WHERE table_schema = 'public' AND data_type NOT LIKE 'timestamp%' AND is_identity = 'NO'
			AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE')
			AND table_name NOT LIKE 'goose%'
		GROUP BY table_name ORDER BY table_name`)
	if err != nil {
		s.t.Fatalf("listing tables: %v", err)
	}
	type table struct{ name, columns string }
	var tables []table
	for rows.Next() {
		var tb table
		if err := rows.Scan(&tb.name, &tb.columns); err != nil {
			s.t.Fatal(err)
		}
		tables = append(tables, tb)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatalf("listing tables: %v", err)
	}
	var b strings.Builder
	for _, tb := range tables {
		var dump *string
		q := fmt.Sprintf(`SELECT string_agg(r::text, E'\n' ORDER BY r::text) FROM (SELECT %s FROM %s) r`, tb.columns, quoteIdent(tb.name))
		if err := s.env.Pool.QueryRow(ctx, q).Scan(&dump); err != nil {
			s.t.Fatalf("reading %s: %v", tb.name, err)
		}
		if dump != nil {
			fmt.Fprintf(&b, "%s:\n%s\n", tb.name, *dump)
		}
	}
	return b.String()
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
