package cdc

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// Failpoints of the reader (see internal/failpoint).
const (
	// FailpointAfterAckBeforeConfirm fires when Kafka acknowledged an event
	// and before the acknowledgement can advance the confirmed LSN.
	FailpointAfterAckBeforeConfirm = "cdc.after_ack_before_confirm"
	// FailpointMidTransaction fires once per transaction with events, after
	// some of its events were produced and before its COMMIT is processed:
	// at the first event produced after an earlier event of the same
	// transaction was acknowledged by Kafka, or else just before the COMMIT.
	FailpointMidTransaction = "cdc.mid_transaction"
)

// errPermanent marks errors that reconnecting cannot fix (configuration,
// schema); Run returns them instead of retrying.
type errPermanent struct{ err error }

func (e errPermanent) Error() string { return e.err.Error() }
func (e errPermanent) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return errPermanent{fmt.Errorf(format, args...)}
}

// Run reads the slot until ctx is cancelled.
//
// Several processes may run for one slot: a PostgreSQL advisory lock, held
// by each process's control connection, lets exactly one of them publish; the
// others wait as standbys and take over when the lock and the slot are free.
//
// Connection losses (PostgreSQL or Kafka) end the current session; Run then
// reconnects with backoff and resumes from the slot's confirmed position,
// republishing anything that was not confirmed. It returns nil after a clean
// shutdown, or an error that reconnecting cannot fix.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return RunHealth(ctx, cfg, logger, &Health{})
}

// RunHealth is Run reporting the reader's readiness to h (served as /readyz
// by `eventforge cdc`).
func RunHealth(ctx context.Context, cfg Config, logger *slog.Logger, h *Health) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid cdc config: %w", err)
	}
	ns, table, _ := strings.Cut(cfg.OutboxTable, ".")
	nonce := make([]byte, 6)
	_, _ = crand.Read(nonce)
	r := &reader{
		cfg:         cfg,
		logger:      logger.With("slot", cfg.Slot),
		m:           newSlotMetrics(cfg.Slot),
		prog:        &progress{},
		hb:          &heartbeats{},
		nonce:       hex.EncodeToString(nonce),
		table:       pgx.Identifier{ns, table},
		dlq:         pgx.Identifier(strings.SplitN(cfg.DeadLetterTable, ".", 2)),
		health:      h,
		limit:       newConfirmLimit(),
		checkpoints: pgx.Identifier(strings.SplitN(cfg.CheckpointTable, ".", 2)),
	}
	defer r.m.active.Set(0)
	bo := backoff{max: cfg.MaxBackoff}
	for {
		started := time.Now()
		err := r.runControl(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return err
		}
		r.health.report(fmt.Errorf("reconnecting: %w", err))
		wait := bo.next(time.Since(started))
		r.logger.Warn("cdc connection ended; reconnecting", "err", err, "backoff", wait)
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// reader is one process's state across control connections and sessions.
type reader struct {
	cfg    Config
	logger *slog.Logger
	m      *slotMetrics
	prog   *progress
	hb     *heartbeats
	nonce  string         // tells this process's heartbeats from others'
	table  pgx.Identifier // the outbox table
	dlq    pgx.Identifier // the dead-letter table
	// checkpoints is the checkpoint table (gap.go).
	checkpoints pgx.Identifier
	// limit is the checkpoint's confirm limit: sessions confirm no further.
	limit *confirmLimit
	// sent is the position this process last confirmed to its slot; the
	// checkpoint loop counts only marks at or before it.
	sent atomic.Uint64
	// suspects failed permanently in a batch; the next session produces
	// each alone (deadletter.go).
	suspects suspects
	health   *Health
	// holdOff is when a reader that gave up the lead because it could not
	// publish may compete for it again (health.go).
	holdOff time.Time
}

// backoff is capped exponential backoff with jitter; it starts over after a
// run that lasted a minute.
type backoff struct {
	max time.Duration
	cur time.Duration
}

func (b *backoff) next(lasted time.Duration) time.Duration {
	if b.cur == 0 || lasted > time.Minute {
		b.cur = 250 * time.Millisecond
	}
	wait := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(b.cur*2, b.max)
	return wait
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// sleep waits for d or ctx; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runControl opens the control connection, waits for the leadership lock as
// a standby, then leads — runs replication sessions — until the control
// connection fails or ctx ends.
func (r *reader) runControl(ctx context.Context) error {
	pcfg, err := pgx.ParseConfig(r.cfg.DatabaseURL)
	if err != nil {
		return permanent("parsing database-url: %w", err)
	}
	maps.Copy(pcfg.RuntimeParams, deadPeerParams)
	pcfg.RuntimeParams["application_name"] = "eventforge-cdc-control"
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ctl := &control{conn: conn}
	if err := checkServer(ctx, ctl, r.cfg, r.logger); err != nil {
		return err
	}

	for waiting := false; ; waiting = true {
		if wait := time.Until(r.holdOff); wait > 0 {
			r.health.report(fmt.Errorf("%w: holding off for %s before competing for the slot again", errUnhealthy, wait.Round(time.Second)))
		} else {
			ok, err := tryLock(ctx, ctl, r.cfg.Slot)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			r.health.report(nil)
		}
		if !waiting {
			r.logger.Info("another reader holds the slot, or this one holds off; waiting as standby", "standby_retry", r.cfg.StandbyRetry)
		}
		r.m.active.Set(0)
		r.m.oldestAge.Set(0)
		r.m.inflight.Set(0)
		if err := r.updateSlotStats(ctx, ctl); err != nil {
			return err
		}
		if !sleep(ctx, jitter(r.cfg.StandbyRetry)) {
			return nil
		}
	}
	r.logger.Info("leadership acquired")
	r.health.report(nil)

	lctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	r.limit.reset()
	r.sent.Store(0)
	var wg sync.WaitGroup
	wg.Go(func() { r.monitor(lctx, ctl, lose) })
	wg.Go(func() { r.checkpoint(lctx, ctl) })
	wg.Go(func() { r.raise(lctx, ctl) })
	err = r.lead(lctx, ctl)
	lose(nil)
	wg.Wait()
	r.prog.reset()
	r.m.oldestAge.Set(0)
	cause := context.Cause(lctx)
	if ctx.Err() == nil && errors.Is(cause, errUnhealthy) {
		r.holdOff = time.Now().Add(r.cfg.UnhealthyAfter)
		r.logger.Error("leadership released: this reader cannot publish; a standby may take over", "err", cause, "hold_off", r.cfg.UnhealthyAfter)
		return fmt.Errorf("leadership released: %w", cause)
	}
	if ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("leadership lost: %w", cause)
	}
	return err
}

// lead runs replication sessions until ctx ends (shutdown or lost
// leadership) or a session fails permanently.
func (r *reader) lead(ctx context.Context, ctl *control) error {
	bo := backoff{max: r.cfg.MaxBackoff}
	for {
		started := time.Now()
		err := r.runSession(ctx, ctl)
		if ctx.Err() != nil {
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return err
		}
		var wait time.Duration
		if errors.Is(err, errSlotBusy) || isPGCode(err, "55006") {
			// The previous holder's walsender has not exited yet.
			wait = jitter(r.cfg.StandbyRetry) / 2
			r.logger.Info("slot still held by another process; retrying", "err", err, "backoff", wait)
		} else {
			wait = bo.next(time.Since(started))
			r.logger.Warn("cdc session ended; reconnecting", "err", err, "backoff", wait)
		}
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// monitor runs beside the sessions while this process leads: heartbeats,
// slot statistics, the oldest-unpublished age and the leader's health. A
// statement that fails on a control connection that closed means the
// leadership lock is gone: it cancels the leadership. One that fails on a
// connection still open (the lock still held) is logged and the next tick
// tries again. A leader that cannot publish gives up the leadership
// (health.go).
func (r *reader) monitor(ctx context.Context, ctl *control, lose context.CancelCauseFunc) {
	stats := time.NewTicker(r.cfg.StatusInterval)
	defer stats.Stop()
	beat := time.NewTicker(r.cfg.HeartbeatInterval)
	defer beat.Stop()
	lh := leaderHealth{after: r.cfg.UnhealthyAfter, streaming: time.Now()}
	// failed reports whether err ended the leadership.
	failed := func(err error) bool {
		if err == nil || ctx.Err() != nil {
			return ctx.Err() != nil
		}
		if ctl.closed() {
			lose(err)
			return true
		}
		r.logger.Warn("control statement failed; the connection and the leadership lock are intact", "err", err)
		return false
	}
	if failed(r.heartbeat(ctx, ctl)) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-stats.C:
			if err := lh.check(time.Now(), r.prog); err != nil {
				r.health.report(err)
				r.m.active.Set(0)
				lose(err)
				return
			}
			r.health.report(nil)
			if failed(r.updateSlotStats(ctx, ctl)) || failed(r.updateAge(ctx, ctl)) {
				return
			}
			if lag, ok := r.hb.lag(time.Now()); ok {
				r.m.replicationLag.Set(lag.Seconds())
			}
		case <-beat.C:
			if failed(r.heartbeat(ctx, ctl)) {
				return
			}
		}
	}
}

func (r *reader) heartbeat(ctx context.Context, ctl *control) error {
	now := time.Now()
	if err := emitHeartbeat(ctx, ctl, r.nonce, now); err != nil {
		return err
	}
	r.hb.sent(now)
	return nil
}

func (r *reader) updateSlotStats(ctx context.Context, ctl *control) error {
	lag, retained, err := slotStats(ctx, ctl, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.m.slotLag.Set(float64(lag))
	r.m.retainedWAL.Set(float64(retained))
	return nil
}

// updateAge sets the oldest-unpublished age: from the oldest unconfirmed
// transaction the reader holds or left behind, else from the outbox rows
// created after the newest confirmed commit.
func (r *reader) updateAge(ctx context.Context, ctl *control) error {
	oldest, confirmed := r.prog.snapshot()
	switch {
	case !oldest.IsZero():
		r.m.oldestAge.Set(max(time.Since(oldest).Seconds(), 0))
	case confirmed.IsZero():
		r.m.oldestAge.Set(0)
	default:
		age, err := oldestCreatedAfter(ctx, ctl, r.table, confirmed)
		if err != nil {
			return err
		}
		r.m.oldestAge.Set(age)
	}
	return nil
}

// deadPeerParams make the server probe the reader's connections with TCP
// keepalives, so that a reader lost with its host or network releases the
// leadership lock and the slot in about 25 s instead of the kernel default
// of over two hours.
var deadPeerParams = map[string]string{
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
}

// errSlotBusy means another process's walsender still holds the slot.
var errSlotBusy = errors.New("replication slot is held by another process")

// errSlotMissing means the slot disappeared (dropped) after start.
var errSlotMissing = errors.New("replication slot does not exist")

// isPGCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func isPGCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
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
	size    int
	// alone, for a suspect produced alone, receives its outcome; the
	// session settles it (publishAlone).
	alone chan error
}

// recordOverhead approximates the bytes a record carries beyond its event
// fields (fixed headers, librdkafka bookkeeping).
const recordOverhead = 256

func (r *reader) runSession(ctx context.Context, ctl *control) error {
	info, err := r.prepareSlot(ctx, ctl)
	if err != nil {
		return err
	}
	if info.activePID != nil {
		return fmt.Errorf("%w (pid %d)", errSlotBusy, *info.activePID)
	}
	r.sent.Store(uint64(info.confirmed))

	rconn, err := r.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		rconn.Close(context.WithoutCancel(ctx))
		if r.m.active != nil {
			r.m.active.Set(0)
		}
	}()

	if info.failover != nil && !*info.failover {
		// A slot created before PostgreSQL 17, or by hand: make it a
		// failover slot so a standby that synchronises slots keeps it.
		if err := makeFailoverSlot(ctx, rconn, r.cfg.Slot); err != nil {
			r.logger.Warn("could not make the slot a failover slot; a promoted standby will not have it (the reader then recovers the gap)", "err", err)
		}
	}
	ns, table, _ := strings.Cut(r.cfg.OutboxTable, ".")
	s := &session{
		reader:  r,
		ctl:     ctl,
		conn:    rconn,
		dead:    tableWriter{ctl: ctl, table: r.dlq, slot: r.cfg.Slot},
		tracker: checkpoint.New(info.confirmed),
		decoder: decode.New(ns, table),
		failed:  make(chan error, 1),
		space:   make(chan struct{}, 1),
	}
	s.pub, err = publish.New(publish.Options{
		Bootstrap: r.cfg.KafkaBrokers,
		ClientID:  "eventforge-cdc",
		Router:    publish.Router{Topics: r.cfg.Topics, Fallback: r.cfg.TopicFallback},
		Extra:     producerSettings(r.cfg),
	}, r.logger, s.onDelivery)
	if err != nil {
		return err
	}
	r.prog.attach(s.tracker)
	defer r.prog.detach()
	return s.run(ctx, info.confirmed)
}

// producerSettings are the reader's librdkafka settings beyond the
// publisher's own (idempotence, acks=all).
//
// message.timeout.ms is 0, infinite: a record is retried until Kafka
// acknowledges it or the session ends. librdkafka documents that an
// idempotent producer whose records time out leaves a gap in the
// partition's sequence: it fails the timed-out records, bumps its epoch and
// goes on with the later ones, so a later event of an order could reach
// Kafka before an earlier one that the next session republishes (Cancelled,
// Created, Cancelled). Without a timeout a Kafka outage only pauses the
// reader (the in-flight bounds fill and it stops reading); shutdown and lost
// leadership still end the session, whose flush is bounded by FlushTimeout
// and whose unacknowledged records are purged, never confirmed.
//
// librdkafka's local queue is sized above the reader's own in-flight bounds,
// so the bounds, not the queue, pause the reader. ProducerSettings come
// last; Validate refused the ones that would break the above.
func producerSettings(cfg Config) kafka.ConfigMap {
	kbytes := cfg.MaxInflightBytes*2/1024 + 1024
	cm := kafka.ConfigMap{
		"message.timeout.ms":           0,
		"queue.buffering.max.messages": cfg.MaxInflightEvents + 1000,
		"queue.buffering.max.kbytes":   int(min(kbytes, 2097151)),
		"go.events.channel.size":       min(cfg.MaxInflightEvents+1000, 100000),
		"go.produce.channel.size":      1000,
	}
	for k, v := range cfg.ProducerSettings {
		cm[k] = v
	}
	return cm
}

// producer is what a session needs from the Kafka publisher
// (*publish.Publisher).
type producer interface {
	// Publish hands ev to Kafka; the outcome arrives at the session's
	// delivery callback with opaque.
	Publish(ctx context.Context, ev *decode.Event, opaque any) error
	// Fatal reports a fatal producer error.
	Fatal() <-chan error
	// Close flushes for up to timeout, closes, and returns how many records
	// were left undelivered.
	Close(timeout time.Duration) int
}

// session is one replication connection plus one producer. Any error ends
// it; the next session resumes from the slot's confirmed position.
type session struct {
	*reader
	ctl     *control
	conn    *pgconn.PgConn
	pub     producer
	dead    deadLetterWriter
	tracker *checkpoint.Tracker
	decoder *decode.Decoder
	curTx   *checkpoint.Tx
	curN    int           // events of curTx produced so far
	midDone bool          // FailpointMidTransaction evaluated for curTx
	failed  chan error    // first delivery failure
	space   chan struct{} // an acknowledgement made room in flight
	sentLSN atomic.Uint64
	sentAt  time.Time // when the last status update went out (loop goroutine)
	// standbyAt is the standby slots' flush position last read (standbys.go).
	standbyAt pglogrepl.LSN
	noStandby bool // the standby slots were found missing (logged once)
	// holding: the open transaction's events are held back until the
	// standbys flushed its commit (standbys.go).
	holding   bool
	held      []heldInsert
	heldBytes int64
	commitAt  pglogrepl.LSN // start of the open transaction's commit record
}

// onDelivery runs on the publisher's delivery-report goroutine.
func (s *session) onDelivery(opaque any, err error) {
	d := opaque.(*delivery)
	if err == nil {
		err = failpoint.Eval(context.Background(), FailpointAfterAckBeforeConfirm)
	}
	if d.alone != nil {
		if err == nil {
			s.tracker.Ack(d.tx, d.size)
			s.m.published.Inc()
			s.suspects.remove(d.eventID)
		}
		d.alone <- err
		select {
		case s.space <- struct{}{}:
		default:
		}
		return
	}
	if err != nil {
		// A failed delivery never advances the LSN: the transaction stays
		// unconfirmed and the next session republishes it. A record Kafka
		// refused permanently, perhaps only for the batch it was in, is
		// produced alone next time (deadletter.go).
		if publish.Permanent(err) {
			s.suspects.add(d.eventID)
		}
		s.tracker.Release(d.tx, d.size)
		s.m.errors.Inc()
		select {
		case s.failed <- fmt.Errorf("delivering event %s: %w", d.eventID, err):
		default:
		}
		return
	}
	s.tracker.Ack(d.tx, d.size)
	s.m.published.Inc()
	select {
	case s.space <- struct{}{}:
	default:
	}
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
	s.m.active.Set(1)
	s.logger.Info("replication started; this process publishes", "lsn", start.String(), "publication", s.cfg.Publication)

	loopErr := s.loop(ctx)

	// Shutdown order: stop reading (done), flush the producer, confirm the
	// last contiguously acknowledged commit, close.
	left := s.pub.Close(s.cfg.FlushTimeout)
	if left > 0 {
		s.logger.Warn("events left unacknowledged at session end; they will be republished", "events", left)
	}
	s.m.inflight.Set(0)
	s.finalStatus(ctx)
	s.logger.Info("replication stopped", "lsn", s.tracker.Confirmable().String(), "err", loopErr)
	return loopErr
}

// finalStatus confirms the acknowledged prefix at the session's end, which
// is safe whatever ended it, raising the confirm limit first so that all of
// it can be confirmed. On a connection that broke there is nothing to send it
// on (pgconn is already writing its goodbye on it from another goroutine).
func (s *session) finalStatus(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if s.conn.IsClosed() {
		s.logger.Debug("final status update skipped: connection closed")
		return
	}
	if c := s.tracker.Confirmable(); c > pglogrepl.LSN(s.limit.lsn.Load()) {
		if lsn, err := raiseConfirmLimit(ctx, s.ctl, s.checkpoints, s.cfg.Slot, c); err != nil {
			s.logger.Debug("raising the confirm limit for the final status update", "err", err)
		} else {
			s.limit.set(lsn)
		}
	}
	if err := s.sendStatus(ctx); err != nil {
		s.logger.Debug("final status update", "err", err)
	}
}

func (s *session) sendStatus(ctx context.Context) error {
	confirmed := s.limit.clamp(s.tracker.Confirmable(), s.tracker.Received())
	written := max(s.tracker.Received(), confirmed)
	s.m.inflight.Set(float64(s.tracker.Inflight()))
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
	s.sent.Store(uint64(confirmed))
	s.m.confirmedLSN.Set(float64(confirmed))
	if prev := pglogrepl.LSN(s.sentLSN.Swap(uint64(confirmed))); prev != confirmed {
		s.logger.Debug("confirmed", "lsn", confirmed.String())
	}
	return nil
}

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
			s.m.errors.Inc()
			return fmt.Errorf("kafka producer: %w", err)
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		now, flow := time.Now(), s.tracker.Flow()
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
				s.m.errors.Inc()
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
			s.logger.Debug("unexpected replication message", "type", fmt.Sprintf("%T", raw))
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
			return errPermanent{err}
		}
	case *pglogrepl.BeginMessage:
		s.curTx, s.curN, s.midDone = s.tracker.Begin(m.CommitTime), 0, false
		s.holdFor(m.FinalLSN)
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
		if s.holding {
			return s.hold(ctx, heldInsert{ev: ev, walStart: walStart, decodeErr: err})
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
			if err := failpoint.Eval(ctx, FailpointMidTransaction); err != nil {
				return err
			}
		}
		s.tracker.Commit(s.curTx, m.TransactionEndLSN)
		s.curTx = nil
	case *pglogrepl.LogicalDecodingMessage:
		s.handleMessage(m)
	}
	return nil
}

// insert produces one decoded outbox event of the open transaction (or
// dead-letters it when no record can be built from it); decodeErr is the
// decoder's ErrMalformedHeaders, if any.
func (s *session) insert(ctx context.Context, ev *decode.Event, walStart pglogrepl.LSN, decodeErr error) error {
	malformed := decodeErr != nil
	size := ev.Size() + recordOverhead
	switch {
	case malformed:
		// No record can be built: the one row, never the batch.
		s.tracker.Add(s.curTx, size)
		if err := s.deadLetter(ctx, ev, walStart, size, decodeErr); err != nil {
			return err
		}
	case s.suspects.has(ev.ID):
		if err := s.publishAlone(ctx, ev, walStart, size); err != nil {
			return err
		}
	default:
		s.tracker.Add(s.curTx, size)
		if err := s.pub.Publish(ctx, ev, &delivery{tx: s.curTx, eventID: ev.ID, size: size}); err != nil {
			if publish.Permanent(err) {
				// Produce refused this record by itself.
				if err := s.deadLetter(ctx, ev, walStart, size, err); err != nil {
					return err
				}
				break
			}
			s.tracker.Release(s.curTx, size)
			return err
		}
	}
	s.curN++
	if !s.midDone && s.tracker.Acked(s.curTx) > 0 {
		s.midDone = true
		if err := failpoint.Eval(ctx, FailpointMidTransaction); err != nil {
			return err
		}
	}
	return nil
}

// handleMessage handles a logical decoding message: a heartbeat measures the
// replication lag and, when nothing is open or unacknowledged, moves the
// confirmable position to it like a keepalive does.
func (s *session) handleMessage(m *pglogrepl.LogicalDecodingMessage) {
	if m.Prefix != HeartbeatPrefix {
		return
	}
	nonce, sentAt, ok := parseHeartbeat(m.Content)
	if !ok {
		return
	}
	if nonce == s.nonce {
		s.hb.received(sentAt, time.Now())
	}
	if !m.Transactional {
		s.tracker.AdvanceIdle(m.LSN)
	}
}
