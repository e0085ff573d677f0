// Package audit is what a consumer tells `eventforge verify` about its
// business tables: each registered consumer (consumer/registry) names a
// Check that compares its effects with its marks, and may name an
// OrderCount that counts its effects on one order, so that verify audits a
// new consumer without knowing its tables.
package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the part of a pgxpool.Pool a Check reads with.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Scope is every event verify can still attribute to its order, as SQL: CTE
// defines a common table expression `ev (id uuid, order_id uuid, type
// text)` that reads Args as the parameters $2, $3, …; $1 is the consumer's
// name. A Check writes `WITH ` + s.CTE + ` SELECT …` and passes
// s.With(consumer).
type Scope struct {
	CTE  string
	Args []any
}

// With returns the consumer's name followed by the scope's arguments.
func (s Scope) With(consumer string) []any {
	return append([]any{consumer}, s.Args...)
}

// Effects is what one consumer's business tables say, beside its marks
// (processed_events rows).
type Effects struct {
	// Changes counts the business changes the tables hold.
	Changes int
	// Duplicates counts effects applied more than once.
	Duplicates int
	// MarksWithoutEffect counts marks whose effect is missing.
	MarksWithoutEffect int
	// EffectsWithoutMark counts effects whose event has no mark.
	EffectsWithoutMark int
	// Unattributed counts marks whose event the scope does not hold.
	Unattributed int
	// Details names examples of the above, at most MaxDetails.
	Details []string
}

// MaxDetails bounds the details of one consumer's effects.
const MaxDetails = 20

// Detail adds one example, up to MaxDetails.
func (e *Effects) Detail(format string, args ...any) {
	if len(e.Details) < MaxDetails {
		e.Details = append(e.Details, fmt.Sprintf(format, args...))
	}
}

// Check compares a consumer's business tables with its marks.
type Check func(ctx context.Context, q Querier, consumer string, s Scope) (Effects, error)

// RowQuerier is the part of a pgxpool.Pool an OrderCount reads with.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// OrderCount counts a consumer's business effects on one order (the
// fulfillment consumer's: the order's shipments). verify's per-order audit
// (verify.AuditOrder, verify.OrderChanges) reports it as the order's
// business changes, which the console's order trace and drills show.
type OrderCount func(ctx context.Context, q RowQuerier, orderID string) (int, error)

// UnattributedMarks counts the consumer's marks whose event s does not
// hold.
func UnattributedMarks(ctx context.Context, q Querier, consumer string, s Scope) (int, error) {
	var n int
	err := q.QueryRow(ctx, `WITH `+s.CTE+`
		SELECT count(*) FROM processed_events pe WHERE pe.consumer = $1 AND NOT EXISTS (SELECT FROM ev WHERE ev.id = pe.event_id)`,
		s.With(consumer)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting unattributed marks of %s: %w", consumer, err)
	}
	return n, nil
}
