package gap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/slot"
)

// Checkpoint is the relay's checkpoint of one slot (a row of the
// checkpoint table).
type Checkpoint struct {
	Found bool
	// Limit is the position the relay may confirm to its slot up to.
	Limit pglogrepl.LSN
	// PublishedBelow is the 64-bit transaction ID below which every outbox
	// row was acknowledged; nil when unknown.
	PublishedBelow *int64
	// PublishedBelowAt is when the mark behind PublishedBelow was taken.
	PublishedBelowAt *time.Time
	// Generation names the slot's incarnation: the start position of the
	// slot the last gap recovery created, "" before the first.
	Generation string
}

// Reason says why the slot cannot be trusted to hold every unpublished
// row, or "" when it can. A slot with no checkpoint yet (the first start
// after `eventforge migrate`, or after an upgrade that added the table) is
// adopted as it is.
func Reason(st slot.State, cp Checkpoint) string {
	switch {
	case !st.Exists && cp.Found:
		return "the replication slot is missing (dropped, or this server is a promoted standby without it)"
	case !st.Exists:
		return "the replication slot is missing and no checkpoint exists"
	case st.WALStatus == "lost" || st.Invalidation != "":
		why := st.Invalidation
		if why == "" {
			why = "wal_status lost"
		}
		return fmt.Sprintf("the replication slot was invalidated (%s)", why)
	case cp.Found && st.Confirmed > cp.Limit:
		return fmt.Sprintf("the replication slot is confirmed at %s, past every position this reader confirmed (%s): it was recreated, or this server is not the one the reader confirmed on", st.Confirmed, cp.Limit)
	}
	return ""
}

// ReadCheckpoint reads the slot's checkpoint row from table.
func ReadCheckpoint(ctx context.Context, ctl *control.Conn, table outbox.Table, slot string) (Checkpoint, error) {
	var (
		cp    Checkpoint
		limit string
	)
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT confirm_limit::text, published_below, published_below_at, coalesce(generation, '')
			FROM `+table.Sanitize()+` WHERE slot = $1`, slot).
			Scan(&limit, &cp.PublishedBelow, &cp.PublishedBelowAt, &cp.Generation)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("reading the checkpoint of slot %s: %w", slot, err)
	}
	if cp.Limit, err = pglogrepl.ParseLSN(limit); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint confirm_limit %q: %w", limit, err)
	}
	cp.Found = true
	return cp, nil
}

// RecordPublishedBelow records that every outbox row inserted by a
// transaction below xid is published, by a mark taken at at (never lowering
// what is recorded).
func RecordPublishedBelow(ctx context.Context, ctl *control.Conn, table outbox.Table, slot string, xid int64, at time.Time) error {
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `UPDATE `+table.Sanitize()+`
			SET published_below_at = CASE WHEN $2 > coalesce(published_below, 0) THEN $3 ELSE published_below_at END,
				published_below = greatest(coalesce(published_below, 0), $2), updated_at = now() WHERE slot = $1`, slot, xid, at)
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
