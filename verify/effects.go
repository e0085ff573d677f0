package verify

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
)

// effects is what one consumer's business tables say.
type effects struct {
	changes            int
	duplicates         int
	marksWithoutEffect int
	effectsWithoutMark int
	details            []string
}

// effectCheck reads a consumer's business tables.
type effectCheck func(ctx context.Context, pool *pgxpool.Pool, consumer string) (effects, error)

// effectChecks knows, per consumer name, how its effects are stored.
var effectChecks = map[string]effectCheck{
	"fulfillment": fulfillmentEffects,
}

func knownConsumers() []string {
	names := make([]string, 0, len(effectChecks))
	for n := range effectChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fulfillmentEffects: the effect of an OrderCreated event is one shipment of
// its order. A second shipment is a duplicate effect; a mark for an
// OrderCreated event whose order has no shipment (and was not cancelled
// before fulfillment) is a mark without effect; a shipment with no mark for
// its order's OrderCreated event is an effect without mark.
func fulfillmentEffects(ctx context.Context, pool *pgxpool.Pool, consumer string) (effects, error) {
	var e effects
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM shipments),
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM shipments GROUP BY order_id HAVING count(*) > 1) d)`).
		Scan(&e.changes, &e.duplicates)
	if err != nil {
		return e, fmt.Errorf("counting shipments: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT order_id::text, count(*) FROM shipments GROUP BY order_id HAVING count(*) > 1 LIMIT 20`)
	if err != nil {
		return e, fmt.Errorf("listing duplicate shipments: %w", err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return e, err
		}
		e.details = append(e.details, fmt.Sprintf("duplicate effect: order %s has %d shipments", id, n))
	}
	rows.Close()

	err = pool.QueryRow(ctx, `SELECT count(*) FROM processed_events pe
		JOIN outbox o ON o.id = pe.event_id AND o.type = 'OrderCreated'
		JOIN orders ord ON ord.id::text = o.aggregateid
		WHERE pe.consumer = $1 AND ord.status <> 'cancelled'
		  AND NOT EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = ord.id)`, consumer).Scan(&e.marksWithoutEffect)
	if err != nil {
		return e, fmt.Errorf("finding marks without effect: %w", err)
	}
	if e.marksWithoutEffect > 0 {
		e.details = append(e.details, fmt.Sprintf("%d OrderCreated marks whose order has no shipment", e.marksWithoutEffect))
	}
	err = pool.QueryRow(ctx, `SELECT count(DISTINCT s.order_id) FROM shipments s
		WHERE NOT EXISTS (SELECT 1 FROM outbox o JOIN processed_events pe ON pe.event_id = o.id AND pe.consumer = $1
		                  WHERE o.aggregateid = s.order_id::text AND o.type = 'OrderCreated')
		  AND EXISTS (SELECT 1 FROM outbox o WHERE o.aggregateid = s.order_id::text AND o.type = 'OrderCreated')`, consumer).Scan(&e.effectsWithoutMark)
	if err != nil {
		return e, fmt.Errorf("finding effects without mark: %w", err)
	}
	if e.effectsWithoutMark > 0 {
		e.details = append(e.details, fmt.Sprintf("%d orders shipped without a mark for their OrderCreated event", e.effectsWithoutMark))
	}
	return e, nil
}
