// Package fulfillment is the consumer that turns a created order into a
// shipment: on OrderCreated it moves the order from created to processed and
// creates its shipment, in the runtime's transaction.
package fulfillment

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/consumer/runtime"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Name is the consumer name: the group is eventforge-fulfillment and the
// marks are (fulfillment, event_id).
const Name = "fulfillment"

// ErrOrderNotFound means the event names an order that does not exist; the
// transaction rolls back so no mark is left without an effect.
var ErrOrderNotFound = errors.New("order not found")

// payloadJSON parses event payloads; unknown fields are ignored so producers
// can add fields without breaking consumers.
var payloadJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// Handler applies order events for fulfillment.
type Handler struct{}

// Apply implements runtime.Handler.
func (Handler) Apply(ctx context.Context, tx pgx.Tx, ev runtime.Event) error {
	switch ev.Type {
	case "OrderCreated":
		var created eventforgev1.OrderCreated
		if err := payloadJSON.Unmarshal(ev.Payload, &created); err != nil {
			return fmt.Errorf("%w: OrderCreated payload: %v", runtime.ErrMalformed, err)
		}
		if created.GetOrderId() != ev.Key {
			return fmt.Errorf("%w: payload order_id %q differs from key %q", runtime.ErrMalformed, created.GetOrderId(), ev.Key)
		}
		return process(ctx, tx, created.GetOrderId())
	default:
		// Events this consumer has no business with are marked and skipped.
		return nil
	}
}

// process moves a created order to processed and creates its shipment. An
// order already past created (e.g. cancelled) gets no shipment.
func process(ctx context.Context, tx pgx.Tx, orderID string) error {
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1 FOR UPDATE`, orderID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
	}
	if err != nil {
		return fmt.Errorf("locking order %s: %w", orderID, err)
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
