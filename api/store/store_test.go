package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

func newOrder(t *testing.T) (*Order, OutboxEvent) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := &Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c-1", Currency: "EUR", TotalCents: 10, Status: StatusCreated,
		CreatedAt: now, UpdatedAt: now, Items: []Item{{SKU: "A", Quantity: 1, UnitPriceCents: 10}}}
	ev := OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateType: contract.AggregateOrder, AggregateID: o.ID.String(), Type: contract.TypeOrderCreated, Payload: []byte(`{}`)}
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
	rows, err := env.Pool.Query(ctx, `SELECT key FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) != 1 || left[0] != "young" {
		t.Fatalf("keys left %v, %v; want [young]", left, err)
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
		return OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateType: contract.AggregateOrder, AggregateID: o.ID.String(), Type: contract.TypeOrderCancelled, Payload: []byte(`{}`)}, nil
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

// TestBeforeCommitFailpointIsOnTheProductionPath: the api.before_commit
// failpoint fires inside the write that production runs. While the armed
// point holds a create, its PostgreSQL backend shows that write's shape —
// without a key, the pipeline's implicit transaction, every statement
// executed and no Sync yet (state active on the outbox insert, never "idle in
// transaction", which an explicit BEGIN would show); with a key, the explicit
// transaction waiting for COMMIT. Its caller's cancellation does not cut
// the held write off, its deadline does. Nothing is visible before the
// commit, a failing point rolls everything back, and the pool stays usable.
func TestBeforeCommitFailpointIsOnTheProductionPath(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	fired := make(chan struct{}, 1)
	failpoint.OnFire = func(name string, _ failpoint.Action) {
		if name == failpoint.APIBeforeCommit {
			fired <- struct{}{}
		}
	}
	t.Cleanup(func() { failpoint.OnFire = nil; _ = failpoint.Arm("") })

	rowCount := func(t *testing.T) (n int) {
		t.Helper()
		if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM order_items)
			+ (SELECT count(*) FROM outbox) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name      string
		key       *IdempotencyKey
		wantState string // of the create's backend while the point holds it
		wantQuery string // the statement it ran last
	}{
		{name: "without key: one pipeline", wantState: "active", wantQuery: insertOutboxSQL},
		{name: "with key: explicit transaction", key: &IdempotencyKey{Key: "k-fp", RequestHash: []byte("h")},
			wantState: "idle in transaction", wantQuery: insertOutboxSQL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rowCount(t)

			// delay: the point holds the write until the caller's deadline.
			if err := failpoint.Arm(failpoint.APIBeforeCommit + "=1*delay(10m)"); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			o, ev := newOrder(t)
			done := make(chan error, 1)
			go func() {
				_, err := s.CreateOrder(cctx, o, ev, tt.key)
				done <- err
			}()
			select {
			case <-fired:
			case err := <-done:
				t.Fatalf("create returned %v before the failpoint fired", err)
			case <-time.After(30 * time.Second):
				t.Fatal("the failpoint did not fire within 30 s")
			}
			testenv.Eventually(t, 10*time.Second, "the create's backend holding its uncommitted write", func() error {
				var state, query string
				err := env.Pool.QueryRow(ctx, `SELECT state, query FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`).Scan(&state, &query)
				if err != nil {
					return fmt.Errorf("reading the writer's backend: %w", err)
				}
				if state != tt.wantState || query != tt.wantQuery {
					return fmt.Errorf("backend in state %q running %q; want %q running %q", state, query, tt.wantState, tt.wantQuery)
				}
				return nil
			})
			if n := rowCount(t); n != before {
				t.Fatalf("rows visible before the commit: %d, want %d", n, before)
			}
			// The caller's cancellation does not cut the write off; its
			// deadline does, before the commit: nothing was written.
			cancel()
			if err := <-done; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotWritten) {
				t.Fatalf("create held at the failpoint until its deadline: %v, want context.DeadlineExceeded and ErrNotWritten", err)
			}
			testenv.Eventually(t, 10*time.Second, "the held write rolled back", func() error {
				var open int
				if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()`).Scan(&open); err != nil {
					return err
				}
				if open > 0 {
					return fmt.Errorf("%d transactions still open", open)
				}
				return nil
			})
			if n := rowCount(t); n != before {
				t.Fatalf("rows after the cancelled write: %d, want %d", n, before)
			}

			// error: the write fails and leaves nothing.
			if err := failpoint.Arm(failpoint.APIBeforeCommit + "=1*error"); err != nil {
				t.Fatal(err)
			}
			o, ev = newOrder(t)
			if _, err := s.CreateOrder(ctx, o, ev, tt.key); !errors.Is(err, failpoint.ErrInjected) {
				t.Fatalf("create with the point armed to fail: %v, want ErrInjected", err)
			}
			<-fired
			if n := rowCount(t); n != before {
				t.Fatalf("rows after the failed write: %d, want %d", n, before)
			}

			// The point is spent: the same create commits, on a pool that
			// lost the connections closed above.
			for range 20 {
				o, ev = newOrder(t)
				if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
					t.Fatalf("create after the failpoint: %v", err)
				}
			}
			if tt.key != nil {
				o, ev = newOrder(t)
				if res, err := s.CreateOrder(ctx, o, ev, tt.key); err != nil || res.Replayed {
					t.Fatalf("create under the key after the failpoint: %+v, %v; want a new order", res, err)
				}
			}
			select {
			case <-fired:
				t.Fatal("the spent failpoint fired again")
			default:
			}
		})
	}
}

// TestListOrdersPagesWithALateCommit: the listing's order is create_time
// (the api's clock when the create arrived), not commit order. A create
// that took its time before the first page was read and committed after it
// appears on a later page when its time is older than the previous page's
// last order; one that arrived after the first page, newer than it, does
// not. No order appears on two pages, and every order committed before the
// first page appears on exactly one.
func TestListOrdersPagesWithALateCommit(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Microsecond)
	at := func(o *Order, minutes int) *Order {
		o.CreatedAt = base.Add(time.Duration(minutes) * time.Minute)
		o.UpdatedAt = o.CreatedAt
		return o
	}
	var committed []*Order // before the first page, oldest first
	for i := range 5 {
		o, ev := newOrder(t)
		if _, err := s.CreateOrder(ctx, at(o, 2*i), ev, nil); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, o)
	}
	// The late create's time lies between the 2nd and 3rd oldest orders,
	// older than the first page's last order; it waits inside PostgreSQL
	// until the first page has been read.
	lock, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE outbox IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	late, lateEv := newOrder(t)
	lateDone := make(chan error, 1)
	go func() { _, err := s.CreateOrder(ctx, at(late, 3), lateEv, nil); lateDone <- err }()
	waitLocked(t, env, "outbox")

	page1, err := s.ListOrders(ctx, ListQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-lateDone; err != nil {
		t.Fatalf("late create: %v", err)
	}
	newer, newerEv := newOrder(t)
	if _, err := s.CreateOrder(ctx, at(newer, 60), newerEv, nil); err != nil {
		t.Fatal(err)
	}

	pages := [][]Order{page1}
	for last := page1[len(page1)-1]; ; {
		page, err := s.ListOrders(ctx, ListQuery{Limit: 2, After: &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		last = page[len(page)-1]
	}
	seen := map[uuid.UUID]int{} // order → page
	for i, page := range pages {
		for _, o := range page {
			if p, ok := seen[o.ID]; ok {
				t.Fatalf("order %s on pages %d and %d", o.ID, p, i)
			}
			seen[o.ID] = i
		}
	}
	for _, o := range committed {
		if _, ok := seen[o.ID]; !ok {
			t.Errorf("order %s, committed before the first page, is on no page", o.ID)
		}
	}
	if p, ok := seen[late.ID]; !ok || p == 0 {
		t.Errorf("late order: on page %d (listed: %v); want a later page than the first", p, ok)
	}
	if _, ok := seen[newer.ID]; ok {
		t.Errorf("an order newer than the first page is on a later page")
	}
}

// TestCancelNeverMovesUpdatedAtBack: a cancel whose time is older than
// the order's last change (another api replica's clock behind) keeps the
// last change's time.
func TestCancelNeverMovesUpdatedAtBack(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool)
	ctx := context.Background()
	o, ev := newOrder(t)
	if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
		t.Fatal(err)
	}
	res, err := s.CancelOrder(ctx, o.ID, o.UpdatedAt.Add(-time.Minute), func(o Order) (OutboxEvent, error) {
		return OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateType: contract.AggregateOrder, AggregateID: o.ID.String(), Type: contract.TypeOrderCancelled, Payload: []byte(`{}`)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stored time.Time
	if err := env.Pool.QueryRow(ctx, `SELECT updated_at FROM orders WHERE id = $1`, o.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !res.Order.UpdatedAt.Equal(o.UpdatedAt) || !stored.Equal(o.UpdatedAt) {
		t.Fatalf("updated_at answered %s, stored %s; want the last change's %s", res.Order.UpdatedAt, stored, o.UpdatedAt)
	}
}
