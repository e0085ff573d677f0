package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/schema"
)

// Waiting for standbys (PostgreSQL 15 and 16).
//
// On PostgreSQL 15 and 16 a logical walsender sends a transaction as soon as
// its commit is flushed on the primary, also while the primary still waits
// for a synchronous standby. If the primary dies then, the relay has
// published an event of a commit the promoted standby never received: a
// phantom, an event of an order the new primary does not have. PostgreSQL 17
// closes this with synchronized_standby_slots; for 15 and 16 the reader does
// the same itself with --synchronized-standby-slots: it holds a
// transaction's events back until the commit message, which carries the end
// of the commit record, and produces them only once every named physical
// slot on the primary has flushed up to that end (the slot's restart_lsn,
// which a physical slot advances to the standby's flush position). The begin
// message only knows where the commit record starts, and a standby can have
// flushed the start of a record and not its end.
//
// A transaction whose events exceed the in-flight bounds is not held whole:
// once the bound is reached the reader waits for the standbys to flush the
// start of its commit record and produces the rest as it streams. Such a
// transaction is never an order (a bulk outbox insert or replay); the
// window left is the primary dying while the standby has part of that
// commit record.

// heldInsert is a decoded outbox insert held back until the standbys
// flushed its transaction's commit.
type heldInsert struct {
	ev        decode.Event
	walStart  pglogrepl.LSN
	decodeErr error
}

// holdFor starts holding back the events of a transaction whose commit
// record starts at commit, when the reader waits for standbys.
func (s *session) holdFor(commit pglogrepl.LSN) {
	s.holding = s.cfg.waitsForStandbys()
	s.held, s.heldBytes, s.commitAt = s.held[:0], 0, commit
}

// hold keeps one insert back; at the in-flight bounds it stops holding and
// produces what it held once the standbys flushed the start of the commit
// record.
func (s *session) hold(ctx context.Context, in heldInsert) error {
	s.held = append(s.held, in)
	s.heldBytes += int64(in.ev.Size() + recordOverhead)
	if len(s.held) < s.cfg.MaxInflightEvents && s.heldBytes < s.cfg.MaxInflightBytes {
		return nil
	}
	s.logger.Warn("transaction exceeds the in-flight bounds; publishing it once the standbys flushed the start of its commit record",
		"commit_lsn", s.commitAt.String(), "events", len(s.held))
	return s.releaseHeld(ctx, s.commitAt+1)
}

// releaseHeld waits until the standbys flushed through upTo and produces the
// held events.
func (s *session) releaseHeld(ctx context.Context, upTo pglogrepl.LSN) error {
	if !s.holding {
		return nil
	}
	s.holding = false
	if err := s.waitStandbys(ctx, upTo); err != nil {
		return err
	}
	for i := range s.held {
		if err := s.insert(ctx, &s.held[i].ev, s.held[i].walStart, s.held[i].decodeErr); err != nil {
			return err
		}
	}
	clear(s.held)
	s.held = s.held[:0]
	return nil
}

// standbyPoll is how often the reader reads the standbys' positions while a
// transaction waits for them.
const standbyPoll = 2 * time.Millisecond

// standbyFlushed reads the oldest flush position of the named physical
// slots (schema.StandbySlotsFlushed).
func standbyFlushed(ctx context.Context, ctl *control, slots []string) (pglogrepl.LSN, error) {
	var lsn string
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) (err error) {
		lsn, err = schema.StandbySlotsFlushed(ctx, conn, slots)
		return err
	})
	if err != nil || lsn == "" {
		return 0, err
	}
	return pglogrepl.ParseLSN(lsn)
}

// waitStandbys returns once every standby slot flushed through commit, keeping the
// replication connection alive with status updates meanwhile.
func (s *session) waitStandbys(ctx context.Context, commit pglogrepl.LSN) error {
	if !s.cfg.waitsForStandbys() || s.standbyAt >= commit {
		return nil
	}
	began, warned := time.Now(), false
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	for {
		at, err := standbyFlushed(ctx, s.ctl, s.cfg.SynchronizedStandbySlots)
		if errors.Is(err, schema.ErrNoStandbySlots) {
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

// Safe by default: a primary with standbys and nothing that holds the relay
// back until they have a commit can leave Kafka with events of orders a
// promoted standby lacks (phantoms: a phantom OrderCancelled of an order the
// new primary has is applied). So before streaming, the reader looks for
// standbys — physical slots, and walsenders that hold no logical slot — and
// refuses to publish (a configuration error) when there are some and
// neither --synchronized-standby-slots nor the server's
// synchronized_standby_slots (PostgreSQL 17+) names any. The operator then
// chooses: the standbys' slots, or "none" to publish without waiting.

// standbyState is what the server says about its standbys.
type standbyState struct {
	physicalSlots, physicalSenders int
	serverWait                     string // synchronized_standby_slots (17+), or ""
}

// readStandbyState reads it on the control connection.
func readStandbyState(ctx context.Context, ctl *control) (standbyState, error) {
	var st standbyState
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical'),
			(SELECT count(*) FROM pg_stat_replication r
				WHERE NOT EXISTS (SELECT FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')),
			coalesce(current_setting('synchronized_standby_slots', true), '')`).
			Scan(&st.physicalSlots, &st.physicalSenders, &st.serverWait)
	})
	if err != nil {
		return st, fmt.Errorf("looking for standbys: %w", err)
	}
	return st, nil
}

// checkStandbyWait refuses to publish on a server with standbys when
// nothing waits for them and the operator did not choose not to wait.
func (r *reader) checkStandbyWait(ctx context.Context, ctl *control) error {
	if r.cfg.waitsForStandbys() {
		return nil
	}
	st, err := readStandbyState(ctx, ctl)
	if err != nil {
		return err
	}
	if st.physicalSlots+st.physicalSenders == 0 || st.serverWait != "" {
		return nil
	}
	if r.cfg.noStandbyWait() {
		r.logger.Warn("publishing without waiting for the standbys (--synchronized-standby-slots none): after a failover Kafka can hold events of orders the new primary lacks",
			"physical_slots", st.physicalSlots, "physical_walsenders", st.physicalSenders)
		return nil
	}
	return permanent("this server has standbys (%d physical slots, %d physical walsenders) and nothing holds the relay back until they have a commit: "+
		"after a failover Kafka could hold events of orders the new primary lacks. Choose one: --synchronized-standby-slots <the standbys' physical slots>; "+
		"synchronized_standby_slots on the server (PostgreSQL 17+); or --synchronized-standby-slots %s to publish without waiting (docs/guarantees.md, \"Failover\")",
		st.physicalSlots, st.physicalSenders, NoStandbyWait)
}
