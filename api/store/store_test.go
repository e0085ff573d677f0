package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
)

func newOrder(t *testing.T) (*Order, OutboxEvent) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := &Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c-1", Currency: "EUR", TotalCents: 10, Status: StatusCreated,
		CreatedAt: now, UpdatedAt: now, Items: []Item{{SKU: "A", Quantity: 1, UnitPriceCents: 10}}}
	ev := OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: o.ID.String(), Type: "OrderCreated", Payload: []byte(`{}`)}
	return o, ev
}

// TestIdempotencyKeysArePruned: keys older than the window are deleted in
// batches, younger ones stay; a pruned key no longer replays.
func TestIdempotencyKeysArePruned(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	hash := []byte("h")
	for _, key := range []string{"old-1", "old-2", "old-3", "young"} {
		o, ev := newOrder(t)
		if _, err := s.CreateOrder(ctx, o, ev, &IdempotencyKey{Key: key, RequestHash: hash}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '2 hours' WHERE key LIKE 'old-%'`); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneIdempotencyKeys(ctx, time.Hour, 2) // batches of 2: two DELETEs
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v; want 3", n, err)
	}
	var left []string
	rows, err := env.Pool.Query(ctx, `SELECT key FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if rows.Err() != nil || len(left) != 1 || left[0] != "young" {
		t.Fatalf("keys left %v, %v; want [young]", left, rows.Err())
	}

	o, ev := newOrder(t)
	res, err := s.CreateOrder(ctx, o, ev, &IdempotencyKey{Key: "young", RequestHash: hash})
	if err != nil || !res.Replayed || res.OrderID == o.ID {
		t.Fatalf("young key: %+v, %v; want a replay of the first order", res, err)
	}
	res, err = s.CreateOrder(ctx, o, ev, &IdempotencyKey{Key: "old-1", RequestHash: hash})
	if err != nil || res.Replayed || res.OrderID != o.ID {
		t.Fatalf("pruned key: %+v, %v; want a new order", res, err)
	}
	o2, ev2 := newOrder(t)
	if _, err := s.CreateOrder(ctx, o2, ev2, &IdempotencyKey{Key: "young", RequestHash: []byte("other")}); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("other request under a kept key: %v, want ErrKeyReused", err)
	}
}

// TestCancelOrderTransitions: created and processed orders are cancelled
// with one outbox row each; a cancelled order is returned unchanged; an
// unknown order is ErrOrderNotFound.
func TestCancelOrderTransitions(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	event := func(o Order) (OutboxEvent, error) {
		return OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: o.ID.String(), Type: "OrderCancelled", Payload: []byte(`{}`)}, nil
	}
	for _, from := range []string{StatusCreated, StatusProcessed} {
		o, ev := newOrder(t)
		if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Pool.Exec(ctx, `UPDATE orders SET status = $2 WHERE id = $1`, o.ID, from); err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC().Truncate(time.Microsecond)
		res, err := s.CancelOrder(ctx, o.ID, at, event)
		if err != nil || !res.Changed || res.Order.Status != StatusCancelled || !res.Order.UpdatedAt.Equal(at) || len(res.Order.Items) != 1 {
			t.Fatalf("from %s: %+v, %v", from, res, err)
		}
		again, err := s.CancelOrder(ctx, o.ID, at.Add(time.Second), event)
		if err != nil || again.Changed || !again.Order.UpdatedAt.Equal(at) {
			t.Fatalf("repeated cancel from %s: %+v, %v", from, again, err)
		}
		var outbox int
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE aggregateid = $1 AND type = 'OrderCancelled'`, o.ID.String()).Scan(&outbox); err != nil || outbox != 1 {
			t.Fatalf("from %s: %d OrderCancelled rows, %v; want 1", from, outbox, err)
		}
	}
	if _, err := s.CancelOrder(ctx, uuid.New(), time.Now(), event); !errors.Is(err, ErrOrderNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	// A failing event builder writes nothing.
	o, ev := newOrder(t)
	if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := s.CancelOrder(ctx, o.ID, time.Now(), func(Order) (OutboxEvent, error) { return OutboxEvent{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	var status string
	if err := env.Pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, o.ID).Scan(&status); err != nil || status != StatusCreated {
		t.Fatalf("status %q, %v after a failed cancel", status, err)
	}
}

// TestCreateOrderIsAtomic: a create whose last statement fails (the outbox
// insert, on a duplicate event ID) leaves neither the order nor its items,
// with and without an idempotency key (one round trip and an explicit
// transaction); the connection it used stays usable.
func TestCreateOrderIsAtomic(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	first, ev := newOrder(t)
	if _, err := s.CreateOrder(ctx, first, ev, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []*IdempotencyKey{nil, {Key: "k-atomic", RequestHash: []byte("h")}} {
		o, _ := newOrder(t)
		clash := ev
		clash.AggregateID = o.ID.String()
		if _, err := s.CreateOrder(ctx, o, clash, key); err == nil {
			t.Fatalf("key %v: create with a duplicate event ID succeeded", key)
		}
		var orders, items, keys int
		if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE id = $1),
			(SELECT count(*) FROM order_items WHERE order_id = $1),
			(SELECT count(*) FROM idempotency_keys)`, o.ID).Scan(&orders, &items, &keys); err != nil {
			t.Fatal(err)
		}
		if orders != 0 || items != 0 || keys != 0 {
			t.Fatalf("key %v: failed create left %d orders, %d items, %d keys; want none", key, orders, items, keys)
		}
	}
	for range 20 { // more creates than the pool has connections
		o, ev := newOrder(t)
		if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
			t.Fatalf("create after a failed one: %v", err)
		}
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM orders o JOIN outbox ob ON ob.aggregateid = o.id::text`).Scan(&n); err != nil || n != 21 {
		t.Fatalf("orders with their event: %d, %v; want 21", n, err)
	}
}
