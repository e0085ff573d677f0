package gap

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
)

// Limit is the position the relay may confirm to its slot up to: the
// checkpoint's confirm_limit. A session never confirms past it; when the
// sink acknowledged WAL beyond it, the session asks for a raise to the
// position it received (which the acknowledged WAL never passes) and
// confirms the rest once the raised limit is stored, so the stored limit is
// always at or past the slot's confirmed position.
//
// The limit is raised to positions the slot streamed to this process, never
// to the server's current position: a slot recreated while the relay did
// not look starts past everything the old slot streamed, so it stays past the
// limit and is found out (Reason).
type Limit struct {
	lsn    atomic.Uint64
	wanted atomic.Uint64
	want   chan struct{}
}

// NewLimit returns a limit at 0.
func NewLimit() *Limit {
	return &Limit{want: make(chan struct{}, 1)}
}

// LSN is the limit.
func (l *Limit) LSN() pglogrepl.LSN { return pglogrepl.LSN(l.lsn.Load()) }

// Clamp returns the part of confirmable that may be confirmed now, and asks
// for a raise to received when that is not all of it.
func (l *Limit) Clamp(confirmable, received pglogrepl.LSN) pglogrepl.LSN {
	limit := pglogrepl.LSN(l.lsn.Load())
	if confirmable <= limit {
		return confirmable
	}
	maxStore(&l.wanted, uint64(max(confirmable, received)))
	select {
	case l.want <- struct{}{}:
	default:
	}
	return limit
}

// Set stores a limit read from the checkpoint (never lowering it).
func (l *Limit) Set(lsn pglogrepl.LSN) { maxStore(&l.lsn, uint64(lsn)) }

// maxStore raises v to n unless it is already at or past it.
func maxStore(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Reset forgets the limit: a new leadership reads it from the checkpoint.
func (l *Limit) Reset() {
	l.lsn.Store(0)
	l.wanted.Store(0)
}

// Raise runs while this process leads: it raises the stored limit of slot
// in table whenever a session asks for it. A failed raise is retried at the
// next request; the session meanwhile confirms only up to the old limit,
// which is safe.
func (l *Limit) Raise(ctx context.Context, ctl *control.Conn, table outbox.Table, slot string, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.want:
		}
		lsn, err := RaiseLimit(ctx, ctl, table, slot, pglogrepl.LSN(l.wanted.Load()))
		if err != nil {
			if ctx.Err() == nil {
				logger.Warn("raising the confirm limit", "err", err)
			}
			continue
		}
		l.Set(lsn)
	}
}

// RaiseLimit raises the slot's confirm limit to lsn (never lowers it),
// creating the row if needed, and returns the limit now stored. lsn must be
// a position the slot streamed to this process (Limit).
func RaiseLimit(ctx context.Context, ctl *control.Conn, table outbox.Table, slot string, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	var limit pglogrepl.LSN
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `INSERT INTO `+table.Sanitize()+` AS c (slot, confirm_limit) VALUES ($1, $2::text::pg_lsn)
			ON CONFLICT (slot) DO UPDATE SET confirm_limit = greatest(c.confirm_limit, excluded.confirm_limit), updated_at = now()
			RETURNING confirm_limit::text`, slot, lsn.String()).Scan(control.LSN{Dst: &limit})
	})
	if err != nil {
		return 0, fmt.Errorf("raising the confirm limit of slot %s: %w", slot, err)
	}
	return limit, nil
}
