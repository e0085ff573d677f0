// Package stream is the relay's replication session: it streams committed
// outbox inserts from the slot, publishes each through the sink keyed by its
// aggregate ID, and confirms a transaction's end LSN to the slot only once
// the sink acknowledged every event of it and of every earlier transaction
// (package checkpoint keeps that account), never past the checkpoint's
// confirm limit (package gap). A record the sink refuses for good is
// dead-lettered (package deadletter) before its LSN is confirmed; any other
// failure ends the session, and the next one resumes from the slot's
// confirmed position, republishing what was not confirmed.
//
// Files: stream.go (a session's life), loop.go (the receive loop and its
// timing), status.go (confirming to the slot), message.go (pgoutput
// messages), hold.go (waiting for the standbys on PostgreSQL 15 and 16),
// suspect.go (records refused in a batch, produced alone).
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/metrics"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/slot"
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// Config is what a session needs of the relay's configuration.
type Config struct {
	// DatabaseURL reaches the database for the replication connection.
	DatabaseURL string
	Slot        string
	Publication string
	Outbox      outbox.Table
	Checkpoints outbox.Table
	// StatusInterval is how often the confirmed position is reported when
	// nothing new was acknowledged (also at once when the server asks).
	StatusInterval time.Duration
	// ConfirmInterval is how soon newly acknowledged WAL is confirmed.
	ConfirmInterval time.Duration
	// FlushTimeout bounds how long the session's end waits for the sink.
	FlushTimeout time.Duration
	// MaxInflightEvents and MaxInflightBytes bound what awaits the sink's
	// acknowledgement; reading pauses at the bounds.
	MaxInflightEvents int
	MaxInflightBytes  int64
	// StandbySlots are held back for (hold.go).
	StandbySlots standby.Slots
	// Txn bounds the sink transactions on a transactional sink (txn.go).
	Txn TxnBounds
}

// Deps are what a session works with, shared with the rest of the relay.
type Deps struct {
	Control     *control.Conn
	Driver      sink.Driver
	Router      sink.Router
	DeadLetters *deadletter.Recorder
	// Suspects outlive sessions: the next session produces each alone.
	Suspects   *deadletter.Suspects
	Limit      *gap.Limit
	Metrics    *metrics.Slot
	Progress   *progress.Progress
	Heartbeats *progress.Heartbeats
	// Nonce tells this process's heartbeats from others'.
	Nonce  string
	Logger *slog.Logger
}

// ErrSlotReplaced means the slot the session streams from is not the one
// it checked: it was dropped and created again in between, or the control
// connection reaches another server.
var ErrSlotReplaced = errors.New("replication slot replaced before streaming started")

// delivery is the opaque value carried with each published record.
type delivery struct {
	tx      *checkpoint.Tx
	eventID string
	size    int
	// alone, for a suspect produced alone, receives its outcome; the
	// session settles it (publishAlone).
	alone chan error
}

// recordOverhead approximates the bytes a record carries beyond its event
// fields (fixed headers, the sink's bookkeeping).
const recordOverhead = 256

// session is one replication connection plus one sink. Any error ends it;
// the next session resumes from the slot's confirmed position.
type session struct {
	cfg Config
	Deps
	conn    *pgconn.PgConn
	pub     sink.Sink
	tracker *checkpoint.Tracker
	decoder *decode.Decoder
	curTx   *checkpoint.Tx
	curN    int           // events of curTx produced so far
	midDone bool          // failpoint.CDCMidTransaction evaluated for curTx
	failed  chan error    // first delivery failure
	space   chan struct{} // an acknowledgement made room in flight
	sentLSN atomic.Uint64
	sentAt  time.Time // when the last status update went out (loop goroutine)
	hold    holder    // the open transaction's events held for the standbys
	txn     *txnState // the open sink transaction, on a transactional sink
}

// newSession is a session without a connection or a sink, starting at start.
func newSession(cfg Config, d Deps, start pglogrepl.LSN) *session {
	return &session{
		cfg:     cfg,
		Deps:    d,
		tracker: checkpoint.New(start),
		decoder: decode.New(cfg.Outbox.Schema(), cfg.Outbox.Name()),
		failed:  make(chan error, 1),
		space:   make(chan struct{}, 1),
	}
}

// Run streams the slot, as st found it, of generation (the slot's
// incarnation, gap.Checkpoint.Generation), until ctx ends (it returns nil)
// or the session fails.
func Run(ctx context.Context, cfg Config, d Deps, st slot.State, generation string) error {
	if st.ActivePID != nil {
		return fmt.Errorf("%w (pid %d)", slot.ErrBusy, *st.ActivePID)
	}
	d.Progress.SetSent(st.Confirmed)
	rconn, err := control.OpenReplication(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer func() {
		rconn.Close(context.WithoutCancel(ctx))
		d.Metrics.Active.Set(0)
	}()
	if st.Failover != nil && !*st.Failover {
		// A slot created before PostgreSQL 17, or by hand: make it a
		// failover slot so a standby that synchronises slots keeps it.
		if err := slot.MakeFailover(ctx, rconn, cfg.Slot); err != nil {
			d.Logger.Warn("could not make the slot a failover slot; a promoted standby will not have it (the reader then recovers the gap)", "err", err)
		}
	}
	start, txn, err := resume(ctx, d, st, generation)
	if err != nil {
		return err
	}
	s := newSession(cfg, d, start)
	s.conn = rconn
	if s.pub, err = d.Driver.Open("eventforge-cdc", s.onDelivery); err != nil {
		return err
	}
	if txn != nil {
		txn.bounds = cfg.Txn
		if txn.pub, _ = s.pub.(sink.Transactional); txn.pub == nil {
			s.pub.Close(0)
			return control.Permanentf("the sink's driver is transactional, its sink is not")
		}
		s.txn = txn
	}
	d.Progress.Attach(s.tracker)
	defer d.Progress.Detach()
	return s.run(ctx, start)
}

// resume is where a session starts: the slot's confirmed position, or, on
// a transactional sink, the later of it and the sink's committed position
// (startPosition), with what to skip of a transaction stored in part.
func resume(ctx context.Context, d Deps, st slot.State, generation string) (pglogrepl.LSN, *txnState, error) {
	td, ok := d.Driver.(sink.TransactionalDriver)
	if !ok {
		return st.Confirmed, nil, nil
	}
	pos, found, err := td.Position(ctx)
	if err != nil {
		return 0, nil, err
	}
	var serverWAL pglogrepl.LSN
	err = d.Control.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(control.LSN{Dst: &serverWAL})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("reading the server's WAL position: %w", err)
	}
	start, xid, n, why := startPosition(st.Confirmed, serverWAL, generation, pos, found)
	if why != "" {
		d.Logger.Info("resuming from the slot's confirmed position", "lsn", start.String(), "why", why)
	} else if start != st.Confirmed || n > 0 {
		d.Logger.Info("resuming from the position committed to the sink", "lsn", start.String(), "slot_lsn", st.Confirmed.String(),
			"partial_xid", xid, "partial_events", n)
	}
	return start, &txnState{generation: generation, lastEnd: start, skipXID: xid, skipN: n}, nil
}

// onDelivery runs on the sink's delivery-report goroutine.
func (s *session) onDelivery(opaque any, err error) {
	d := opaque.(*delivery)
	if err == nil {
		err = failpoint.Eval(context.Background(), failpoint.CDCAfterAckBeforeConfirm)
	}
	if d.alone != nil {
		if err == nil {
			s.tracker.Ack(d.tx, d.size)
			s.Metrics.Published.Inc()
			s.Suspects.Remove(d.eventID)
		}
		d.alone <- err
		s.madeRoom()
		return
	}
	if err != nil {
		// A failed delivery never advances the LSN: the transaction stays
		// unconfirmed and the next session republishes it. A record the
		// sink refused permanently, perhaps only for the batch it was in,
		// is produced alone next time (suspect.go).
		if s.Driver.Permanent(err) {
			s.Suspects.Add(d.eventID)
		}
		s.tracker.Release(d.tx, d.size)
		s.Metrics.Errors.Inc()
		select {
		case s.failed <- fmt.Errorf("delivering event %s: %w", d.eventID, err):
		default:
		}
		return
	}
	s.tracker.Ack(d.tx, d.size)
	s.Metrics.Published.Inc()
	s.madeRoom()
}

// madeRoom wakes the loop waiting for room in flight.
func (s *session) madeRoom() {
	select {
	case s.space <- struct{}{}:
	default:
	}
}
