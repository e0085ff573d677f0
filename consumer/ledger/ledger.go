// Package ledger is the consumer that keeps per-customer order counts and
// totals in the table ledger: OrderCreated adds one order and its total,
// OrderCancelled adds one cancellation and the order's total. The counters
// are plain increments, so an event applied twice would visibly double.
package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/consumer/payload"
	"github.com/eventforge/eventforge/contract"
)

// Name is the consumer name: the group is eventforge-ledger and the marks
// are (ledger, event_id).
const Name = "ledger"

// Handler applies order events to the ledger.
type Handler struct{}

// Apply implements engine.Handler.
func (Handler) Apply(ctx context.Context, tx pgx.Tx, ev engine.Event) error {
	switch ev.Type {
	case contract.TypeOrderCreated:
		created, err := payload.Created(ev)
		if err != nil {
			return err
		}
		customer, currency, total, err := order(ctx, tx, created.GetOrderId())
		if err != nil {
			return err
		}
		if customer != created.GetCustomerId() || currency != created.GetCurrency() || total != created.GetTotalCents() {
			return fmt.Errorf("%w: event says customer %q, %d %s; order %s has customer %q, %d %s", engine.ErrInvalid,
				created.GetCustomerId(), created.GetTotalCents(), created.GetCurrency(), created.GetOrderId(), customer, total, currency)
		}
		return add(ctx, tx, addOrderSQL, customer, currency, total)
	case contract.TypeOrderCancelled:
		cancelled, err := payload.Cancelled(ev)
		if err != nil {
			return err
		}
		customer, currency, total, err := order(ctx, tx, cancelled.GetOrderId())
		if err != nil {
			return err
		}
		return add(ctx, tx, addCancellationSQL, customer, currency, total)
	default:
		return payload.Unknown(ev)
	}
}

// probeSQL reads an order and upserts its ledger row the way Apply does,
// for an order ID no order has (the nil UUID), touching every column the
// two upserts write: it checks their tables, columns and privileges and
// changes nothing (engine.Prober).
const probeSQL = `INSERT INTO ledger (customer_id, currency, order_count, total_cents, cancelled_count, cancelled_cents)
	SELECT customer_id, currency, 1, total_cents, 1, total_cents FROM orders WHERE id = '00000000-0000-0000-0000-000000000000'
	ON CONFLICT (customer_id, currency) DO UPDATE SET
		order_count = ledger.order_count + 1, total_cents = ledger.total_cents + EXCLUDED.total_cents,
		cancelled_count = ledger.cancelled_count + 1, cancelled_cents = ledger.cancelled_cents + EXCLUDED.cancelled_cents,
		updated_at = now()`

// Probe implements engine.Prober.
func (Handler) Probe(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, probeSQL)
	return err
}

// order reads the customer, currency and total of an order.
func order(ctx context.Context, tx pgx.Tx, orderID string) (customer, currency string, total int64, err error) {
	err = tx.QueryRow(ctx, `SELECT customer_id, currency, total_cents FROM orders WHERE id = $1`, orderID).Scan(&customer, &currency, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", 0, payload.OrderNotFound(orderID)
	}
	if err != nil {
		return "", "", 0, fmt.Errorf("reading order %s: %w", orderID, err)
	}
	return customer, currency, total, nil
}

// Upserts of a customer's ledger row: one more order (or cancellation) and
// its total.
const (
	addOrderSQL = `INSERT INTO ledger (customer_id, currency, order_count, total_cents) VALUES ($1, $2, 1, $3)
		ON CONFLICT (customer_id, currency) DO UPDATE SET
			order_count = ledger.order_count + 1, total_cents = ledger.total_cents + EXCLUDED.total_cents, updated_at = now()`
	addCancellationSQL = `INSERT INTO ledger (customer_id, currency, cancelled_count, cancelled_cents) VALUES ($1, $2, 1, $3)
		ON CONFLICT (customer_id, currency) DO UPDATE SET
			cancelled_count = ledger.cancelled_count + 1, cancelled_cents = ledger.cancelled_cents + EXCLUDED.cancelled_cents, updated_at = now()`
)

func add(ctx context.Context, tx pgx.Tx, upsert, customer, currency string, amount int64) error {
	if _, err := tx.Exec(ctx, upsert, customer, currency, amount); err != nil {
		return fmt.Errorf("updating ledger of %s/%s: %w", customer, currency, err)
	}
	return nil
}
