package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// How a database that refuses everyone is told from an event that fails.
//
// An attempt that could not begin its transaction — no pool connection
// within the attempt timeout, a connect refused or timed out, BEGIN
// unanswered — tried nothing of the event: unavailable. A handler's verdict
// (permanent, not found), a data or integrity error (SQLSTATE 22xxx, 23xxx
// but 23505) and a lost or refused connection are taken as they are. Every
// other failure — a serialization failure or deadlock, a statement or lock
// timeout, the attempt's deadline, a read-only transaction, a permission
// denied, a missing table or column, a server I/O error, an unknown error —
// may belong to this event or to every event. The runtime then probes the
// server on a new connection of its own, bounded by Options.ProbeTimeout,
// with what an apply writes: a transaction that inserts a mark of its own
// (consumer "<name>.probe", a new event ID each time), runs the handler's
// Probe if it is a Prober, and must COMMIT. A server that answers SELECT 1
// but is read-only, refuses the insert, lacks the handler's table or hangs
// at COMMIT (a synchronous standby that is gone) fails the probe. If the
// probe fails, the database is unavailable and the attempt does not count;
// if it commits, the failure belongs to this event and counts towards
// Options.MaxAttempts.

// ProbeSuffix is appended to a consumer's name to make the consumer of the
// probe's marks in processed_events. They stand for no event (a new ID per
// probe, written only after a failed attempt); audits, which read the marks
// of a consumer's own name, never see them, and the schema owner may delete
// them at any time.
const ProbeSuffix = ".probe"

// probeMarkSQL is the probe's mark: an insert like markSQL's.
const probeMarkSQL = `INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2)`

// PoolDB is a DB on a pgxpool.Pool. Its probe connects anew with the
// pool's settings, outside the pool: a pool whose connections all hang, or
// are all taken, must neither make a live server look unavailable nor a
// dead one look alive.
type PoolDB struct {
	*pgxpool.Pool
}

// Probe connects and commits one transaction running writes, within ctx.
func (db PoolDB) Probe(ctx context.Context, writes func(ctx context.Context, tx pgx.Tx) error) error {
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return writes(ctx, tx) })
	if err != nil {
		return fmt.Errorf("probe transaction: %w", err)
	}
	return nil
}

// probeWrites is what the probe's transaction writes: a mark of the
// probe's own, and the handler's probe statements.
func (r *Runtime) probeWrites(ctx context.Context, tx pgx.Tx) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("making a probe id: %w", err)
	}
	if _, err := tx.Exec(ctx, probeMarkSQL, r.opts.Name+ProbeSuffix, id); err != nil {
		return fmt.Errorf("marking: %w", err)
	}
	if p, ok := r.handler.(Prober); ok {
		if err := p.Probe(ctx, tx); err != nil {
			return fmt.Errorf("running the handler's probe: %w", err)
		}
	}
	return nil
}

// classify returns the class of an attempt's error. When the error alone
// cannot tell (needsProbe) it probes the database within ctx; a failed
// probe makes the attempt unavailable, and the returned error then wraps
// ErrUnavailable, the attempt's error and the probe's. A panic while
// classifying leaves the class unknown.
func (r *Runtime) classify(ctx context.Context, err error) (c Class, _ error) {
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("classifying an error panicked", "err", err, "panic", v, "stack", string(debug.Stack()))
			c = ClassUnknown
		}
	}()
	c = Classify(err)
	if !needsProbe(c) {
		return c, err
	}
	pctx, cancel := context.WithTimeout(ctx, r.opts.ProbeTimeout)
	defer cancel()
	if perr := r.db.Probe(pctx, r.probeWrites); perr != nil {
		return ClassUnavailable, fmt.Errorf("%w: %w (probe: %w)", ErrUnavailable, err, perr)
	}
	return c, err
}

// errStopped is attempt's error when its partition stopped before the
// attempt began.
var errStopped = errors.New("partition stopped")

// ErrPanic marks an attempt whose handler (or the runtime's apply) panicked.
// The panic is recovered and the attempt fails like any other: class
// unknown, probed, retried, and dead-lettered after Options.MaxAttempts,
// instead of ending the process, which would redeliver the record and
// panic again.
var ErrPanic = errors.New("apply panicked")

// attempt applies evs in one transaction while holding one of the
// Options.Workers slots. The slot is held for the transaction only, never
// through a wait between attempts, so partitions that keep retrying do not
// stall the others. A stopped partition (revoked, or the runtime shutting
// down) begins no attempt: errStopped. A panic is recovered into an error
// wrapping ErrPanic.
func (r *Runtime) attempt(p *partition, evs []Event) (out outcome, err error) {
	select {
	case r.slots <- struct{}{}:
	case <-p.ctx.Done():
		return outcome{}, errStopped
	}
	defer func() { <-r.slots }()
	if p.ctx.Err() != nil { // both were ready and the slot won
		return outcome{}, errStopped
	}
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("apply panicked", "topic", p.topic, "partition", p.id, "offset", evs[0].Offset,
				"records", len(evs), "panic", v, "stack", string(debug.Stack()))
			out, err = outcome{}, fmt.Errorf("%w: %v", ErrPanic, v)
		}
	}()
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
