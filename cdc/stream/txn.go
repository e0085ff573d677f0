package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/sink"
)

// Exactly-once: a session on a transactional sink (sink.Transactional).
//
// The session groups whole PostgreSQL transactions into one sink
// transaction, which it commits — with the position its records reach — at
// a PostgreSQL commit once the open sink transaction holds TxnEvents
// events or TxnBytes bytes or is TxnInterval old; a quiet stream commits
// what it holds at the next interval. The sink reports its records stored
// only at that commit, and the session confirms the slot only after, so
// "published" and "position recorded" are one fact and the slot follows.
//
// A PostgreSQL transaction is split across sink transactions only when it
// must be: when it alone reaches the in-flight bounds (nothing could be
// acknowledged until its commit message), and around a record produced
// alone (a suspect). The position then names the transaction and how many
// of its events are stored (sink.Position.PartialXID, PartialEvents), and
// the next session skips exactly those.
//
// At start the session resumes from the later of the slot's confirmed
// position and the committed position of its generation (the slot's
// incarnation; Run), so a relay that crashed between a sink commit and the
// slot's confirmation republishes nothing.

// commit commits the open sink transaction. Within a PostgreSQL
// transaction (curTx open) the position names it and how many of its
// events are stored.
func (s *session) commit(ctx context.Context) error { return s.commitAt(ctx, s.curN) }

// commitAt is commit with stored events of the open PostgreSQL transaction
// stored.
func (s *session) commitAt(ctx context.Context, stored int) error {
	t := s.txn
	if t == nil || !t.open {
		return nil
	}
	pos := sink.Position{LSN: uint64(t.lastEnd), Generation: t.generation}
	if s.curTx != nil {
		pos.PartialXID, pos.PartialEvents = t.curXID, stored
	}
	t.open = false
	if err := t.pub.Commit(ctx, pos); err != nil {
		s.Metrics.Errors.Inc()
		return fmt.Errorf("committing %d events to the sink: %w", t.events, err)
	}
	return nil
}

// commitIfDue commits at a PostgreSQL transaction's end (end) when a bound
// is reached.
func (s *session) commitIfDue(ctx context.Context, end pglogrepl.LSN) error {
	if s.txn == nil {
		return nil
	}
	s.txn.lastEnd = end
	if !s.txn.due(time.Now()) {
		return nil
	}
	return s.commit(ctx)
}

// commitQuiet commits between PostgreSQL transactions when the interval
// passed, and within one when it alone fills the in-flight bounds.
func (s *session) commitQuiet(ctx context.Context, now time.Time, full bool) error {
	if s.txn == nil || !s.txn.open {
		return nil
	}
	switch {
	case s.curTx == nil && s.txn.due(now):
	case full:
	default:
		return nil
	}
	return s.commit(ctx)
}

// startPosition resumes a transactional session: the later of the slot's
// confirmed position and the sink's committed position of this generation
// (skipping the stored part of a transaction it names), or the slot's when
// the sink's is older, of another generation, or past serverWAL (the
// position of a timeline this server does not have).
func startPosition(confirmed, serverWAL pglogrepl.LSN, generation string, pos sink.Position, ok bool) (pglogrepl.LSN, uint32, int, string) {
	lsn := pglogrepl.LSN(pos.LSN)
	switch {
	case !ok:
		return confirmed, 0, 0, "no position committed yet"
	case pos.Generation != generation:
		return confirmed, 0, 0, fmt.Sprintf("the committed position is of generation %q, the slot's is %q", pos.Generation, generation)
	case lsn < confirmed:
		return confirmed, 0, 0, "the slot is confirmed past the committed position"
	case lsn > serverWAL:
		return confirmed, 0, 0, fmt.Sprintf("the committed position %s is past this server's WAL (%s)", lsn, serverWAL)
	}
	return lsn, pos.PartialXID, pos.PartialEvents, ""
}
