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
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// Config is what a session needs of the relay's configuration.
type Config struct {
	// DatabaseURL reaches the database for the replication connection: on
	// the primary, or on the standby the relay decodes on.
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
	Control *control.Conn
	// Slots reaches the server that holds the slot (Control, or the
	// standby the relay decodes on); nil means Control.
	Slots       *control.Conn
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

// TxnBounds bound the sink transactions of a session.
type TxnBounds struct {
	Events   int
	Bytes    int64
	Interval time.Duration
}

// txnState is the session's open sink transaction.
type txnState struct {
	pub        sink.Transactional
	bounds     TxnBounds
	generation string
	open       bool
	began      time.Time
	events     int
	bytes      int64
	// lastEnd is the end LSN of the newest PostgreSQL transaction received
	// whole, stored or in the open sink transaction.
	lastEnd pglogrepl.LSN
	// curXID is the open PostgreSQL transaction's ID.
	curXID uint32
	// skip: the first n events of transaction xid are stored already.
	skipXID uint32
	skipN   int
}

// added records an event of size bytes handed to the open sink transaction.
func (t *txnState) added(size int) {
	if !t.open {
		t.open, t.began, t.events, t.bytes = true, time.Now(), 0, 0
	}
	t.events++
	t.bytes += int64(size)
}

// due reports whether the open sink transaction reached a bound at now.
func (t *txnState) due(now time.Time) bool {
	return t.open && (t.events >= t.bounds.Events || t.bytes >= t.bounds.Bytes || now.Sub(t.began) >= t.bounds.Interval)
}

// skipping reports whether the event of the open PostgreSQL transaction
// about to be handled is stored already; it counts it off.
func (t *txnState) skipping() bool {
	if t.skipN == 0 || t.curXID != t.skipXID {
		return false
	}
	t.skipN--
	return true
}

// heldInsert is a decoded outbox insert held back until the standbys
// flushed its transaction's commit.
type heldInsert struct {
	ev        decode.Event
	walStart  pglogrepl.LSN
	decodeErr error
}

// holder is the open transaction's held events and what the session knows
// of the standbys.
type holder struct {
	on       bool // the open transaction's events are held
	held     []heldInsert
	bytes    int64
	commitAt pglogrepl.LSN // start of the open transaction's commit record
	// standbyAt is the standby slots' flush position last read.
	standbyAt pglogrepl.LSN
	noStandby bool // the standby slots were found missing (logged once)
}

// begin starts holding back the events of a transaction whose commit record
// starts at commit, when the session waits for standbys.
func (h *holder) begin(wait bool, commit pglogrepl.LSN) {
	h.on = wait
	h.held, h.bytes, h.commitAt = h.held[:0], 0, commit
}
