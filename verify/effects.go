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
	"ledger":      ledgerEffects,
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
// its order, the effect of an OrderCancelled event the cancellation of that
// shipment (both count as business changes). A second shipment is a duplicate effect; a mark for an
// OrderCreated event whose order has no shipment (and was not cancelled
// before fulfillment) is a mark without effect; a shipment with no mark for
// its order's OrderCreated event is an effect without mark.
func fulfillmentEffects(ctx context.Context, pool *pgxpool.Pool, consumer string) (effects, error) {
	var e effects
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) + count(cancelled_at) FROM shipments),
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

// ledgerEffects: the ledger keeps per-customer counters of created and
// cancelled orders. For each customer and currency, each counter must equal
// the number of the ledger's marks for events of that kind: more is a
// duplicate effect, fewer a mark without effect.
func ledgerEffects(ctx context.Context, pool *pgxpool.Pool, consumer string) (effects, error) {
	var e effects
	rows, err := pool.Query(ctx, `WITH marked AS (
			SELECT o.customer_id, o.currency,
			       count(*) FILTER (WHERE ob.type = 'OrderCreated') AS created,
			       count(*) FILTER (WHERE ob.type = 'OrderCancelled') AS cancelled
			FROM processed_events pe
			JOIN outbox ob ON ob.id = pe.event_id
			JOIN orders o ON o.id::text = ob.aggregateid
			WHERE pe.consumer = $1
			GROUP BY o.customer_id, o.currency)
		SELECT coalesce(l.customer_id, m.customer_id), coalesce(l.currency, m.currency),
		       coalesce(l.order_count, 0), coalesce(m.created, 0),
		       coalesce(l.cancelled_count, 0), coalesce(m.cancelled, 0)
		FROM ledger l FULL JOIN marked m ON m.customer_id = l.customer_id AND m.currency = l.currency`, consumer)
	if err != nil {
		return e, fmt.Errorf("comparing the ledger with its marks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var customer, currency string
		var counted, marked, cancelCounted, cancelMarked int
		if err := rows.Scan(&customer, &currency, &counted, &marked, &cancelCounted, &cancelMarked); err != nil {
			return e, err
		}
		e.changes += counted + cancelCounted
		for _, c := range []struct {
			what           string
			counted, marks int
		}{{"orders", counted, marked}, {"cancellations", cancelCounted, cancelMarked}} {
			switch {
			case c.counted > c.marks:
				e.duplicates += c.counted - c.marks
				if len(e.details) < 20 {
					e.details = append(e.details, fmt.Sprintf("duplicate effect: ledger counts %d %s of %s/%s for %d marks", c.counted, c.what, customer, currency, c.marks))
				}
			case c.counted < c.marks:
				e.marksWithoutEffect += c.marks - c.counted
				if len(e.details) < 20 {
					e.details = append(e.details, fmt.Sprintf("mark without effect: ledger counts %d %s of %s/%s for %d marks", c.counted, c.what, customer, currency, c.marks))
				}
			}
		}
	}
	return e, rows.Err()
}
