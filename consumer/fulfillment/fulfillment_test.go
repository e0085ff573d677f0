package fulfillment

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// insertOrder stores an order with the given status and returns its ID.
func insertOrder(t *testing.T, env *testenv.Env, status string) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	if _, err := env.Pool.Exec(context.Background(), `INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at, updated_at)
		VALUES ($1, 'c-1', 'EUR', 20, $2, now(), now())`, id, status); err != nil {
		t.Fatal(err)
	}
	return id
}

func created(t *testing.T, orderID string) engine.Event {
	t.Helper()
	body, err := protojson.Marshal(&eventforgev1.OrderCreated{OrderId: orderID, CustomerId: "c-1", Currency: "EUR", TotalCents: 20,
		Items: []*eventforgev1.OrderItem{{Sku: "A", Quantity: 2, UnitPriceCents: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	return engine.Event{ID: uuid.Must(uuid.NewV7()), Type: contract.TypeOrderCreated, Key: orderID, Payload: body}
}

func cancelled(t *testing.T, orderID string) engine.Event {
	t.Helper()
	body, err := protojson.Marshal(&eventforgev1.OrderCancelled{OrderId: orderID})
	if err != nil {
		t.Fatal(err)
	}
	return engine.Event{ID: uuid.Must(uuid.NewV7()), Type: contract.TypeOrderCancelled, Key: orderID, Payload: body}
}

// state is an order's status and its shipments: total and cancelled.
type state struct {
	status             string
	shipments, stopped int
}

func stateOf(t *testing.T, env *testenv.Env, orderID string) state {
	t.Helper()
	var s state
	if err := env.Pool.QueryRow(context.Background(), `SELECT o.status, count(s.*), count(s.cancelled_at)
		FROM orders o LEFT JOIN shipments s ON s.order_id = o.id WHERE o.id = $1 GROUP BY o.status`, orderID).
		Scan(&s.status, &s.shipments, &s.stopped); err != nil {
		t.Fatal(err)
	}
	return s
}

// inTx runs f in a transaction and commits it when f succeeds.
func inTx(t *testing.T, env *testenv.Env, f func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(context.Background(), env.Pool, f)
}

// TestApply: OrderCreated processes a created order and ships it once,
// however often it is applied; it leaves a cancelled order alone;
// OrderCancelled cancels the order and its shipment; OrderEffects counts the
// shipments; a missing order is not_found and rolls back.
func TestApply(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	h := Handler{}
	apply := func(ev engine.Event) error {
		return inTx(t, env, func(tx pgx.Tx) error { return h.Apply(ctx, tx, ev) })
	}

	open := insertOrder(t, env, "created")
	for range 2 {
		if err := apply(created(t, open)); err != nil {
			t.Fatal(err)
		}
	}
	if got := stateOf(t, env, open); got != (state{"processed", 1, 0}) {
		t.Fatalf("created order after OrderCreated twice: %+v; want processed with one shipment", got)
	}
	if err := apply(cancelled(t, open)); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(t, env, open); got != (state{"cancelled", 1, 1}) {
		t.Fatalf("processed order after OrderCancelled: %+v; want cancelled, shipment cancelled", got)
	}

	gone := insertOrder(t, env, "cancelled")
	if err := apply(created(t, gone)); err != nil {
		t.Fatal(err)
	}
	if got := stateOf(t, env, gone); got != (state{"cancelled", 0, 0}) {
		t.Fatalf("cancelled order after OrderCreated: %+v; want cancelled without shipment", got)
	}
	// OrderEffects counts each order's shipments, the cancelled one too.
	for id, want := range map[string]int{open: 1, gone: 0} {
		if n, err := OrderEffects(ctx, env.Pool, id); err != nil || n != want {
			t.Errorf("OrderEffects of order %s: %d, %v; want %d", id, n, err, want)
		}
	}

	missing := uuid.Must(uuid.NewV7()).String()
	for _, ev := range []engine.Event{created(t, missing), cancelled(t, missing)} {
		if err := apply(ev); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("%s of a missing order: %v; want ErrNotFound", ev.Type, err)
		}
	}
	bad := created(t, open)
	bad.Payload = []byte(`{"order_id":`)
	if err := apply(bad); !errors.Is(err, engine.ErrMalformed) {
		t.Fatalf("malformed payload: %v; want ErrMalformed", err)
	}
}

// TestQueueBatch: the events of a batch, queued and sent in one pipeline,
// have the effects Apply has one by one, in order; a missing order fails
// the whole batch and its transaction leaves nothing behind.
func TestQueueBatch(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	h := Handler{}
	a, b, c := insertOrder(t, env, "created"), insertOrder(t, env, "created"), insertOrder(t, env, "cancelled")
	evs := []engine.Event{created(t, a), created(t, b), cancelled(t, b), created(t, c), created(t, a)}
	err := inTx(t, env, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for _, ev := range evs {
			if err := h.Queue(batch, ev); err != nil {
				return err
			}
		}
		if batch.Len() != len(evs) {
			t.Errorf("queued %d statements for %d events; want one each", batch.Len(), len(evs))
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]state{a: {"processed", 1, 0}, b: {"cancelled", 1, 1}, c: {"cancelled", 0, 0}} {
		if got := stateOf(t, env, id); got != want {
			t.Errorf("order %s: %+v; want %+v", id, got, want)
		}
	}

	d := insertOrder(t, env, "created")
	err = inTx(t, env, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for _, ev := range []engine.Event{created(t, d), created(t, uuid.Must(uuid.NewV7()).String())} {
			if err := h.Queue(batch, ev); err != nil {
				return err
			}
		}
		return tx.SendBatch(ctx, batch).Close()
	})
	if !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("batch with a missing order: %v; want ErrNotFound", err)
	}
	if got := stateOf(t, env, d); got != (state{"created", 0, 0}) {
		t.Fatalf("order of the failed batch: %+v; want untouched", got)
	}
}

// TestChangesFindTheOrderByPrimaryKey: both statements reach the order
// through orders_pkey, in the custom and the generic plan, on a table whose
// statistics say every order is processed (the shape of a running system,
// where an index on status looks selective for 'created').
func TestChangesFindTheOrderByPrimaryKey(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO orders (id, customer_id, currency, total_cents, status)
		SELECT gen_random_uuid(), 'c-' || (i % 50), 'EUR', 20, 'processed' FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `ANALYZE orders`); err != nil {
		t.Fatal(err)
	}
	id := insertOrder(t, env, "created")
	for name, sql := range map[string]string{"process": processSQL, "cancel": cancelSQL} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				err := inTx(t, env, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "PREPARE change(uuid) AS "+sql); err != nil {
						return err
					}
					var plan string
					if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE change('"+id+"')").Scan(&plan); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "DEALLOCATE change"); err != nil {
						return err
					}
					update := updateScan(t, plan)
					if update != "orders_pkey" {
						t.Errorf("the UPDATE of orders scans %q, want orders_pkey; plan: %s", update, plan)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// updateScan returns the index the plan's UPDATE of orders reads its row
// through ("" for none).
func updateScan(t *testing.T, plan string) string {
	t.Helper()
	type node struct {
		NodeType string `json:"Node Type"`
		Relation string `json:"Relation Name"`
		Index    string `json:"Index Name"`
		Plans    []node `json:"Plans"`
	}
	var root []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &root); err != nil || len(root) != 1 {
		t.Fatalf("reading the plan (%v): %s", err, plan)
	}
	var find func(n node, inUpdate bool) (string, bool)
	find = func(n node, inUpdate bool) (string, bool) {
		if inUpdate && n.Relation == "orders" {
			return n.Index, true
		}
		inUpdate = inUpdate || (n.NodeType == "ModifyTable" && n.Relation == "orders")
		for _, c := range n.Plans {
			if idx, ok := find(c, inUpdate); ok {
				return idx, true
			}
		}
		return "", false
	}
	idx, ok := find(root[0].Plan, false)
	if !ok {
		t.Fatalf("no UPDATE of orders in the plan: %s", plan)
	}
	return idx
}
