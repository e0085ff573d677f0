package fulfillment

import (
	"context"
	"fmt"

	"github.com/eventforge/eventforge/consumer/audit"
)

// Audit is the fulfillment audit.Check: the effect of an OrderCreated event is one shipment of
// its order, the effect of an OrderCancelled event the cancellation of that
// shipment (both count as business changes).
//
// Keyed on orders, for all time: a second shipment of an order is a
// duplicate effect. Keyed on attributed events: a mark for an OrderCreated
// event whose order has no shipment (and was not cancelled before
// fulfillment) is a mark without effect; a shipment of an order whose
// attributed OrderCreated events have no mark is an effect without mark.
func Audit(ctx context.Context, q audit.Querier, consumer string, s audit.Scope) (audit.Effects, error) {
	var e audit.Effects
	err := q.QueryRow(ctx, `SELECT
		(SELECT count(*) + count(cancelled_at) FROM shipments),
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM shipments GROUP BY order_id HAVING count(*) > 1) d)`).
		Scan(&e.Changes, &e.Duplicates)
	if err != nil {
		return e, fmt.Errorf("counting shipments: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT order_id::text, count(*) FROM shipments GROUP BY order_id HAVING count(*) > 1 ORDER BY order_id LIMIT $1`, audit.MaxDetails)
	if err != nil {
		return e, fmt.Errorf("listing duplicate shipments: %w", err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return e, fmt.Errorf("listing duplicate shipments: %w", err)
		}
		e.Detail("duplicate effect: order %s has %d shipments", id, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return e, fmt.Errorf("listing duplicate shipments: %w", err)
	}

	args := s.With(consumer)
	err = q.QueryRow(ctx, `WITH `+s.CTE+`
		SELECT count(*) FROM processed_events pe
		JOIN ev ON ev.id = pe.event_id AND ev.type = 'OrderCreated'
		JOIN orders ord ON ord.id = ev.order_id
		WHERE pe.consumer = $1 AND ord.status <> 'cancelled'
		  AND NOT EXISTS (SELECT FROM shipments s WHERE s.order_id = ord.id)`, args...).Scan(&e.MarksWithoutEffect)
	if err != nil {
		return e, fmt.Errorf("finding marks without effect: %w", err)
	}
	if e.MarksWithoutEffect > 0 {
		e.Detail("mark without effect: %d OrderCreated marks whose order has no shipment", e.MarksWithoutEffect)
	}
	err = q.QueryRow(ctx, `WITH `+s.CTE+`,
		created AS (
			SELECT ev.order_id, bool_or(pe.event_id IS NOT NULL) AS marked
			FROM ev LEFT JOIN processed_events pe ON pe.consumer = $1 AND pe.event_id = ev.id
			WHERE ev.type = 'OrderCreated'
			GROUP BY ev.order_id)
		SELECT count(*) FROM created c
		WHERE NOT c.marked AND EXISTS (SELECT FROM shipments s WHERE s.order_id = c.order_id)`, args...).Scan(&e.EffectsWithoutMark)
	if err != nil {
		return e, fmt.Errorf("finding effects without mark: %w", err)
	}
	if e.EffectsWithoutMark > 0 {
		e.Detail("effect without mark: %d orders shipped without a mark for their OrderCreated event", e.EffectsWithoutMark)
	}
	e.Unattributed, err = audit.UnattributedMarks(ctx, q, consumer, s)
	return e, err
}

// OrderEffects is the fulfillment audit.OrderCount: the order's shipments
// (a cancelled one included).
func OrderEffects(ctx context.Context, q audit.RowQuerier, orderID string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM shipments WHERE order_id::text = $1`, orderID).Scan(&n)
	return n, err
}
