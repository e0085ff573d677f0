// Package retention prunes the outbox, and records the relay's checkpoint of
// what is published (the gap recovery's published_below) by the same rule.
//
// Retention never deletes an outbox row that the slot has not confirmed.
//
// A row's age says nothing about whether it was published: a transaction
// can commit long after it started (created_at is its start), and while
// Kafka is down nothing is published at all. What the relay can prove is
// which rows committed before a WAL position, without trusting any clock:
//
//  1. A prune mark is taken in one statement: the xmin of the statement's
//     snapshot X (the oldest transaction still running) and then the WAL
//     insert position L. A transaction whose ID is below X had finished
//     before the snapshot was taken, and PostgreSQL writes a commit record
//     before it stops showing the transaction as running, so its commit
//     record ends at or before L. A subtransaction's ID is above its
//     parent's, so a row inserted in a savepoint is below X only when its
//     top-level transaction is.
//  2. Once this process confirmed L or a later position to its slot, every
//     committed transaction below X was decoded and acknowledged by the sink
//     (the relay confirms nothing else; a slot it confirms was checked
//     against the checkpoint first, package gap), so its rows are published.
//  3. Only then are rows older than the retention deleted, and only those
//     whose inserting transaction (xmin) is below X.
//
// The row's xmin is a 32-bit transaction ID; it is widened against the
// deleting statement's own snapshot (every row it sees was inserted before
// it). A row older than 2^32 transactions widens to a newer ID than its
// real one, which can only keep it, never delete it early.
package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
)

// maxPruneMarks bounds the marks a relay keeps while the slot does not
// confirm them; the oldest are kept, as they become prunable first.
const maxPruneMarks = 16

// pruneMark is a point before which every committed transaction is known to
// end in the WAL: transactions with an ID below xmin committed before lsn.
type pruneMark struct {
	xmin int64 // 64-bit transaction ID (xid8) of the snapshot's xmin
	lsn  pglogrepl.LSN
	at   time.Time // when the server took it
}

// takePruneMark reads a mark. The snapshot is taken when the statement
// starts, the insert position while it runs, so the position is read after
// the snapshot.
func takePruneMark(ctx context.Context, ctl *control.Conn) (pruneMark, error) {
	var m pruneMark
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()::text, now()`).
			Scan(&m.xmin, control.LSN{Dst: &m.lsn}, &m.at)
	})
	if err != nil {
		return pruneMark{}, fmt.Errorf("taking a prune mark: %w", err)
	}
	return m, nil
}

// pruneStatement deletes up to $2 rows older than $1 seconds whose
// inserting transaction is below the mark's xmin $3. The row's 32-bit xmin
// is widened against the statement's own snapshot xmax (ref): its distance
// back from ref is (ref - xmin) mod 2^32, and it is below the mark when that
// distance exceeds ref - $3.
const pruneStatement = `WITH ref AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x)
DELETE FROM %[1]s WHERE id IN (
	SELECT o.id FROM %[1]s o, ref
	WHERE o.created_at < now() - make_interval(secs => $1)
	AND ((ref.x %% 4294967296) - o.xmin::text::bigint + 4294967296) %% 4294967296 > ref.x - $3
	ORDER BY o.created_at LIMIT $2)`

// pruneOutbox deletes outbox rows older than retention whose transaction
// is below the confirmed mark, batch rows per statement, and returns how
// many it deleted. The same rule prunes the table of deleted outbox rows
// (package gap), whose xmin is the deleting transaction. The outbox's own
// deletes say so (eventforge.outbox_pruning), so that its deletion trigger
// does not keep them.
func pruneOutbox(ctx context.Context, ctl *control.Conn, table outbox.Table, retention time.Duration, batch int, mark pruneMark) (int64, error) {
	var total int64
	for _, t := range []outbox.Table{table, table.Deleted()} {
		stmt := fmt.Sprintf(pruneStatement, t.Sanitize())
		for {
			var n int64
			missing := false
			err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
				return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, t.Sanitize()).Scan(&missing); err != nil || missing {
						return err
					}
					if _, err := tx.Exec(ctx, `SELECT set_config('eventforge.outbox_pruning', 'on', true)`); err != nil {
						return err
					}
					tag, err := tx.Exec(ctx, stmt, retention.Seconds(), batch, mark.xmin)
					n = tag.RowsAffected()
					return err
				})
			})
			if err != nil {
				return total, fmt.Errorf("pruning %s rows older than %s: %w", t.Sanitize(), retention, err)
			}
			total += n
			if missing || n < int64(batch) || ctx.Err() != nil {
				break
			}
		}
	}
	return total, nil
}

// confirmedMark returns the newest of marks at or before confirmed and the
// marks still waiting for the slot.
func confirmedMark(marks []pruneMark, confirmed pglogrepl.LSN) (pruneMark, bool, []pruneMark) {
	i := -1
	for j, m := range marks {
		if m.lsn <= confirmed {
			i = j
		}
	}
	if i < 0 {
		return pruneMark{}, false, marks
	}
	return marks[i], true, marks[i+1:]
}
