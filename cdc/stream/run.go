package stream

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/slot"
)

// Run streams the slot, as st found it, of generation (the slot's
// incarnation, gap.Checkpoint.Generation), until ctx ends (it returns nil)
// or the session fails.
func Run(ctx context.Context, cfg Config, d Deps, st slot.State, generation string) error {
	if st.ActivePID != nil {
		return fmt.Errorf("%w (pid %d)", slot.ErrBusy, *st.ActivePID)
	}
	d.Progress.SetSent(st.Confirmed)
	rconn, err := control.OpenReplication(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer func() {
		rconn.Close(context.WithoutCancel(ctx))
		d.Metrics.Active.Set(0)
	}()
	if st.Failover != nil && !*st.Failover && !slot.InHotStandby(rconn) {
		// A slot created before PostgreSQL 17, or by hand: make it a
		// failover slot so a standby that synchronises slots keeps it. A
		// slot on a standby (decoding there) cannot be one.
		if err := slot.MakeFailover(ctx, rconn, cfg.Slot); err != nil {
			d.Logger.Warn("could not make the slot a failover slot; a promoted standby will not have it (the reader then recovers the gap)", "err", err)
		}
	}
	start, txn, err := resume(ctx, d, st, generation)
	if err != nil {
		return err
	}
	s := newSession(cfg, d, start)
	s.conn = rconn
	if s.pub, err = d.Driver.Open("eventforge-cdc", s.onDelivery); err != nil {
		return err
	}
	if txn != nil {
		txn.bounds = cfg.Txn
		if txn.pub, _ = s.pub.(sink.Transactional); txn.pub == nil {
			s.pub.Close(0)
			return control.Permanentf("the sink's driver is transactional, its sink is not")
		}
		s.txn = txn
	}
	d.Progress.Attach(s.tracker)
	defer d.Progress.Detach()
	return s.run(ctx, start)
}

// resume is where a session starts: the slot's confirmed position, or, on
// a transactional sink, the later of it and the sink's committed position
// (startPosition), with what to skip of a transaction stored in part.
func resume(ctx context.Context, d Deps, st slot.State, generation string) (pglogrepl.LSN, *txnState, error) {
	td, ok := d.Driver.(sink.TransactionalDriver)
	if !ok {
		return st.Confirmed, nil, nil
	}
	pos, found, err := td.Position(ctx)
	if err != nil {
		return 0, nil, err
	}
	var serverWAL pglogrepl.LSN
	err = d.Control.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(control.LSN{Dst: &serverWAL})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("reading the server's WAL position: %w", err)
	}
	start, xid, n, why := startPosition(st.Confirmed, serverWAL, generation, pos, found)
	if why != "" {
		d.Logger.Info("resuming from the slot's confirmed position", "lsn", start.String(), "why", why)
	} else if start != st.Confirmed || n > 0 {
		d.Logger.Info("resuming from the position committed to the sink", "lsn", start.String(), "slot_lsn", st.Confirmed.String(),
			"partial_xid", xid, "partial_events", n)
	}
	return start, &txnState{generation: generation, lastEnd: start, skipXID: xid, skipN: n}, nil
}
