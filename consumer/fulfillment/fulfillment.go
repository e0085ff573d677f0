// Package fulfillment is the consumer that turns orders into shipments: on
// OrderCreated it moves the order from created to processed and creates its
// shipment; on OrderCancelled it marks the order cancelled and cancels its
// shipment. Both run in the runtime's transaction.
package fulfillment

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/payload"
	"github.com/eventforge/eventforge/consumer/runtime"
)

// Name is the consumer name: the group is eventforge-fulfillment and the
// marks are (fulfillment, event_id).
const Name = "fulfillment"

// ErrOrderNotFound means the event names an order that does not exist; the
// transaction rolls back so no mark is left without an effect, and the
// runtime retries the event, then dead-letters it.
var ErrOrderNotFound = fmt.Errorf("order not found: %w", runtime.ErrNotFound)

// Handler applies order events for fulfillment.
type Handler struct{}

// Apply implements runtime.Handler.
func (Handler) Apply(ctx context.Context, tx pgx.Tx, ev runtime.Event) error {
	switch ev.Type {
	case payload.TypeOrderCreated:
		created, err := payload.Created(ev)
		if err != nil {
			return err
		}
		return process(ctx, tx, created.GetOrderId())
	case payload.TypeOrderCancelled:
		cancelled, err := payload.Cancelled(ev)
		if err != nil {
			return err
		}
		return cancel(ctx, tx, cancelled.GetOrderId())
	default:
		return payload.Unknown(ev)
	}
}

// lockStatus locks the order row and returns its status.
func lockStatus(ctx context.Context, tx pgx.Tx, orderID string) (string, error) {
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1 FOR UPDATE`, orderID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("locking order %s: %w", orderID, err)
	}
	return status, nil
}

// process moves a created order to processed and creates its shipment. An
// order already past created (e.g. cancelled) gets no shipment.
func process(ctx context.Context, tx pgx.Tx, orderID string) error {
	status, err := lockStatus(ctx, tx, orderID)
	if err != nil {
		return err
	}
	if status != "created" {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'processed', updated_at = now() WHERE id = $1`, orderID); err != nil {
		return fmt.Errorf("marking order %s processed: %w", orderID, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, orderID); err != nil {
		return fmt.Errorf("creating shipment for order %s: %w", orderID, err)
	}
	return nil
}

// cancel marks the order cancelled (the order API may have done so already,
// in the transaction that recorded the event) and cancels its shipment, if
// it has one.
func cancel(ctx context.Context, tx pgx.Tx, orderID string) error {
	status, err := lockStatus(ctx, tx, orderID)
	if err != nil {
		return err
	}
	if status != "cancelled" {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'cancelled', updated_at = now() WHERE id = $1`, orderID); err != nil {
			return fmt.Errorf("marking order %s cancelled: %w", orderID, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE shipments SET cancelled_at = now() WHERE order_id = $1 AND cancelled_at IS NULL`, orderID); err != nil {
		return fmt.Errorf("cancelling shipment of order %s: %w", orderID, err)
	}
	return nil
}
