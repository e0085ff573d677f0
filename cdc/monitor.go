package cdc

import (
	"context"
	"time"
)

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
