// Package leader runs the relay's leadership: one process per slot
// publishes, the others wait as standbys.
//
// A PostgreSQL advisory lock, held by each process's control connection,
// lets exactly one of them lead; the others retry every StandbyRetry and
// take over when the lock and the slot are free. The leader checks the slot
// against its checkpoint and recovers a gap (package gap), streams
// (package stream), records its checkpoint and prunes the outbox (package
// retention), raises the confirm limit, and watches itself (monitor.go,
// health.go): a leader that cannot publish gives the lock up for a standby.
//
// Connection losses end the current session or leadership; Run then
// reconnects with backoff and resumes from the slot's confirmed position,
// republishing anything that was not confirmed.
package leader

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eventforge/eventforge/cdc/backoff"
	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/metrics"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/cdc/retention"
	"github.com/eventforge/eventforge/cdc/slot"
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/cdc/stream"
)

// Run leads or stands by until ctx is cancelled, reconnecting with backoff.
// It returns nil after a clean shutdown, or an error that reconnecting
// cannot fix (control.PermanentError).
func Run(ctx context.Context, cfg Config, d Deps) error {
	nonce := make([]byte, 6)
	_, _ = crand.Read(nonce)
	r := &relay{
		cfg: cfg, d: d,
		m:        metrics.NewSlot(cfg.Slot),
		prog:     &progress.Progress{},
		hb:       &progress.Heartbeats{},
		nonce:    hex.EncodeToString(nonce),
		limit:    gap.NewLimit(),
		suspects: &deadletter.Suspects{},
	}
	defer r.m.Active.Set(0)
	bo := backoff.Backoff{Max: cfg.MaxBackoff}
	for {
		started := time.Now()
		err := r.runControl(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if control.IsPermanent(err) {
			return err
		}
		d.Health.report(fmt.Errorf("reconnecting: %w", err))
		wait := bo.Next(time.Since(started))
		d.Logger.Warn("cdc connection ended; reconnecting", "err", err, "backoff", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// runControl opens the control connection, waits for the leadership lock as
// a standby, then leads — runs replication sessions — until the control
// connection fails or ctx ends.
func (r *relay) runControl(ctx context.Context) error {
	ctl, err := control.Open(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer ctl.Close(context.WithoutCancel(ctx))
	if err := checkServer(ctx, ctl, r.cfg); err != nil {
		return err
	}
	slots, err := r.openSlots(ctx, ctl)
	if err != nil {
		return err
	}
	if slots != ctl {
		defer slots.Close(context.WithoutCancel(ctx))
	}
	if err := r.standBy(ctx, ctl, slots); err != nil || ctx.Err() != nil {
		return err
	}
	r.d.Logger.Info("leadership acquired")
	r.d.Health.report(nil)

	lctx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	r.limit.Reset()
	r.prog.SetSent(0)
	l := r.newLeadership(ctl, slots)
	var wg sync.WaitGroup
	wg.Go(func() { r.monitor(lctx, ctl, slots, lose) })
	wg.Go(func() { l.keeper.Run(lctx) })
	wg.Go(func() { r.limit.Raise(lctx, ctl, r.cfg.Gap.Checkpoints, r.cfg.Slot, r.d.Logger) })
	err = r.lead(lctx, l)
	lose(nil)
	wg.Wait()
	r.prog.Reset()
	r.m.OldestAge.Set(0)
	cause := context.Cause(lctx)
	if ctx.Err() == nil && errors.Is(cause, errUnhealthy) {
		r.holdOff = time.Now().Add(r.cfg.UnhealthyAfter)
		r.d.Logger.Error("leadership released: this reader cannot publish; a standby may take over", "err", cause, "hold_off", r.cfg.UnhealthyAfter)
		return fmt.Errorf("leadership released: %w", cause)
	}
	if ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("leadership lost: %w", cause)
	}
	return err
}

// standBy waits until this process holds the leadership lock (or ctx ends).
func (r *relay) standBy(ctx context.Context, ctl, slots *control.Conn) error {
	for waiting := false; ; waiting = true {
		if wait := time.Until(r.holdOff); wait > 0 {
			r.d.Health.report(fmt.Errorf("%w: holding off for %s before competing for the slot again", errUnhealthy, wait.Round(time.Second)))
		} else {
			ok, err := tryLock(ctx, ctl, r.cfg.Slot)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			r.d.Health.report(nil)
		}
		if !waiting {
			r.d.Logger.Info("another reader holds the slot, or this one holds off; waiting as standby", "standby_retry", r.cfg.StandbyRetry)
		}
		r.m.Active.Set(0)
		r.m.OldestAge.Set(0)
		r.m.Inflight.Set(0)
		if err := r.updateSlotStats(ctx, slots); err != nil {
			if slots == ctl {
				return err
			}
			r.d.Logger.Warn("reading the slot on the replication server failed", "err", err)
		}
		if !backoff.Sleep(ctx, backoff.Jitter(r.cfg.StandbyRetry)) {
			return nil
		}
	}
}

// leadership is one leadership's stages, all on its control connection but
// for the slot's own statements, which the guard and the stream run on the
// slot's server (the control connection, or the standby the relay decodes
// on).
type leadership struct {
	ctl    *control.Conn
	guard  *gap.Guard
	keeper *retention.Keeper
	stream stream.Deps
}

func (r *relay) newLeadership(ctl, slots *control.Conn) *leadership {
	dead := &deadletter.Recorder{
		Writer:  deadletter.TableWriter{Control: ctl, Table: r.cfg.DeadLetters, Slot: r.cfg.Slot},
		Router:  r.d.Router,
		Driver:  r.d.Driver,
		Counter: r.m.DeadLettered,
		Logger:  r.d.Logger,
	}
	return &leadership{
		ctl: ctl,
		guard: gap.NewGuard(r.cfg.Gap, gap.Deps{Control: ctl, Slots: slots, Driver: r.d.Driver, Router: r.d.Router, DeadLetters: dead,
			Limit: r.limit, Metrics: r.m, Progress: r.prog, Logger: r.d.Logger}),
		keeper: retention.NewKeeper(r.cfg.Retention, ctl, r.prog, r.d.Logger),
		stream: stream.Deps{Control: ctl, Slots: slots, Driver: r.d.Driver, Router: r.d.Router, DeadLetters: dead, Suspects: r.suspects,
			Limit: r.limit, Metrics: r.m, Progress: r.prog, Heartbeats: r.hb, Nonce: r.nonce, Logger: r.d.Logger},
	}
}

// lead runs replication sessions until ctx ends (shutdown or lost
// leadership) or a session fails permanently.
func (r *relay) lead(ctx context.Context, l *leadership) error {
	bo := backoff.Backoff{Max: r.cfg.MaxBackoff}
	for {
		started := time.Now()
		err := r.session(ctx, l)
		if ctx.Err() != nil {
			return nil
		}
		if control.IsPermanent(err) {
			return err
		}
		var wait time.Duration
		if errors.Is(err, slot.ErrBusy) || control.IsCode(err, "55006") {
			// The previous holder's walsender has not exited yet.
			wait = backoff.Jitter(r.cfg.StandbyRetry) / 2
			r.d.Logger.Info("slot still held by another process; retrying", "err", err, "backoff", wait)
		} else {
			wait = bo.Next(time.Since(started))
			r.d.Logger.Warn("cdc session ended; reconnecting", "err", err, "backoff", wait)
		}
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// session checks the standbys and the slot, recovers a gap, and streams.
func (r *relay) session(ctx context.Context, l *leadership) error {
	if err := standby.CheckWait(ctx, l.ctl, r.cfg.StandbySlots, r.d.Logger); err != nil {
		return err
	}
	st, generation, err := l.guard.Prepare(ctx)
	if err != nil {
		return err
	}
	return stream.Run(ctx, r.cfg.Stream, l.stream, st, generation)
}
