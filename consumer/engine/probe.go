package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// How a database that hangs is told from a transaction that is slow.
//
// An attempt whose error carries a SQLSTATE was answered by a live server:
// the SQLSTATE decides (statement_timeout and lock_timeout are transient).
// An attempt that could not begin its transaction — no pool connection
// within the attempt timeout, a connect refused or timed out, BEGIN
// unanswered — tried nothing of the event: unavailable. Every other failure
// without a server answer or a handler's verdict (the attempt's deadline,
// a read timeout, a broken connection, an unknown error) is ambiguous: the
// runtime then probes the server with SELECT 1 on a new connection of its
// own, bounded by Options.ProbeTimeout. If the probe fails too, the
// database is unavailable and the attempt does not count; if it answers,
// the failure belongs to this transaction and counts towards
// Options.MaxAttempts.

// PoolDB is a DB on a pgxpool.Pool. Its probe connects anew with the
// pool's settings, outside the pool: a pool whose connections all hang, or
// are all taken, must neither make a live server look unavailable nor a
// dead one look alive.
type PoolDB struct {
	*pgxpool.Pool
}

// probeSQL is the probe's query: it touches no table and takes no lock.
const probeSQL = "SELECT 1"

// Probe connects and runs SELECT 1 within ctx.
func (db PoolDB) Probe(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, probeSQL); err != nil {
		return fmt.Errorf("running %s: %w", probeSQL, err)
	}
	return nil
}

// classify returns the class of an attempt's error. When the error alone
// cannot tell (needsProbe) it probes the database within ctx; a failed
// probe makes the attempt unavailable, and the returned error then wraps
// ErrUnavailable, the attempt's error and the probe's.
func (r *Runtime) classify(ctx context.Context, err error) (Class, error) {
	c := Classify(err)
	if !needsProbe(err, c) {
		return c, err
	}
	pctx, cancel := context.WithTimeout(ctx, r.opts.ProbeTimeout)
	defer cancel()
	if perr := r.db.Probe(pctx); perr != nil {
		return ClassUnavailable, fmt.Errorf("%w: %w (probe: %w)", ErrUnavailable, err, perr)
	}
	return c, err
}

// errStopped is attempt's error when its partition stopped before the
// attempt began.
var errStopped = errors.New("partition stopped")

// attempt applies evs in one transaction while holding one of the
// Options.Workers slots. The slot is held for the transaction only, never
// through a wait between attempts, so partitions that keep retrying do not
// stall the others. A stopped partition (revoked, or the runtime shutting
// down) begins no attempt: errStopped.
func (r *Runtime) attempt(p *partition, evs []Event) (outcome, error) {
	select {
	case r.slots <- struct{}{}:
	case <-p.ctx.Done():
		return outcome{}, errStopped
	}
	defer func() { <-r.slots }()
	if p.ctx.Err() != nil { // both were ready and the slot won
		return outcome{}, errStopped
	}
	return r.apply(p.ctx, evs)
}

// setUnavailable records whether p's current record waits for an
// unavailable database (eventforge_consumer_unavailable_partitions). Only
// p's worker calls it.
func (r *Runtime) setUnavailable(p *partition, on bool) {
	if p.unavailable == on {
		return
	}
	p.unavailable = on
	if on {
		unavailablePartitions.WithLabelValues(r.opts.Name).Inc()
	} else {
		unavailablePartitions.WithLabelValues(r.opts.Name).Dec()
	}
}
