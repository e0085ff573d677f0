package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/schema"
)

// Failpoints of the reader (see internal/failpoint).
const (
	// FailpointAfterAckBeforeConfirm fires when Kafka acknowledged an event
	// and before the acknowledgement can advance the confirmed LSN.
	FailpointAfterAckBeforeConfirm = "cdc.after_ack_before_confirm"
)

// errPermanent marks errors that reconnecting cannot fix (configuration,
// schema); Run returns them instead of retrying.
type errPermanent struct{ err error }

func (e errPermanent) Error() string { return e.err.Error() }
func (e errPermanent) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return errPermanent{fmt.Errorf(format, args...)}
}

// Run reads the slot until ctx is cancelled. Connection losses (PostgreSQL or
// Kafka) end the current session; Run then reconnects with backoff and
// resumes from the slot's confirmed position, republishing anything that was
// not confirmed. It returns nil after a clean shutdown, or an error that
// reconnecting cannot fix.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid cdc config: %w", err)
	}
	backoff := 250 * time.Millisecond
	for {
		started := time.Now()
		err := runSession(ctx, cfg, logger)
		if ctx.Err() != nil {
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return err
		}
		if time.Since(started) > time.Minute {
			backoff = 250 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		logger.Warn("cdc session ended; reconnecting", "err", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
}

// slotInfo is what the reader checks about its slot before streaming.
type slotInfo struct {
	confirmed pglogrepl.LSN
	activePID *int32
}

// prepare validates the server and the slot over a normal connection and
// returns the position to stream from.
func prepare(ctx context.Context, cfg Config, logger *slog.Logger) (slotInfo, error) {
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return slotInfo{}, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return slotInfo{}, fmt.Errorf("reading wal_level: %w", err)
	}
	if walLevel != "logical" {
		return slotInfo{}, permanent("postgres has wal_level=%s; logical replication needs wal_level=logical (set it in postgresql.conf and restart)", walLevel)
	}
	var pubExists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", cfg.Publication).Scan(&pubExists); err != nil {
		return slotInfo{}, fmt.Errorf("looking up publication: %w", err)
	}
	if !pubExists {
		return slotInfo{}, permanent("publication %q does not exist in this database; run `eventforge migrate`", cfg.Publication)
	}
	if !cfg.NoCreateSlot {
		created, err := schema.EnsureSlot(ctx, conn, cfg.Slot)
		if err != nil {
			return slotInfo{}, err
		}
		if created {
			logger.Warn("created replication slot; outbox rows committed before this moment are not streamed (create the slot with `eventforge migrate` before the first order)", "slot", cfg.Slot)
		}
	}
	var (
		info     slotInfo
		plugin   string
		database string
		found    bool
	)
	err = conn.QueryRow(ctx, `SELECT true, plugin, database, confirmed_flush_lsn::text, active_pid
		FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&found, &plugin, &database, ptrLSN{&info.confirmed}, &info.activePID)
	if errors.Is(err, pgx.ErrNoRows) {
		return slotInfo{}, permanent("replication slot %q does not exist (and --no-create-slot is set); run `eventforge migrate`", cfg.Slot)
	}
	if err != nil {
		return slotInfo{}, fmt.Errorf("reading slot %s: %w", cfg.Slot, err)
	}
	if plugin != schema.OutputPlugin {
		return slotInfo{}, permanent("replication slot %q uses plugin %q, want %q", cfg.Slot, plugin, schema.OutputPlugin)
	}
	if db := conn.Config().Database; database != db {
		return slotInfo{}, permanent("replication slot %q belongs to database %q, not %q", cfg.Slot, database, db)
	}
	return info, nil
}

// ptrLSN scans a text LSN into a pglogrepl.LSN.
type ptrLSN struct{ dst *pglogrepl.LSN }

func (p ptrLSN) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("lsn: unexpected %T", src)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return err
	}
	*p.dst = lsn
	return nil
}

// delivery is the opaque value carried with each produced record.
type delivery struct {
	tx      *checkpoint.Tx
	eventID string
}

func runSession(ctx context.Context, cfg Config, logger *slog.Logger) error {
	info, err := prepare(ctx, cfg, logger)
	if err != nil {
		return err
	}
	if info.activePID != nil {
		return fmt.Errorf("replication slot %s is held by another reader (pid %d)", cfg.Slot, *info.activePID)
	}

	connCfg, err := pgconn.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return permanent("parsing database-url: %w", err)
	}
	connCfg.RuntimeParams["replication"] = "database"
	connCfg.RuntimeParams["application_name"] = "eventforge-cdc"
	rconn, err := pgconn.ConnectConfig(ctx, connCfg)
	if err != nil {
		return fmt.Errorf("opening replication connection: %w", err)
	}
	defer rconn.Close(context.WithoutCancel(ctx))

	ns, table, _ := strings.Cut(cfg.OutboxTable, ".")
	s := &session{
		cfg:     cfg,
		logger:  logger.With("slot", cfg.Slot),
		conn:    rconn,
		tracker: checkpoint.New(info.confirmed),
		decoder: decode.New(ns, table),
		failed:  make(chan error, 1),
	}
	s.pub, err = publish.New(publish.Options{
		Bootstrap: cfg.KafkaBrokers,
		ClientID:  "eventforge-cdc",
		Router:    publish.Router{Topics: cfg.Topics, Fallback: cfg.TopicFallback},
	}, logger, s.onDelivery)
	if err != nil {
		return err
	}
	return s.run(ctx, info.confirmed)
}

// session is one replication connection plus one producer. Any error ends
// it; the next session resumes from the slot's confirmed position.
type session struct {
	cfg     Config
	logger  *slog.Logger
	conn    *pgconn.PgConn
	pub     *publish.Publisher
	tracker *checkpoint.Tracker
	decoder *decode.Decoder
	curTx   *checkpoint.Tx
	failed  chan error // first delivery failure
	sentLSN atomic.Uint64
}

// onDelivery runs on the publisher's delivery-report goroutine.
func (s *session) onDelivery(opaque any, err error) {
	d := opaque.(*delivery)
	if err == nil {
		err = failpoint.Eval(context.Background(), FailpointAfterAckBeforeConfirm)
	}
	if err != nil {
		// A failed delivery never advances the LSN: the transaction stays
		// unconfirmed and the next session republishes it.
		select {
		case s.failed <- fmt.Errorf("delivering event %s: %w", d.eventID, err):
		default:
		}
		return
	}
	s.tracker.Ack(d.tx)
}

func (s *session) run(ctx context.Context, start pglogrepl.LSN) error {
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
	s.logger.Info("replication started", "lsn", start.String(), "publication", s.cfg.Publication)

	loopErr := s.loop(ctx)

	// Shutdown order: stop reading (done), flush the producer, confirm the
	// last contiguously acknowledged commit, close.
	left := s.pub.Close(s.cfg.FlushTimeout)
	if left > 0 {
		s.logger.Warn("events left unacknowledged at shutdown; they will be republished", "events", left)
	}
	if loopErr == nil || ctx.Err() != nil {
		if err := s.sendStatus(context.WithoutCancel(ctx)); err != nil {
			s.logger.Warn("final status update", "err", err)
		}
		s.logger.Info("replication stopped", "lsn", s.tracker.Confirmable().String())
		if loopErr == nil {
			return nil
		}
	}
	return loopErr
}

func (s *session) sendStatus(ctx context.Context) error {
	confirmed := s.tracker.Confirmable()
	written := max(s.tracker.Received(), confirmed)
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
	if prev := pglogrepl.LSN(s.sentLSN.Swap(uint64(confirmed))); prev != confirmed {
		s.logger.Debug("confirmed", "lsn", confirmed.String())
	}
	return nil
}

// loop receives and handles replication messages until ctx is cancelled
// (returns nil) or the session fails.
func (s *session) loop(ctx context.Context) error {
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	for {
		select {
		case err := <-s.failed:
			return err
		case err := <-s.pub.Fatal():
			return fmt.Errorf("kafka producer: %w", err)
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		if !time.Now().Before(nextStatus) {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(s.cfg.StatusInterval)
		}

		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
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
			s.logger.Debug("unexpected replication message", "type", fmt.Sprintf("%T", raw))
		}
	}
}

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
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		if err := s.decoder.Relation(m); err != nil {
			return errPermanent{err}
		}
	case *pglogrepl.BeginMessage:
		s.curTx = s.tracker.Begin()
	case *pglogrepl.InsertMessage:
		ev, ok, err := s.decoder.Insert(m)
		if err != nil {
			return fmt.Errorf("decoding outbox insert at %s: %w", xld.WALStart, err)
		}
		if !ok {
			return nil
		}
		if s.curTx == nil {
			return fmt.Errorf("insert at %s outside a transaction", xld.WALStart)
		}
		s.tracker.Add(s.curTx)
		if err := s.pub.Publish(ctx, &ev, &delivery{tx: s.curTx, eventID: ev.ID}); err != nil {
			return err
		}
	case *pglogrepl.CommitMessage:
		if s.curTx == nil {
			return fmt.Errorf("commit at %s without begin", m.CommitLSN)
		}
		s.tracker.Commit(s.curTx, m.TransactionEndLSN)
		s.curTx = nil
	}
	return nil
}
