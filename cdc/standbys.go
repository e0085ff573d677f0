package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Waiting for standbys (PostgreSQL 15 and 16).
//
// On PostgreSQL 15 and 16 a logical walsender sends a transaction as soon as
// its commit is flushed on the primary, also while the primary still waits
// for a synchronous standby. If the primary dies then, the relay has
// published an event of a commit the promoted standby never received: a
// phantom, an event of an order the new primary does not have. PostgreSQL 17
// closes this with synchronized_standby_slots; for 15 and 16 the reader does
// the same itself with --synchronized-standby-slots: it produces none of a
// transaction's events before every named physical slot on the primary has
// flushed the transaction's commit (the slot's restart_lsn, which a physical
// slot advances to the standby's flush position).

// errNoStandbySlots means none of the standby slots exists on the server:
// after a promotion the new primary has no standby yet, so there is nothing
// to wait for.
var errNoStandbySlots = errors.New("no standby slot exists on this server")

// standbyPoll is how often the reader reads the standbys' positions while a
// transaction waits for them.
const standbyPoll = 2 * time.Millisecond

// standbyFlushed reads the oldest flush position of the named physical
// slots. It fails when one of them does not exist or is not physical.
func standbyFlushed(ctx context.Context, ctl *control, slots []string) (pglogrepl.LSN, error) {
	var (
		lsn   *string
		found int
	)
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT min(restart_lsn)::text, count(*) FROM pg_replication_slots
			WHERE slot_name = ANY($1) AND slot_type = 'physical'`, slots).Scan(&lsn, &found)
	})
	if err != nil {
		return 0, fmt.Errorf("reading the standby slots %v: %w", slots, err)
	}
	if found == 0 {
		return 0, errNoStandbySlots
	}
	if found != len(slots) {
		return 0, fmt.Errorf("of the standby slots %v only %d exist as physical slots on this server", slots, found)
	}
	if lsn == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*lsn)
}

// waitStandbys returns once every standby slot flushed commit, keeping the
// replication connection alive with status updates meanwhile.
func (s *session) waitStandbys(ctx context.Context, commit pglogrepl.LSN) error {
	if len(s.cfg.SynchronizedStandbySlots) == 0 || s.standbyAt >= commit {
		return nil
	}
	began, warned := time.Now(), false
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	for {
		at, err := standbyFlushed(ctx, s.ctl, s.cfg.SynchronizedStandbySlots)
		if errors.Is(err, errNoStandbySlots) {
			// A promoted standby has no standby of its own until one is
			// built: publish, as the server itself would commit.
			if !s.noStandby {
				s.logger.Warn("none of the standby slots exists on this server (a promoted standby?); publishing without waiting", "slots", s.cfg.SynchronizedStandbySlots)
				s.noStandby = true
			}
			return nil
		}
		if err != nil {
			return err
		}
		s.standbyAt = max(s.standbyAt, at)
		if s.standbyAt >= commit {
			s.m.standbyWait.Add(time.Since(began).Seconds())
			return nil
		}
		if !warned && time.Since(began) > 10*time.Second {
			s.logger.Warn("waiting for the standby slots to flush a commit before publishing it", "slots", s.cfg.SynchronizedStandbySlots,
				"commit_lsn", commit.String(), "standby_lsn", s.standbyAt.String())
			warned = true
		}
		if !time.Now().Before(nextStatus) {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}
		if !sleep(ctx, standbyPoll) {
			return ctx.Err()
		}
	}
}
