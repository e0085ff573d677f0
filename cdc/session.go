package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/publish"
	"github.com/eventforge/eventforge/internal/failpoint"
)

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
	// Publish hands ev to Kafka in group (the session's group is the
	// transaction); the outcome arrives at the session's delivery callback
	// with opaque. An order's events reach Kafka in the order of their
	// transactions, and none after one of them failed (publish/order.go).
	Publish(ctx context.Context, ev *decode.Event, group, opaque any) error
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
	midDone bool          // failpoint.CDCMidTransaction evaluated for curTx
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
		err = failpoint.Eval(context.Background(), failpoint.CDCAfterAckBeforeConfirm)
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

// errSlotReplaced means the slot the session streams from is not the one
// it checked: it was dropped and created again in between, or the control
// connection reaches another server.
var errSlotReplaced = errors.New("replication slot replaced before streaming started")

// checkStreamedSlot checks, once streaming started and before any message
// is handled, that the slot this session holds is the one prepareSlot
// checked. The slot is read and checked on the control connection, and
// streaming starts on the replication connection from the position read:
// a slot dropped and recreated in between would be forwarded silently by
// the server to its new confirmed position, past rows nobody published,
// and every position the session confirmed from then on would raise the
// confirm limit over the gap. Now that this session's walsender holds the
// slot, nobody can drop it: it must be active with that walsender's pid on
// the control connection's server, and still within the confirm limit.
func (s *session) checkStreamedSlot(ctx context.Context) error {
	st, err := readSlotCheck(ctx, s.ctl, s.cfg.Slot)
	if err != nil {
		return err
	}
	pid := s.conn.PID()
	switch {
	case !st.exists:
		return fmt.Errorf("%w: slot %s does not exist where the control connection reads it", errSlotReplaced, s.cfg.Slot)
	case st.activePID == nil || uint32(*st.activePID) != pid:
		return fmt.Errorf("%w: slot %s is held by pid %v, not by this session's walsender (pid %d): the control and replication connections reach different servers", errSlotReplaced, s.cfg.Slot, st.activePID, pid)
	}
	if reason := gapReason(st, checkpointRow{found: true, limit: pglogrepl.LSN(s.limit.lsn.Load())}); reason != "" {
		return fmt.Errorf("%w: %s", errSlotReplaced, reason)
	}
	return nil
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
