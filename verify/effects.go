package verify

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/consumer/fulfillment"
	"github.com/eventforge/eventforge/consumer/ledger"
)

// effects is what one consumer's business tables say.
type effects struct {
	changes            int
	duplicates         int
	marksWithoutEffect int
	effectsWithoutMark int
	// unattributed counts marks whose event attr does not hold.
	unattributed int
	details      []string
}

// maxEffectDetails bounds the details of one consumer's effects.
const maxEffectDetails = 20

func (e *effects) detail(format string, args ...any) {
	if len(e.details) < maxEffectDetails {
		e.details = append(e.details, fmt.Sprintf(format, args...))
	}
}

// effectCheck reads a consumer's business tables; attr attributes the
// events that still can be to their orders.
type effectCheck func(ctx context.Context, pool *pgxpool.Pool, consumer string, attr attribution) (effects, error)

// effectChecks knows, per consumer name, how its effects are stored.
var effectChecks = map[string]effectCheck{
	fulfillment.Name: fulfillmentEffects,
	ledger.Name:      ledgerEffects,
}

func knownConsumers() []string {
	names := make([]string, 0, len(effectChecks))
	for n := range effectChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// unattributedMarks counts the consumer's marks whose event attr does not
// hold.
func unattributedMarks(ctx context.Context, pool *pgxpool.Pool, consumer string, attr attribution) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `WITH `+eventsCTE+`
		SELECT count(*) FROM processed_events pe WHERE pe.consumer = $1 AND NOT EXISTS (SELECT FROM ev WHERE ev.id = pe.event_id)`,
		append([]any{consumer}, attr.args()...)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting unattributed marks of %s: %w", consumer, err)
	}
	return n, nil
}

// fulfillmentEffects: the effect of an OrderCreated event is one shipment of
// its order, the effect of an OrderCancelled event the cancellation of that
// shipment (both count as business changes).
//
// Keyed on orders, for all time: a second shipment of an order is a
// duplicate effect. Keyed on attributed events: a mark for an OrderCreated
// event whose order has no shipment (and was not cancelled before
// fulfillment) is a mark without effect; a shipment of an order whose
// attributed OrderCreated events have no mark is an effect without mark.
func fulfillmentEffects(ctx context.Context, pool *pgxpool.Pool, consumer string, attr attribution) (effects, error) {
	var e effects
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) + count(cancelled_at) FROM shipments),
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM shipments GROUP BY order_id HAVING count(*) > 1) d)`).
		Scan(&e.changes, &e.duplicates)
	if err != nil {
		return e, fmt.Errorf("counting shipments: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT order_id::text, count(*) FROM shipments GROUP BY order_id HAVING count(*) > 1 ORDER BY order_id LIMIT $1`, maxEffectDetails)
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
		e.detail("duplicate effect: order %s has %d shipments", id, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return e, fmt.Errorf("listing duplicate shipments: %w", err)
	}

	args := append([]any{consumer}, attr.args()...)
	err = pool.QueryRow(ctx, `WITH `+eventsCTE+`
		SELECT count(*) FROM processed_events pe
		JOIN ev ON ev.id = pe.event_id AND ev.type = 'OrderCreated'
		JOIN orders ord ON ord.id = ev.order_id
		WHERE pe.consumer = $1 AND ord.status <> 'cancelled'
		  AND NOT EXISTS (SELECT FROM shipments s WHERE s.order_id = ord.id)`, args...).Scan(&e.marksWithoutEffect)
	if err != nil {
		return e, fmt.Errorf("finding marks without effect: %w", err)
	}
	if e.marksWithoutEffect > 0 {
		e.detail("mark without effect: %d OrderCreated marks whose order has no shipment", e.marksWithoutEffect)
	}
	err = pool.QueryRow(ctx, `WITH `+eventsCTE+`,
		created AS (
			SELECT ev.order_id, bool_or(pe.event_id IS NOT NULL) AS marked
			FROM ev LEFT JOIN processed_events pe ON pe.consumer = $1 AND pe.event_id = ev.id
			WHERE ev.type = 'OrderCreated'
			GROUP BY ev.order_id)
		SELECT count(*) FROM created c
		WHERE NOT c.marked AND EXISTS (SELECT FROM shipments s WHERE s.order_id = c.order_id)`, args...).Scan(&e.effectsWithoutMark)
	if err != nil {
		return e, fmt.Errorf("finding effects without mark: %w", err)
	}
	if e.effectsWithoutMark > 0 {
		e.detail("effect without mark: %d orders shipped without a mark for their OrderCreated event", e.effectsWithoutMark)
	}
	e.unattributed, err = unattributedMarks(ctx, pool, consumer, attr)
	return e, err
}

// ledgerBucket is one ledger row (customer and currency) beside what the
// marks and the orders say about it.
type ledgerBucket struct {
	customer, currency string
	// counted and cancelCounted are the ledger's counters.
	counted, cancelCounted int
	// marked and cancelMarked count the attributed marks of OrderCreated
	// and OrderCancelled events of the bucket's orders.
	marked, cancelMarked int
	// orders and cancelledOrders count the bucket's orders and those
	// cancelled: each order has one OrderCreated and at most one
	// OrderCancelled event.
	orders, cancelledOrders int
}

// ledgerEffects: the ledger keeps per-customer counters of created and
// cancelled orders, each incremented in the transaction that writes the
// event's mark.
func ledgerEffects(ctx context.Context, pool *pgxpool.Pool, consumer string, attr attribution) (effects, error) {
	rows, err := pool.Query(ctx, `WITH `+eventsCTE+`,
		marked AS (
			SELECT o.customer_id, o.currency,
			       count(*) FILTER (WHERE ev.type = 'OrderCreated') AS created,
			       count(*) FILTER (WHERE ev.type = 'OrderCancelled') AS cancelled
			FROM processed_events pe
			JOIN ev ON ev.id = pe.event_id
			JOIN orders o ON o.id = ev.order_id
			WHERE pe.consumer = $1
			GROUP BY o.customer_id, o.currency),
		placed AS (
			SELECT customer_id, currency, count(*) AS orders, count(*) FILTER (WHERE status = 'cancelled') AS cancelled
			FROM orders GROUP BY customer_id, currency),
		counted AS (
			SELECT coalesce(l.customer_id, m.customer_id) AS customer_id, coalesce(l.currency, m.currency) AS currency,
			       coalesce(l.order_count, 0) AS order_count, coalesce(m.created, 0) AS created,
			       coalesce(l.cancelled_count, 0) AS cancelled_count, coalesce(m.cancelled, 0) AS cancelled
			FROM ledger l FULL JOIN marked m ON m.customer_id = l.customer_id AND m.currency = l.currency)
		SELECT c.customer_id, c.currency, c.order_count, c.created, c.cancelled_count, c.cancelled,
		       coalesce(p.orders, 0), coalesce(p.cancelled, 0)
		FROM counted c LEFT JOIN placed p ON p.customer_id = c.customer_id AND p.currency = c.currency
		ORDER BY c.customer_id, c.currency`, append([]any{consumer}, attr.args()...)...)
	if err != nil {
		return effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
	}
	var buckets []ledgerBucket
	for rows.Next() {
		var b ledgerBucket
		if err := rows.Scan(&b.customer, &b.currency, &b.counted, &b.marked, &b.cancelCounted, &b.cancelMarked, &b.orders, &b.cancelledOrders); err != nil {
			rows.Close()
			return effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
		}
		buckets = append(buckets, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
	}
	var marks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = $1`, consumer).Scan(&marks); err != nil {
		return effects{}, fmt.Errorf("counting marks of %s: %w", consumer, err)
	}
	return compareLedger(buckets, marks), nil
}

// compareLedger compares the ledger's counters with the marks.
//
// In all: every increment commits with one mark, so the sum of all counters
// must equal the number of the ledger's marks, whatever can be attributed.
// More counted is a duplicate effect, fewer a mark without effect.
//
// Per customer and currency: a counter must be at least the bucket's
// attributed marks of its kind (fewer is a mark without effect) and at most
// those plus the marks that cannot be attributed, and never more than the
// bucket's orders (or cancelled orders) — more is a duplicate effect. When
// every mark is attributed, this is equality.
func compareLedger(buckets []ledgerBucket, marks int) effects {
	var e effects
	attributed, counted := 0, 0
	for _, b := range buckets {
		attributed += b.marked + b.cancelMarked
		counted += b.counted + b.cancelCounted
	}
	e.changes = counted
	e.unattributed = max(marks-attributed, 0)
	var surplus, deficit int
	for _, b := range buckets {
		for _, c := range []struct {
			what                  string
			counted, marks, bound int
		}{
			{"orders", b.counted, b.marked, b.orders},
			{"cancellations", b.cancelCounted, b.cancelMarked, b.cancelledOrders},
		} {
			upper := c.marks
			if e.unattributed > 0 {
				upper = max(c.marks, min(c.marks+e.unattributed, c.bound))
			}
			switch {
			case c.counted > upper:
				surplus += c.counted - upper
				e.detail("duplicate effect: ledger counts %d %s of %s/%s for %d marks (%d marks unattributed, %d such orders)",
					c.counted, c.what, b.customer, b.currency, c.marks, e.unattributed, c.bound)
			case c.counted < c.marks:
				deficit += c.marks - c.counted
				e.detail("mark without effect: ledger counts %d %s of %s/%s for %d marks", c.counted, c.what, b.customer, b.currency, c.marks)
			}
		}
	}
	e.duplicates, e.marksWithoutEffect = surplus, deficit
	switch diff := counted - marks; {
	case diff > surplus:
		e.duplicates = diff
		e.detail("duplicate effect: the ledger's counters add up to %d for %d marks", counted, marks)
	case -diff > deficit:
		e.marksWithoutEffect = -diff
		e.detail("mark without effect: the ledger's counters add up to %d for %d marks", counted, marks)
	}
	return e
}
