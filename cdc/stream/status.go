package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/gap"
)

// finalStatus confirms the acknowledged prefix at the session's end, which
// is safe whatever ended it, raising the confirm limit first so that all of
// it can be confirmed. On a connection that broke there is nothing to send it
// on (pgconn is already writing its goodbye on it from another goroutine).
func (s *session) finalStatus(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if s.conn.IsClosed() {
		s.Logger.Debug("final status update skipped: connection closed")
		return
	}
	if c := s.tracker.Confirmable(); c > s.Limit.LSN() {
		if lsn, err := gap.RaiseLimit(ctx, s.Control, s.cfg.Checkpoints, s.cfg.Slot, c); err != nil {
			s.Logger.Debug("raising the confirm limit for the final status update", "err", err)
		} else {
			s.Limit.Set(lsn)
		}
	}
	if err := s.sendStatus(ctx); err != nil {
		s.Logger.Debug("final status update", "err", err)
	}
}

func (s *session) sendStatus(ctx context.Context) error {
	confirmed := s.Limit.Clamp(s.tracker.Confirmable(), s.tracker.Received())
	written := max(s.tracker.Received(), confirmed)
	s.Metrics.Inflight.Set(float64(s.tracker.Inflight()))
	// All three positions are set: pglogrepl would copy a zero flush position
	// from the write position and confirm WAL Kafka has not acknowledged.
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: written,
		WALFlushPosition: confirmed,
		WALApplyPosition: confirmed,
	})
	if err != nil {
		return fmt.Errorf("confirming lsn %s: %w", confirmed, err)
	}
	s.sentAt = time.Now()
	s.Progress.SetSent(confirmed)
	s.Metrics.ConfirmedLSN.Set(float64(confirmed))
	if prev := pglogrepl.LSN(s.sentLSN.Swap(uint64(confirmed))); prev != confirmed {
		s.Logger.Debug("confirmed", "lsn", confirmed.String())
	}
	return nil
}
