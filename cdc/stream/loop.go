package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/slot"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// full reports whether the in-flight bounds are reached.
func (s *session) full() bool { return s.exceeds(s.tracker.Flow()) }

// exceeds reports whether f reaches the in-flight bounds.
func (s *session) exceeds(f checkpoint.Flow) bool {
	return f.Inflight >= s.cfg.MaxInflightEvents || f.Bytes >= s.cfg.MaxInflightBytes
}

// confirmDue reports whether Kafka acknowledged WAL that was not confirmed
// yet, and the last status update is at least a confirm interval old.
func (s *session) confirmDue(now time.Time, f checkpoint.Flow) bool {
	return f.Confirmable != pglogrepl.LSN(s.sentLSN.Load()) && now.Sub(s.sentAt) >= s.cfg.ConfirmInterval
}

// wakeAt is when waiting for the next replication message must stop: at the
// next status update, or, while events await acknowledgement or acknowledged
// WAL awaits confirmation, at the next confirm interval boundary, so that
// the last acknowledgements of a burst are confirmed promptly even when no
// message follows them. Boundaries are aligned so the deadline, and the
// context behind it, changes at most once per interval.
func (s *session) wakeAt(now, nextStatus time.Time, f checkpoint.Flow) time.Time {
	if f.Inflight == 0 && f.Confirmable == pglogrepl.LSN(s.sentLSN.Load()) {
		return nextStatus
	}
	tick := now.Truncate(s.cfg.ConfirmInterval).Add(s.cfg.ConfirmInterval)
	if tick.Before(nextStatus) {
		return tick
	}
	return nextStatus
}

// loop receives and handles replication messages until ctx is cancelled
// (returns nil) or the session fails.
func (s *session) loop(ctx context.Context) error {
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	var rd receiveDeadline
	defer rd.stop()
	for {
		select {
		case err := <-s.failed:
			return err
		case err := <-s.pub.Fatal():
			s.Metrics.Errors.Inc()
			return fmt.Errorf("kafka producer: %w", err)
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		now, flow := time.Now(), s.tracker.Flow()
		if s.txn != nil && s.txn.open {
			// A transactional sink acknowledges only at its commits.
			if err := s.commitQuiet(ctx, now, s.exceeds(flow)); err != nil {
				return err
			}
			flow = s.tracker.Flow()
		}
		if !now.Before(nextStatus) || s.confirmDue(now, flow) {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}

		if s.exceeds(flow) {
			// Backpressure: stop reading until acknowledgements make room.
			// Status updates go on, so the server keeps the connection.
			wait := time.NewTimer(time.Until(nextStatus))
			select {
			case <-s.space:
			case <-wait.C:
			case <-ctx.Done():
			case err := <-s.failed:
				wait.Stop()
				return err
			case err := <-s.pub.Fatal():
				wait.Stop()
				s.Metrics.Errors.Inc()
				return fmt.Errorf("kafka producer: %w", err)
			}
			wait.Stop()
			continue
		}

		raw, err := s.conn.ReceiveMessage(rd.until(ctx, s.wakeAt(now, nextStatus, flow)))
		if err != nil {
			if pgconn.Timeout(err) || ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("receiving replication message: %w", err)
		}

		switch m := raw.(type) {
		case *pgproto3.CopyData:
			replyNow, err := s.handleCopyData(ctx, m.Data)
			if err != nil {
				return err
			}
			if replyNow {
				nextStatus = time.Time{}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		default:
			s.Logger.Debug("unexpected replication message", "type", fmt.Sprintf("%T", raw))
		}
	}
}

// receiveDeadline keeps one deadline context per status period, so that
// receiving a message does not cost a new context and timer each time.
type receiveDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

// until returns a context of parent that ends at t.
func (d *receiveDeadline) until(parent context.Context, t time.Time) context.Context {
	if d.ctx == nil || !d.at.Equal(t) {
		d.stop()
		d.ctx, d.cancel = context.WithDeadline(parent, t)
		d.at = t
	}
	return d.ctx
}

func (d *receiveDeadline) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

func (s *session) run(ctx context.Context, start pglogrepl.LSN) error {
	if err := failpoint.Eval(ctx, failpoint.CDCBeforeStartReplication); err != nil {
		s.pub.Close(time.Second)
		return err
	}
	err := pglogrepl.StartReplication(ctx, s.conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{
			"proto_version '1'",
			fmt.Sprintf("publication_names '%s'", s.cfg.Publication),
			"messages 'true'",
		},
	})
	if err != nil {
		s.pub.Close(time.Second)
		return fmt.Errorf("starting replication on slot %s at %s: %w", s.cfg.Slot, start, err)
	}
	if err := s.checkStreamedSlot(ctx); err != nil {
		s.pub.Close(time.Second)
		return err
	}
	s.Metrics.Active.Set(1)
	s.Logger.Info("replication started; this process publishes", "lsn", start.String(), "publication", s.cfg.Publication)

	loopErr := s.loop(ctx)

	// Shutdown order: stop reading (done), flush the sink (a transactional
	// one commits what it holds after a clean stop), confirm the last
	// contiguously acknowledged commit, close.
	if loopErr == nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.FlushTimeout)
		if err := s.commit(cctx); err != nil {
			s.Logger.Warn("committing the sink transaction at the session's end; its events will be republished", "err", err)
		}
		cancel()
	}
	left := s.pub.Close(s.cfg.FlushTimeout)
	if left > 0 {
		s.Logger.Warn("events left unacknowledged at session end; they will be republished", "events", left)
	}
	s.Metrics.Inflight.Set(0)
	s.finalStatus(ctx)
	s.Logger.Info("replication stopped", "lsn", s.tracker.Confirmable().String(), "err", loopErr)
	return loopErr
}

// checkStreamedSlot checks, once streaming started and before any message
// is handled, that the slot this session holds is the one the relay
// checked. The slot is read and checked on the control connection, and
// streaming starts on the replication connection from the position read:
// a slot dropped and recreated in between would be forwarded silently by
// the server to its new confirmed position, past rows nobody published,
// and every position the session confirmed from then on would raise the
// confirm limit over the gap. Now that this session's walsender holds the
// slot, nobody can drop it: it must be active with that walsender's pid on
// the slot's server (Deps.Slots), and still within the confirm limit.
func (s *session) checkStreamedSlot(ctx context.Context) error {
	slots := s.Slots
	if slots == nil {
		slots = s.Control
	}
	st, err := slot.Read(ctx, slots, s.cfg.Slot)
	if err != nil {
		return err
	}
	pid := s.conn.PID()
	switch {
	case !st.Exists:
		return fmt.Errorf("%w: slot %s does not exist where the control connection reads it", ErrSlotReplaced, s.cfg.Slot)
	case st.ActivePID == nil || uint32(*st.ActivePID) != pid:
		return fmt.Errorf("%w: slot %s is held by pid %v, not by this session's walsender (pid %d): the control and replication connections reach different servers", ErrSlotReplaced, s.cfg.Slot, st.ActivePID, pid)
	}
	if reason := gap.Reason(st, gap.Checkpoint{Found: true, Limit: s.Limit.LSN()}); reason != "" {
		return fmt.Errorf("%w: %s", ErrSlotReplaced, reason)
	}
	return nil
}
