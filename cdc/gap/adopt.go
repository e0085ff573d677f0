package gap

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/slot"
)

// Adopting a slot confirmed past the limit.
//
// A slot confirmed past the checkpoint's limit was not advanced by the
// relay; usually it was recreated, and rows committed before its start may
// never have been published. But a major upgrade with pg_upgrade (from
// PostgreSQL 17 on) carries a logical slot over only when it has consumed
// all its WAL, and creates it in the new cluster at the new cluster's WAL
// position, past every position of the old one: the slot is confirmed past
// the limit, and nothing is missing. Such a slot is adopted instead of
// recreated when, in one snapshot, no outbox row (nor deleted outbox row)
// of a transaction at or above published_below exists outside the
// dead-letter table — every row the snapshot sees is published — and the
// slot, read after the snapshot was taken, is idle and still confirmed
// where the relay found it. A row the snapshot does not see commits after
// it, so past the slot's confirmed position (which nobody moved since it
// was read before the snapshot), and the slot streams it. Whatever recreated
// the slot, adopting it then loses nothing: the recovery would republish
// nothing either. Otherwise the gap is recovered as usual.

// adoptable reports whether st and cp are the case adopt decides: a valid,
// idle slot confirmed past the limit of a checkpoint that knows what was
// published.
func adoptable(st slot.State, cp Checkpoint) bool {
	return st.Exists && st.WALStatus != "lost" && st.Invalidation == "" && st.ActivePID == nil &&
		cp.Found && cp.PublishedBelow != nil && st.Confirmed > cp.Limit
}

// adopt raises the limit to the slot's confirmed position when every
// outbox row is published (see above), and returns the limit now stored and
// whether it did.
func (g *Guard) adopt(ctx context.Context, st slot.State, cp Checkpoint) (pglogrepl.LSN, bool, error) {
	if !adoptable(st, cp) {
		return 0, false, nil
	}
	var unpublished int64
	// The snapshot and the slot are read on the slot's server: on a
	// standby the argument holds alike, a row its snapshot does not see
	// being replayed after it, past the slot's confirmed position.
	err := g.slots.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		unpublished = -1
		return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			n, err := countUnpublished(ctx, tx, g.cfg.Outbox, g.cfg.DeadLetters, *cp.PublishedBelow)
			if err != nil {
				return err
			}
			var (
				confirmed pglogrepl.LSN
				active    bool
			)
			err = tx.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1`, g.cfg.Slot).
				Scan(control.LSN{Dst: &confirmed}, &active)
			if err != nil {
				return err
			}
			if !active && confirmed == st.Confirmed {
				unpublished = n
			}
			return nil
		})
	})
	if err != nil {
		return 0, false, fmt.Errorf("checking whether slot %s can be adopted: %w", g.cfg.Slot, err)
	}
	if unpublished != 0 {
		return 0, false, nil
	}
	limit, err := RaiseLimit(ctx, g.ctl, g.cfg.Checkpoints, g.cfg.Slot, st.Confirmed)
	if err != nil {
		return 0, false, err
	}
	g.logger.Warn("adopted the replication slot confirmed past the checkpoint's limit: every outbox row is published, so nothing can be missing (a slot pg_upgrade carried over is taken over this way)",
		"lsn", st.Confirmed.String(), "previous_limit", cp.Limit.String(), "limit", limit.String(), "published_below", *cp.PublishedBelow)
	return limit, true, nil
}

// countUnpublished counts, in tx's snapshot, the outbox rows and deleted
// outbox rows of transactions at or above publishedBelow that are not
// waiting in the dead-letter table: the rows a recovery would republish.
func countUnpublished(ctx context.Context, tx pgx.Tx, table, deadLetters outbox.Table, publishedBelow int64) (int64, error) {
	var deletedOK bool
	deleted := table.Deleted()
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, deleted.Sanitize()).Scan(&deletedOK); err != nil {
		return 0, err
	}
	if !deletedOK {
		deleted = nil
	}
	var n int64
	q := `SELECT count(*) FROM (` + gapRowsQuery(table, deleted, deadLetters, false) + `) q`
	if err := tx.QueryRow(ctx, q, publishedBelow, nil).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting unpublished outbox rows: %w", err)
	}
	return n, nil
}
