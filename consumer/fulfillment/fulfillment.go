// Package fulfillment is the consumer that turns orders into shipments: on
// OrderCreated it moves the order from created to processed and creates its
// shipment; on OrderCancelled it marks the order cancelled and cancels its
// shipment. Both run in the runtime's transaction.
package fulfillment

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/consumer/payload"
	"github.com/eventforge/eventforge/contract"
)

// Name is the consumer name: the group is eventforge-fulfillment and the
// marks are (fulfillment, event_id).
const Name = "fulfillment"

// Handler applies order events for fulfillment. Each event is one
// statement, so a batch of events goes out in one round trip (Queue).
type Handler struct{}

// Apply implements engine.Handler.
func (h Handler) Apply(ctx context.Context, tx pgx.Tx, ev engine.Event) error {
	b := &pgx.Batch{}
	if err := h.Queue(b, ev); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// Queue implements engine.Batcher.
func (Handler) Queue(b *pgx.Batch, ev engine.Event) error {
	switch ev.Type {
	case contract.TypeOrderCreated:
		created, err := payload.Created(ev)
		if err != nil {
			return err
		}
		queue(b, processSQL, created.GetOrderId(), "marking order %s processed")
		return nil
	case contract.TypeOrderCancelled:
		cancelled, err := payload.Cancelled(ev)
		if err != nil {
			return err
		}
		queue(b, cancelSQL, cancelled.GetOrderId(), "cancelling order %s")
		return nil
	default:
		return payload.Unknown(ev)
	}
}

// probeOrderID is an order ID no order has (the nil UUID): the probe runs
// both changes on it, so they check their tables, columns and privileges
// and change nothing.
const probeOrderID = "00000000-0000-0000-0000-000000000000"

// Probe implements engine.Prober: both statements, on an order that does
// not exist.
func (Handler) Probe(ctx context.Context, tx pgx.Tx) error {
	for _, sql := range []string{processSQL, cancelSQL} {
		if _, err := tx.Exec(ctx, sql, probeOrderID); err != nil {
			return err
		}
	}
	return nil
}

// The two changes, one statement each. Both answer whether the order exists
// (in the statement's snapshot, or because the statement changed it), so a
// missing order rolls the transaction back instead of leaving a mark
// without an effect.
//
// processSQL moves a created order to processed and creates its shipment;
// an order already past created (e.g. cancelled) is left as it is and gets
// no shipment. The UPDATE's condition is re-checked on the newest version
// of a row a concurrent transaction changed, so an order cancelled
// meanwhile is never processed.
//
// processSQL tests the status as `(status = 'created') IS TRUE`, which no
// index answers, so that PostgreSQL finds the row by its primary key. With
// the plain `status = 'created'` it used orders_status_created_at_id_idx
// instead (its statistics say few orders are created) and walked that
// index's entries of every created order, live or updated since the last
// vacuum, for each event, at a cost that grew with the entries no vacuum
// had removed yet (docs/bench.md, *The 1,000 orders/s window, found*).
// status is NOT NULL, so both tests agree.
//
// cancelSQL marks the order cancelled (the order API may have done so
// already, in the transaction that recorded the event) and cancels its
// shipment, if it has one.
const (
	processSQL = `WITH processed AS (
	UPDATE orders SET status = 'processed', updated_at = now()
	WHERE id = $1 AND (status = 'created') IS TRUE
	RETURNING id
), shipped AS (
	INSERT INTO shipments (order_id) SELECT id FROM processed
)
SELECT EXISTS (SELECT FROM processed) OR EXISTS (SELECT FROM orders WHERE id = $1)`

	cancelSQL = `WITH cancelled AS (
	UPDATE orders SET status = 'cancelled', updated_at = now()
	WHERE id = $1 AND status <> 'cancelled'
	RETURNING id
), shipment AS (
	UPDATE shipments SET cancelled_at = now() WHERE order_id = $1 AND cancelled_at IS NULL
)
SELECT EXISTS (SELECT FROM cancelled) OR EXISTS (SELECT FROM orders WHERE id = $1)`
)

// queue adds one change and its check: the order must exist.
func queue(b *pgx.Batch, sql, orderID, what string) {
	b.Queue(sql, orderID).QueryRow(func(row pgx.Row) error {
		var found bool
		if err := row.Scan(&found); err != nil {
			return fmt.Errorf(what+": %w", orderID, err)
		}
		if !found {
			return payload.OrderNotFound(orderID)
		}
		return nil
	})
}
