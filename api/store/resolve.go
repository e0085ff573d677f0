package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Settling a write whose commit answer was lost.
//
// A write whose commit request (the pipeline's Sync, or COMMIT) was sent
// and whose answer never came (the connection failed, or the deadline
// ended the wait and pgx closed the connection) may have committed — or
// may still commit: PostgreSQL runs what it has received even after the
// client is gone. resolve makes the outcome final and then reads it:
//
//  1. It ends the backend that ran the transaction, if that backend still
//     exists, and waits until the process has exited
//     (pg_terminate_backend with a timeout). From then on nothing of the
//     transaction can commit: it has committed, or it never will.
//  2. It looks for what the write stores, in a snapshot taken after that:
//     present means committed, absent means rolled back.
//
// The backend is found by its process ID, in the same database and of the
// same role: the connection that ran the write is closed, so its ID could
// only name another backend once that one has exited and the ID has been
// handed out again in the moment since. A resolution that cannot reach
// the database, or whose backend does not exit, within the resolver's
// timeout leaves the outcome unknown.
//
// Why not pg_xact_status of the transaction's ID: the api learns that ID
// only from an answer, and the answer that would carry it is the one that
// was lost (asking for it first would cost a round trip per write), and an
// ID whose transaction is still in progress tells nothing until it ends.

// DefaultResolveTimeout is the default of WithResolveTimeout.
const DefaultResolveTimeout = 5 * time.Second

// WithResolveTimeout bounds how long the store spends finding out whether
// a write whose commit answer was lost committed (resolve.go); d below 1 ms
// is taken as 1 ms.
func WithResolveTimeout(d time.Duration) Option {
	return func(s *Store) { s.resolver.timeout = max(d, time.Millisecond) }
}

// resolver settles failed writes; see the comment at the top of this file.
type resolver struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	// started, when set, is called as a resolution begins (tests).
	started func()
}

// check reports whether a write is in the database, through q.
type check func(ctx context.Context, q querier) (committed bool, err error)

// ordersExist is the check of a create of orders (one, or a group's): all
// of them exist (committed) or none does (rolled back).
func ordersExist(ids ...uuid.UUID) check {
	return func(ctx context.Context, q querier) (bool, error) {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1)`, ids).Scan(&n); err != nil {
			return false, fmt.Errorf("looking for the orders: %w", err)
		}
		switch n {
		case len(ids):
			return true, nil
		case 0:
			return false, nil
		}
		return false, fmt.Errorf("%d of the %d orders of one transaction exist", n, len(ids))
	}
}

// settle tells the outcome of a write that failed with err after getting as
// far as a: outcome is nil when the write turned out committed (only its
// answer was lost), ErrNotWritten or ErrOutcomeUnknown otherwise, and cause
// is the error to report with it. orders is the number of order writes the
// transaction held, as the metric counts them.
func (r *resolver) settle(ctx context.Context, err error, a attempt, committed check, orders int) (outcome, cause error) {
	cause = classify(err)
	if errors.Is(outcomeOf(err, a), ErrNotWritten) {
		return ErrNotWritten, cause
	}
	ok, rerr := r.resolve(ctx, a.pid, committed)
	switch {
	case rerr != nil:
		answerLost.WithLabelValues(resolutionUnknown).Add(float64(orders))
		return ErrOutcomeUnknown, fmt.Errorf("%w (finding out whether it committed: %w)", cause, rerr)
	case ok:
		answerLost.WithLabelValues(resolutionCommitted).Add(float64(orders))
		return nil, nil
	}
	answerLost.WithLabelValues(resolutionRolledBack).Add(float64(orders))
	return ErrNotWritten, fmt.Errorf("%w (the transaction was found rolled back)", cause)
}

// resolve ends backend pid, if it still runs, and then runs committed.
func (r *resolver) resolve(ctx context.Context, pid uint32, committed check) (bool, error) {
	if r.started != nil {
		r.started()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquiring a connection: %w", err)
	}
	defer c.Release()
	if pid != 0 {
		wait := time.Until(deadlineOf(ctx)).Milliseconds()
		var ended bool
		err := c.QueryRow(ctx, `SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity
			WHERE pid = $1 AND datname = current_database() AND usename = current_user`, int32(pid), max(wait, 1)).Scan(&ended)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The backend has exited.
		case err != nil:
			return false, fmt.Errorf("ending backend %d: %w", pid, err)
		case !ended:
			return false, fmt.Errorf("backend %d did not exit in time", pid)
		}
	}
	return committed(ctx, c)
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// detach returns a context with ctx's deadline and values but not its
// cancellation: a write that has begun runs to its end, or to the
// caller's deadline, when the caller goes away, instead of being cut off
// at a point where its outcome is unknown.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(wctx, d)
	}
	return wctx, func() {}
}
