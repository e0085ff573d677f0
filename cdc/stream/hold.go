package stream

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/backoff"
	"github.com/eventforge/eventforge/cdc/standby"
)

// Waiting for the standbys (PostgreSQL 15 and 16; package standby says why).
//
// With --synchronized-standby-slots the session holds a transaction's events
// back until the commit message, which carries the end of the commit
// record, and produces them only once every named physical slot on the
// primary has flushed up to that end (the slot's restart_lsn, which a
// physical slot advances to the standby's flush position). The begin
// message only knows where the commit record starts, and a standby can have
// flushed the start of a record and not its end.
//
// A transaction whose events exceed the in-flight bounds is not held whole:
// once the bound is reached the session waits for the standbys to flush the
// start of its commit record and produces the rest as it streams. Such a
// transaction is never an order (a bulk outbox insert or replay); the
// window left is the primary dying while the standby has part of that
// commit record.

// holdInsert keeps one insert back; at the in-flight bounds it stops
// holding and produces what it held once the standbys flushed the start of
// the commit record.
func (s *session) holdInsert(ctx context.Context, in heldInsert) error {
	h := &s.hold
	h.held = append(h.held, in)
	h.bytes += int64(in.ev.Size() + recordOverhead)
	if len(h.held) < s.cfg.MaxInflightEvents && h.bytes < s.cfg.MaxInflightBytes {
		return nil
	}
	s.Logger.Warn("transaction exceeds the in-flight bounds; publishing it once the standbys flushed the start of its commit record",
		"commit_lsn", h.commitAt.String(), "events", len(h.held))
	return s.releaseHeld(ctx, h.commitAt+1)
}

// releaseHeld waits until the standbys flushed through upTo and produces the
// held events.
func (s *session) releaseHeld(ctx context.Context, upTo pglogrepl.LSN) error {
	h := &s.hold
	if !h.on {
		return nil
	}
	h.on = false
	if err := s.waitStandbys(ctx, upTo); err != nil {
		return err
	}
	for i := range h.held {
		if err := s.insert(ctx, &h.held[i].ev, h.held[i].walStart, h.held[i].decodeErr); err != nil {
			return err
		}
	}
	clear(h.held)
	h.held = h.held[:0]
	return nil
}

// standbyPoll is how often the session reads the standbys' positions while
// a transaction waits for them.
const standbyPoll = 2 * time.Millisecond

// waitStandbys returns once every standby slot flushed through commit,
// keeping the replication connection alive with status updates meanwhile.
func (s *session) waitStandbys(ctx context.Context, commit pglogrepl.LSN) error {
	h := &s.hold
	if !s.cfg.StandbySlots.Waits() || h.standbyAt >= commit {
		return nil
	}
	began, warned := time.Now(), false
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	for {
		at, err := standby.Flushed(ctx, s.Control, s.cfg.StandbySlots)
		if errors.Is(err, standby.ErrNoSlots) {
			// A promoted standby has no standby of its own until one is
			// built: publish, as the server itself would commit.
			if !h.noStandby {
				s.Logger.Warn("none of the standby slots exists on this server (a promoted standby?); publishing without waiting", "slots", s.cfg.StandbySlots)
				h.noStandby = true
			}
			return nil
		}
		if err != nil {
			return err
		}
		h.standbyAt = max(h.standbyAt, at)
		if h.standbyAt >= commit {
			s.Metrics.StandbyWait.Add(time.Since(began).Seconds())
			return nil
		}
		if !warned && time.Since(began) > 10*time.Second {
			s.Logger.Warn("waiting for the standby slots to flush a commit before publishing it", "slots", s.cfg.StandbySlots,
				"commit_lsn", commit.String(), "standby_lsn", h.standbyAt.String())
			warned = true
		}
		if !time.Now().Before(nextStatus) {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}
		if !backoff.Sleep(ctx, standbyPoll) {
			return ctx.Err()
		}
	}
}
