package gap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
)

// Catching an idle slot up for pg_upgrade.
//
// pg_upgrade (from PostgreSQL 17 on) carries a logical slot into the new
// cluster only when nothing decodable follows its confirmed position: no
// commit of any transaction in the slot's database, no logical message. A
// stopped relay leaves its own last writes there — its checkpoint row, its
// last heartbeat — and so may the consumers, autovacuum's ANALYZE, anything
// that committed in the database after the relay's last confirmation.
// CatchUp moves the stopped relay's slot past them, and only past changes
// that are no outbox row to publish: it reads the WAL insert position P,
// then takes a snapshot in which no transaction is in progress — so every
// transaction whose commit precedes P is in it — and checks in that
// snapshot that every outbox row (and deleted outbox row) of a transaction
// at or above the checkpoint's published_below is waiting in the
// dead-letter table, i.e. that all were published; only then does it
// advance the slot to P. The checkpoint is not touched: the next relay
// finds the slot past its limit and adopts it (adopt.go) by the same check.

// ErrUnpublished means outbox rows are not known to be published yet: the
// relay has not caught up, or not yet recorded a checkpoint that covers
// them.
var ErrUnpublished = errors.New("outbox rows are not known to be published")

// Tables names the relay's tables CatchUp reads.
type Tables struct {
	Outbox      outbox.Table
	DeadLetters outbox.Table
	Checkpoints outbox.Table
}

// catchUpTries bounds the snapshots CatchUp takes while transactions are
// in progress.
const catchUpTries = 50

// CatchUp advances the idle slot to the server's WAL insert position when
// every outbox row is published (see above), and returns the slot's
// confirmed position before and after. It refuses a slot a process holds,
// a checkpoint without published_below, and unpublished rows
// (ErrUnpublished).
func CatchUp(ctx context.Context, conn *pgx.Conn, t Tables, slotName string) (from, to pglogrepl.LSN, err error) {
	var below *int64
	err = conn.QueryRow(ctx, `SELECT published_below FROM `+t.Checkpoints.Sanitize()+` WHERE slot = $1`, slotName).Scan(&below)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && below == nil) {
		return 0, 0, fmt.Errorf("%w: slot %s has no checkpoint of what was published; run the reader until it records one (--checkpoint-interval)", ErrUnpublished, slotName)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the checkpoint of slot %s: %w", slotName, err)
	}
	var active bool
	err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1`, slotName).
		Scan(control.LSN{Dst: &from}, &active)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, fmt.Errorf("replication slot %s does not exist", slotName)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading slot %s: %w", slotName, err)
	}
	if active {
		return from, from, fmt.Errorf("replication slot %s is held by a reader: stop it first", slotName)
	}
	for try := 1; ; try++ {
		to, err = quiescentPosition(ctx, conn, t, *below)
		if err == nil || !errors.Is(err, errBusy) || try == catchUpTries {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return from, from, err
	}
	if to <= from {
		return from, from, nil
	}
	if _, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)`, slotName, to.String()); err != nil {
		return from, from, fmt.Errorf("advancing slot %s to %s: %w", slotName, to, err)
	}
	return from, to, nil
}

// errBusy means a transaction was in progress in the snapshot.
var errBusy = errors.New("transactions in progress")

// quiescentPosition reads the WAL insert position, then checks in a
// snapshot without transactions in progress that no outbox row at or above
// publishedBelow is unpublished, and returns the position.
func quiescentPosition(ctx context.Context, conn *pgx.Conn, t Tables, publishedBelow int64) (pglogrepl.LSN, error) {
	var pos pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(control.LSN{Dst: &pos}); err != nil {
		return 0, fmt.Errorf("reading the WAL insert position: %w", err)
	}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var quiet bool
		if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(s) = pg_snapshot_xmax(s) FROM pg_current_snapshot() s`).Scan(&quiet); err != nil {
			return fmt.Errorf("reading the snapshot: %w", err)
		}
		if !quiet {
			return errBusy
		}
		n, err := countUnpublished(ctx, tx, t.Outbox, t.DeadLetters, publishedBelow)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d outbox rows of transactions from %d on; let the reader publish them and record a checkpoint (slot lag 0, then one --checkpoint-interval)", ErrUnpublished, n, publishedBelow)
		}
		return nil
	})
	return pos, err
}
