package ledger

import (
	"context"
	"fmt"

	"github.com/eventforge/eventforge/consumer/audit"
)

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

// Audit is the ledger audit.Check: the ledger keeps per-customer counters of created and
// cancelled orders, each incremented in the transaction that writes the
// event's mark.
func Audit(ctx context.Context, q audit.Querier, consumer string, s audit.Scope) (audit.Effects, error) {
	rows, err := q.Query(ctx, `WITH `+s.CTE+`,
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
		ORDER BY c.customer_id, c.currency`, s.With(consumer)...)
	if err != nil {
		return audit.Effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
	}
	var buckets []ledgerBucket
	for rows.Next() {
		var b ledgerBucket
		if err := rows.Scan(&b.customer, &b.currency, &b.counted, &b.marked, &b.cancelCounted, &b.cancelMarked, &b.orders, &b.cancelledOrders); err != nil {
			rows.Close()
			return audit.Effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
		}
		buckets = append(buckets, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return audit.Effects{}, fmt.Errorf("comparing the ledger with its marks: %w", err)
	}
	var marks int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = $1`, consumer).Scan(&marks); err != nil {
		return audit.Effects{}, fmt.Errorf("counting marks of %s: %w", consumer, err)
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
func compareLedger(buckets []ledgerBucket, marks int) audit.Effects {
	var e audit.Effects
	attributed, counted := 0, 0
	for _, b := range buckets {
		attributed += b.marked + b.cancelMarked
		counted += b.counted + b.cancelCounted
	}
	e.Changes = counted
	e.Unattributed = max(marks-attributed, 0)
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
			if e.Unattributed > 0 {
				upper = max(c.marks, min(c.marks+e.Unattributed, c.bound))
			}
			switch {
			case c.counted > upper:
				surplus += c.counted - upper
				e.Detail("duplicate effect: ledger counts %d %s of %s/%s for %d marks (%d marks unattributed, %d such orders)",
					c.counted, c.what, b.customer, b.currency, c.marks, e.Unattributed, c.bound)
			case c.counted < c.marks:
				deficit += c.marks - c.counted
				e.Detail("mark without effect: ledger counts %d %s of %s/%s for %d marks", c.counted, c.what, b.customer, b.currency, c.marks)
			}
		}
	}
	e.Duplicates, e.MarksWithoutEffect = surplus, deficit
	switch diff := counted - marks; {
	case diff > surplus:
		e.Duplicates = diff
		e.Detail("duplicate effect: the ledger's counters add up to %d for %d marks", counted, marks)
	case -diff > deficit:
		e.MarksWithoutEffect = -diff
		e.Detail("mark without effect: the ledger's counters add up to %d for %d marks", counted, marks)
	}
	return e
}
