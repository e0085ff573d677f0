package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// handleCopyData handles one CopyData frame; replyNow reports a keepalive
// that asked for an immediate status update.
func (s *session) handleCopyData(ctx context.Context, data []byte) (replyNow bool, err error) {
	if len(data) == 0 {
		return false, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, fmt.Errorf("parsing keepalive: %w", err)
		}
		// Nothing open or unacknowledged: everything before the server's WAL
		// end is published, so confirm it and let the server recycle WAL.
		s.tracker.AdvanceIdle(pkm.ServerWALEnd)
		return pkm.ReplyRequested, nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, fmt.Errorf("parsing xlogdata: %w", err)
		}
		return false, s.handleWAL(ctx, xld)
	}
	return false, nil
}

func (s *session) handleWAL(ctx context.Context, xld pglogrepl.XLogData) error {
	msg, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return fmt.Errorf("decoding pgoutput message at %s: %w", xld.WALStart, err)
	}
	return s.handle(ctx, msg, xld.WALStart)
}

// handle applies one decoded pgoutput message received at walStart.
func (s *session) handle(ctx context.Context, msg pglogrepl.Message, walStart pglogrepl.LSN) error {
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		if err := s.decoder.Relation(m); err != nil {
			return control.PermanentError{Err: err}
		}
	case *pglogrepl.BeginMessage:
		s.curTx, s.curN, s.midDone = s.tracker.Begin(m.CommitTime), 0, false
		s.hold.begin(s.cfg.StandbySlots.Waits(), m.FinalLSN)
		if s.txn != nil {
			s.txn.curXID = m.Xid
		}
	case *pglogrepl.InsertMessage:
		ev, ok, err := s.decoder.Insert(m)
		malformed := errors.Is(err, decode.ErrMalformedHeaders)
		if err != nil && !malformed {
			return fmt.Errorf("decoding outbox insert at %s: %w", walStart, err)
		}
		if !ok {
			return nil
		}
		if s.curTx == nil {
			return fmt.Errorf("insert at %s outside a transaction", walStart)
		}
		if s.hold.on {
			return s.holdInsert(ctx, heldInsert{ev: ev, walStart: walStart, decodeErr: err})
		}
		return s.insert(ctx, &ev, walStart, err)
	case *pglogrepl.CommitMessage:
		if s.curTx == nil {
			return fmt.Errorf("commit at %s without begin", m.CommitLSN)
		}
		if err := s.releaseHeld(ctx, m.TransactionEndLSN); err != nil {
			return err
		}
		if !s.midDone && s.curN > 0 {
			s.midDone = true
			if err := failpoint.Eval(ctx, failpoint.CDCMidTransaction); err != nil {
				return err
			}
		}
		s.tracker.Commit(s.curTx, m.TransactionEndLSN)
		s.curTx = nil
		return s.commitIfDue(ctx, m.TransactionEndLSN)
	case *pglogrepl.LogicalDecodingMessage:
		s.handleMessage(m)
	}
	return nil
}

// handleMessage handles a logical decoding message: a heartbeat measures the
// replication lag and, when nothing is open or unacknowledged, moves the
// confirmable position to it like a keepalive does.
func (s *session) handleMessage(m *pglogrepl.LogicalDecodingMessage) {
	if m.Prefix != progress.HeartbeatPrefix {
		return
	}
	nonce, sentAt, ok := progress.ParseHeartbeat(m.Content)
	if !ok {
		return
	}
	if nonce == s.Nonce {
		s.Heartbeats.Received(sentAt, time.Now())
	}
	if !m.Transactional {
		s.tracker.AdvanceIdle(m.LSN)
	}
}
