package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/schema"
)

// A lost slot leaves a gap.
//
// A logical slot lives on one server. It is lost when it is dropped, when
// max_slot_wal_keep_size invalidates it, and when a standby without it is
// promoted (PostgreSQL 16 and older never copy logical slots to a standby;
// 17 does for a failover slot that was synchronised in time). A slot created
// afresh streams only what commits after its creation: rows committed in
// between would never be published. The reader never lets that pass
// silently. Before every session it checks its slot against its checkpoint
// (table --checkpoint-table, one row per slot):
//
//   - confirm_limit: the reader raises this limit, durably, before it
//     confirms a position past it (limit.go). Only the reader advances its
//     slot, so a slot confirmed past the limit was not advanced by it: the
//     slot was recreated, or the server is not the one the reader confirmed
//     on.
//   - published_below: a 64-bit transaction ID below which every outbox row
//     was acknowledged by Kafka (checkpointer.go takes it from the marks the
//     retention uses: see retention.go for why a mark proves it).
//
// A slot that is missing, invalidated, or confirmed past the limit is a gap.
// The reader then recovers (recover.go): it drops what is left of the slot,
// creates it again exporting a snapshot, republishes every outbox row of that
// snapshot inserted by a transaction at or above published_below, with its
// original event ID, waits for Kafka to acknowledge them, records the
// recovery, and only then streams from the new slot, whose first change is
// the first commit the snapshot did not see. Duplicates are possible, loss is
// not. docs/cdc.md, "A lost slot and failover", has the argument and the
// limits.

// slotCheck is what the reader reads about its slot before a session.
type slotCheck struct {
	exists    bool
	plugin    string
	database  string
	confirmed pglogrepl.LSN
	activePID *int32
	// walStatus is pg_replication_slots.wal_status; "lost" means the WAL
	// the slot needs was removed.
	walStatus string
	// invalidation is why the server invalidated the slot
	// (invalidation_reason on 17+, "conflict" for conflicting on 16), or "".
	invalidation string
	// failover is the slot's failover property (17+; nil before).
	failover *bool
}

// checkpointRow is the reader's checkpoint of one slot.
type checkpointRow struct {
	found bool
	limit pglogrepl.LSN
	// publishedBelow is nil when unknown.
	publishedBelow *int64
}

// gapReason says why the slot cannot be trusted to hold every unpublished
// row, or "" when it can. A slot with no checkpoint yet (the first start
// after `eventforge migrate`, or after an upgrade that added the table) is
// adopted as it is.
func gapReason(st slotCheck, cp checkpointRow) string {
	switch {
	case !st.exists && cp.found:
		return "the replication slot is missing (dropped, or this server is a promoted standby without it)"
	case !st.exists:
		return "the replication slot is missing and no checkpoint exists"
	case st.walStatus == "lost" || st.invalidation != "":
		why := st.invalidation
		if why == "" {
			why = "wal_status lost"
		}
		return fmt.Sprintf("the replication slot was invalidated (%s)", why)
	case cp.found && st.confirmed > cp.limit:
		return fmt.Sprintf("the replication slot is confirmed at %s, past every position this reader confirmed (%s): it was recreated, or this server is not the one the reader confirmed on", st.confirmed, cp.limit)
	}
	return ""
}

// readSlotCheck reads the slot. Columns differ between server versions, so
// the row is read as JSON.
func readSlotCheck(ctx context.Context, ctl *control, slot string) (slotCheck, error) {
	var raw []byte
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT to_jsonb(s) FROM pg_replication_slots s WHERE slot_name = $1`, slot).Scan(&raw)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return slotCheck{}, nil
	}
	if err != nil {
		return slotCheck{}, fmt.Errorf("reading slot %s: %w", slot, err)
	}
	return parseSlotRow(raw)
}

// parseSlotRow decodes a pg_replication_slots row as JSON.
func parseSlotRow(raw []byte) (slotCheck, error) {
	var row struct {
		Plugin             *string `json:"plugin"`
		Database           *string `json:"database"`
		ConfirmedFlushLSN  *string `json:"confirmed_flush_lsn"`
		ActivePID          *int32  `json:"active_pid"`
		WALStatus          *string `json:"wal_status"`
		Conflicting        *bool   `json:"conflicting"`
		InvalidationReason *string `json:"invalidation_reason"`
		Failover           *bool   `json:"failover"`
	}
	if err := json.Unmarshal(raw, &row); err != nil {
		return slotCheck{}, fmt.Errorf("decoding slot row: %w", err)
	}
	st := slotCheck{exists: true, activePID: row.ActivePID, failover: row.Failover}
	if row.Plugin != nil {
		st.plugin = *row.Plugin
	}
	if row.Database != nil {
		st.database = *row.Database
	}
	if row.WALStatus != nil {
		st.walStatus = *row.WALStatus
	}
	switch {
	case row.InvalidationReason != nil:
		st.invalidation = *row.InvalidationReason
	case row.Conflicting != nil && *row.Conflicting:
		st.invalidation = "conflict"
	}
	if row.ConfirmedFlushLSN != nil {
		lsn, err := pglogrepl.ParseLSN(*row.ConfirmedFlushLSN)
		if err != nil {
			return slotCheck{}, fmt.Errorf("slot confirmed_flush_lsn %q: %w", *row.ConfirmedFlushLSN, err)
		}
		st.confirmed = lsn
	}
	return st, nil
}

// readCheckpoint reads the slot's checkpoint row.
func readCheckpoint(ctx context.Context, ctl *control, table pgx.Identifier, slot string) (checkpointRow, error) {
	var (
		cp    checkpointRow
		limit string
	)
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT confirm_limit::text, published_below FROM `+table.Sanitize()+` WHERE slot = $1`, slot).
			Scan(&limit, &cp.publishedBelow)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpointRow{}, nil
	}
	if err != nil {
		return checkpointRow{}, fmt.Errorf("reading the checkpoint of slot %s: %w", slot, err)
	}
	if cp.limit, err = pglogrepl.ParseLSN(limit); err != nil {
		return checkpointRow{}, fmt.Errorf("checkpoint confirm_limit %q: %w", limit, err)
	}
	cp.found = true
	return cp, nil
}

// raiseConfirmLimit raises the slot's confirm limit to lsn (never lowers
// it), creating the row if needed, and returns the limit now stored. lsn
// must be a position the slot streamed to this process (limit.go).
func raiseConfirmLimit(ctx context.Context, ctl *control, table pgx.Identifier, slot string, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	var limit pglogrepl.LSN
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `INSERT INTO `+table.Sanitize()+` AS c (slot, confirm_limit) VALUES ($1, $2::text::pg_lsn)
			ON CONFLICT (slot) DO UPDATE SET confirm_limit = greatest(c.confirm_limit, excluded.confirm_limit), updated_at = now()
			RETURNING confirm_limit::text`, slot, lsn.String()).Scan(ptrLSN{&limit})
	})
	if err != nil {
		return 0, fmt.Errorf("raising the confirm limit of slot %s: %w", slot, err)
	}
	return limit, nil
}

// recordPublishedBelow records that every outbox row inserted by a
// transaction below xid is published (never lowering what is recorded).
func recordPublishedBelow(ctx context.Context, ctl *control, table pgx.Identifier, slot string, xid int64) error {
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `UPDATE `+table.Sanitize()+`
			SET published_below = greatest(coalesce(published_below, 0), $2), updated_at = now() WHERE slot = $1`, slot, xid)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the checkpoint of slot %s: %w", slot, err)
	}
	return nil
}

// describeFrom says where a recovery republishes from.
func describeFrom(publishedBelow *int64) string {
	if publishedBelow == nil {
		return "every stored outbox row (no checkpoint of what was published)"
	}
	return "outbox rows of transactions from " + strconv.FormatInt(*publishedBelow, 10) + " on"
}

// prepareSlot checks the slot against its checkpoint before a session,
// recovers a gap, adopts a slot that has no checkpoint yet, and returns the
// slot as it is now. The confirm limit is loaded from the checkpoint.
func (r *reader) prepareSlot(ctx context.Context, ctl *control) (slotCheck, error) {
	if err := r.checkStandbyWait(ctx, ctl); err != nil {
		return slotCheck{}, err
	}
	st, err := readSlotCheck(ctx, ctl, r.cfg.Slot)
	if err != nil {
		return slotCheck{}, err
	}
	if err := r.checkSlotKind(ctx, ctl, st); err != nil {
		return slotCheck{}, err
	}
	cp, err := readCheckpoint(ctx, ctl, r.checkpoints, r.cfg.Slot)
	if err != nil {
		return slotCheck{}, err
	}
	reason := gapReason(st, cp)
	switch {
	case reason != "" && r.cfg.NoCreateSlot && !st.exists && !cp.found:
		return slotCheck{}, permanent("replication slot %q does not exist (and --no-create-slot is set); run `eventforge migrate`", r.cfg.Slot)
	case reason != "" && r.cfg.NoCreateSlot:
		// Not a reason to exit: the reader retries, and streams once a
		// reader without the flag has recovered the gap (docs/operations.md,
		// "A gap under --no-create-slot").
		r.m.gap.Set(1)
		r.logger.Error("replication slot gap, and --no-create-slot is set: nothing is published until a reader without the flag recovers it",
			"reason", reason, "republish", describeFrom(cp.publishedBelow))
		return slotCheck{}, fmt.Errorf("%w: %s; --no-create-slot is set, so the reader does not recreate slot %q. Run one reader without --no-create-slot: it recreates the slot and republishes %s before it streams",
			errGapRefused, reason, r.cfg.Slot, describeFrom(cp.publishedBelow))
	case reason != "":
		if err := r.recoverGap(ctx, ctl, reason, st, cp); err != nil {
			return slotCheck{}, err
		}
		if st, err = readSlotCheck(ctx, ctl, r.cfg.Slot); err != nil {
			return slotCheck{}, err
		}
		if !st.exists {
			return slotCheck{}, fmt.Errorf("%w: %s", errSlotMissing, r.cfg.Slot)
		}
		if cp, err = readCheckpoint(ctx, ctl, r.checkpoints, r.cfg.Slot); err != nil {
			return slotCheck{}, err
		}
	case !cp.found:
		limit, err := raiseConfirmLimit(ctx, ctl, r.checkpoints, r.cfg.Slot, st.confirmed)
		if err != nil {
			return slotCheck{}, err
		}
		cp.limit = limit
		r.logger.Info("adopted the replication slot: no checkpoint existed; a later gap is recovered from this point on", "lsn", st.confirmed.String())
	}
	r.m.gap.Set(0)
	r.limit.set(cp.limit)
	return st, nil
}

// checkSlotKind refuses a slot of another plugin or database.
func (r *reader) checkSlotKind(ctx context.Context, ctl *control, st slotCheck) error {
	if !st.exists {
		return nil
	}
	var db string
	_ = ctl.do(ctx, func(_ context.Context, conn *pgx.Conn) error {
		db = conn.Config().Database
		return nil
	})
	if st.plugin != schema.OutputPlugin {
		return permanent("replication slot %q uses plugin %q, want %q", r.cfg.Slot, st.plugin, schema.OutputPlugin)
	}
	if st.database != db {
		return permanent("replication slot %q belongs to database %q, not %q", r.cfg.Slot, st.database, db)
	}
	return nil
}
