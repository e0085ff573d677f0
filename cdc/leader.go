package cdc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

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

// deadPeerParams make the server probe the reader's connections with TCP
// keepalives, so that a reader lost with its host or network releases the
// leadership lock and the slot in about 25 s instead of the kernel default
// of over two hours.
var deadPeerParams = map[string]string{
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
}
