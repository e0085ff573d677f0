package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statement is one SQL statement of a write with its arguments.
type statement struct {
	sql  string
	args []any
}

// batch queues stmts, in order, on a pgx batch.
func batch(stmts []statement) *pgx.Batch {
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	return b
}

// execPipeline runs stmts in one round trip: they go out in one pipeline
// and PostgreSQL runs them as one implicit transaction that the pipeline's
// Sync commits (or rolls back, if any statement fails).
//
// beforeCommit is called after the last statement was queued and before the
// Sync. When it returns an error the connection is closed without a Sync, so
// PostgreSQL rolls the transaction back, and execPipeline returns that error.
// A process that dies inside beforeCommit leaves the same: a connection
// closed with an open implicit transaction.
//
// The attempt tells how far the write got: the backend that ran it, and
// whether the Sync (the commit) was handed to the connection.
//
// With sendFirst the statements are written to PostgreSQL before
// beforeCommit is called, so a hook that holds the write holds statements
// PostgreSQL has executed and not committed. Without it the statements and
// the Sync go out in one write after beforeCommit returned: one write
// syscall per order instead of two, and one wakeup of the backend instead of
// two (docs/bench.md, *One write per create*).
func execPipeline(ctx context.Context, pool *pgxpool.Pool, stmts []statement, sendFirst bool, beforeCommit func(context.Context) error) (attempt, error) {
	var a attempt
	c, err := pool.Acquire(ctx)
	if err != nil {
		return a, fmt.Errorf("acquiring a connection: %w", err)
	}
	defer c.Release() // a connection closed below is destroyed, not reused
	conn := c.Conn()
	a.pid = conn.PgConn().PID()

	// Prepared once per connection (Prepare answers from the connection's
	// own map after the first time), then executed by name.
	sds := make([]*pgconn.StatementDescription, len(stmts))
	for i, st := range stmts {
		if sds[i], err = conn.Prepare(ctx, st.sql, st.sql); err != nil {
			return a, fmt.Errorf("preparing statement %d: %w", i+1, err)
		}
	}

	var eqb pgx.ExtendedQueryBuilder
	p := conn.PgConn().StartPipeline(ctx)
	for i, st := range stmts {
		if err := eqb.Build(conn.TypeMap(), sds[i], st.args); err != nil {
			_ = p.Close() // closes the connection: requests may be queued
			return a, fmt.Errorf("encoding statement %d: %w", i+1, err)
		}
		// The pipeline keeps the result formats until it reads the
		// results; the builder reuses its slices.
		resultFormats := append([]int16(nil), eqb.ResultFormats...)
		p.SendQueryStatement(sds[i], eqb.ParamValues, eqb.ParamFormats, resultFormats)
	}
	if sendFirst {
		if err := p.Flush(); err != nil {
			return a, err // the pipeline closed the connection
		}
	}
	if err := beforeCommit(ctx); err != nil {
		_ = p.Close() // unsynced: closes the connection, the server rolls back
		return a, err
	}
	a.commitSent = true
	if err := p.Sync(); err != nil {
		return a, err
	}
	var first error
	for range stmts {
		res, err := p.GetResults()
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				err = fmt.Errorf("pipeline result: got %T, want a statement result", res)
			} else {
				_, err = rr.Close()
			}
		}
		if err != nil {
			first = err
			break
		}
	}
	// Close reads what is left up to the Sync's ReadyForQuery.
	if err := p.Close(); err != nil && first == nil {
		first = err
	}
	return a, first
}
