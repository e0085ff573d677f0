package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CancelEventFunc builds the OrderCancelled outbox event of an order that is
// being cancelled; the order is passed as it will be stored.
type CancelEventFunc func(cancelled Order) (OutboxEvent, error)

// Cancelled is the outcome of CancelOrder.
type Cancelled struct {
	// Order is the order after the call, with its items.
	Order Order
	// Changed is false when the order was already cancelled: nothing was
	// written and EventID is the zero UUID.
	Changed bool
	EventID uuid.UUID
}

// CancelOrder moves the order to cancelled at time at (or at its last
// change, if that is later: updated_at never goes back) and writes the
// event that event builds, in one transaction that holds the order's row
// lock. An order in status created or processed is cancelled; one already
// cancelled is returned unchanged; any other status gives
// ErrNotCancellable. Like CreateOrder, the write runs under ctx's deadline
// but not its cancellation, and another failure is a *WriteError.
func (s *Store) CancelOrder(ctx context.Context, id uuid.UUID, at time.Time, event CancelEventFunc) (Cancelled, error) {
	wctx, cancel := detach(ctx)
	defer cancel()
	var res Cancelled
	var eventID uuid.UUID
	a, err := inTx(wctx, s.pool, func(tx pgx.Tx) error {
		res = Cancelled{}
		o, err := readOrder(wctx, tx, id, true)
		if err != nil {
			return err
		}
		switch o.Status {
		case StatusCancelled:
			res.Order = o
			return nil
		case StatusCreated, StatusProcessed:
		default:
			return fmt.Errorf("order %s in status %q: %w", id, o.Status, ErrNotCancellable)
		}
		o.Status, o.UpdatedAt = StatusCancelled, latest(at, o.UpdatedAt)
		ev, err := event(o)
		if err != nil {
			return fmt.Errorf("building cancel event: %w", err)
		}
		eventID = ev.ID
		headerJSON, err := encodeHeaders(ev.Headers)
		if err != nil {
			return err
		}
		writes := []statement{{cancelOrderSQL, []any{id, o.Status, o.UpdatedAt}}, outboxStatement(ev, headerJSON)}
		if err := tx.SendBatch(wctx, batch(writes)).Close(); err != nil {
			return err
		}
		if err := beforeCommit(wctx); err != nil {
			return err
		}
		res = Cancelled{Order: o, Changed: true, EventID: ev.ID}
		return nil
	})
	if err == nil {
		return res, nil
	}
	if errors.Is(err, ErrOrderNotFound) || errors.Is(err, ErrNotCancellable) {
		return Cancelled{}, err
	}
	outcome, cause := s.resolver.settle(wctx, err, a, cancelled(id, res.Order.UpdatedAt), 1)
	if outcome == nil {
		return res, nil
	}
	return Cancelled{}, &WriteError{Outcome: outcome, OrderID: id, EventID: eventID, Err: cause}
}

// cancelled is the check of a cancel: the order is cancelled at the time
// the cancel wrote (a concurrent cancel that won would have written its
// own time, microseconds apart).
func cancelled(id uuid.UUID, at time.Time) check {
	return func(ctx context.Context, q querier) (bool, error) {
		var ok bool
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM orders WHERE id = $1 AND status = $2 AND updated_at = $3)`,
			id, StatusCancelled, at).Scan(&ok)
		if err != nil {
			return false, fmt.Errorf("looking for the cancelled order: %w", err)
		}
		return ok, nil
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
