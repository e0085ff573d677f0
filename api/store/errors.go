package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors callers branch on.
var (
	// ErrOrderNotFound: no order has the given ID.
	ErrOrderNotFound = errors.New("order not found")
	// ErrKeyReused: the idempotency key is recorded for a different request;
	// nothing was written.
	ErrKeyReused = errors.New("idempotency key already used for a different request")
	// ErrNotCancellable: the order's status does not allow cancelling it.
	ErrNotCancellable = errors.New("order cannot be cancelled in its current status")

	// ErrNotWritten is the outcome of a write that did not happen and
	// cannot happen later: nothing of it reached PostgreSQL, or it was
	// never committed (PostgreSQL refused a statement or the commit and
	// rolled it back, or the connection was lost before the commit was
	// sent, or the store found the transaction rolled back; see
	// WriteError). Retrying it cannot double it.
	ErrNotWritten = errors.New("not written")
	// ErrOutcomeUnknown is the outcome of a write whose commit was sent
	// and whose answer was lost, and whose transaction the store could not
	// find committed or rolled back: it may have been committed. Only a
	// retry under the same idempotency key, or a read of the order, tells.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrUnavailable is a cause: the database could not be reached, or the
	// connection was lost.
	ErrUnavailable = errors.New("database unavailable")
	// ErrRetryable is a cause: PostgreSQL refused the statement for a
	// passing reason (a statement or lock timeout, a serialization failure
	// or deadlock, out of memory or disk, too many connections) and rolled
	// its transaction back; the same request may succeed when tried again.
	ErrRetryable = errors.New("refused for a passing reason")
)

// WriteError is the error of a create or cancel that failed: its outcome
// (ErrNotWritten or ErrOutcomeUnknown), the order and event it was writing,
// and the cause. errors.Is matches the outcome and the cause (ErrUnavailable,
// ErrRetryable, a context error, a *pgconn.PgError, …).
type WriteError struct {
	// Outcome is ErrNotWritten or ErrOutcomeUnknown.
	Outcome error
	// OrderID and EventID are the IDs the write would have stored: the
	// order created or cancelled, and the event recorded with it.
	OrderID, EventID uuid.UUID
	// Err is what went wrong.
	Err error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("%s (order %s, event %s): %v", e.Outcome, e.OrderID, e.EventID, e.Err)
}

func (e *WriteError) Unwrap() []error { return []error{e.Outcome, e.Err} }

// attempt is what a write knows about how far it got.
type attempt struct {
	// commitSent: the request that commits the transaction (the pipeline's
	// Sync, or COMMIT) was handed to the connection, so PostgreSQL may
	// have committed it whatever the write saw afterwards.
	commitSent bool
	// pid is the PostgreSQL backend that ran the transaction (0 when no
	// connection was acquired).
	pid uint32
}

// outcomeOf tells what a failed write left behind, from what it knows
// (ErrNotWritten or ErrOutcomeUnknown; the latter may still be resolved,
// see resolve):
//   - PostgreSQL answered ERROR (its unlocalized severity: the localized one
//     is translated under lc_messages), or COMMIT answered ROLLBACK: the
//     transaction rolled back. A FATAL or PANIC, by contrast, ends the
//     connection at a point the write cannot see.
//   - The commit request was never sent, or pgconn reports that none of
//     its bytes were written (pgconn.SafeToRetry): the server closes the
//     connection and rolls the transaction back.
//   - Anything else after the commit request was sent: unknown.
func outcomeOf(err error, a attempt) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR",
		errors.Is(err, pgx.ErrTxCommitRollback),
		!a.commitSent,
		pgconn.SafeToRetry(err):
		return ErrNotWritten
	}
	return ErrOutcomeUnknown
}

// classify marks err with its cause, so the rpc layer can answer
// UNAVAILABLE to a failure a retry may not meet again: ErrUnavailable for
// a database that cannot be reached or a lost connection, ErrRetryable for
// a refusal of a passing kind. Other errors (and context errors, which the
// caller knows by its context) stay as they are.
func classify(err error) error {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &connectErr):
		// No connection could be made, whatever the server said (refused,
		// shutting down, database not accepting connections, too many
		// connections): the store is unavailable.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.As(err, &pgErr):
		switch {
		case connectionLost(pgErr.Code):
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		case passing(pgErr.Code):
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		return err
	case pgconn.SafeToRetry(err), isConnectError(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// connectionLost reports whether a SQLSTATE ends or refuses the session:
// class 08 (connection exception), 57P01..03 (admin shutdown, crash
// shutdown, cannot connect now).
func connectionLost(code string) bool {
	return code[:2] == "08" || code == "57P01" || code == "57P02" || code == "57P03"
}

// passing reports whether a SQLSTATE refuses a statement for a reason that
// a retry of the same request may not meet: 40001 serialization failure,
// 40P01 deadlock, 55P03 lock not available (lock_timeout), 57014 query
// cancelled (statement_timeout), class 53 insufficient resources (disk full
// 53100, out of memory 53200, too many connections 53300, a configured
// limit 53400).
func passing(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "57014":
		return true
	}
	return code[:2] == "53"
}

func isConnectError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
