package leader

import (
	"context"
	"time"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/progress"
)

// monitor runs beside the sessions while this process leads: heartbeats,
// slot statistics, the oldest-unpublished age and the leader's health. A
// statement that fails on a control connection that closed means the
// leadership lock is gone: it cancels the leadership. One that fails on a
// connection still open (the lock still held) is logged and the next tick
// tries again. A leader that cannot publish gives up the leadership
// (health.go).
func (r *relay) monitor(ctx context.Context, ctl, slots *control.Conn, lose context.CancelCauseFunc) {
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
		if ctl.Closed() {
			lose(err)
			return true
		}
		r.d.Logger.Warn("control statement failed; the connection and the leadership lock are intact", "err", err)
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
				r.d.Health.report(err)
				r.m.Active.Set(0)
				lose(err)
				return
			}
			r.d.Health.report(nil)
			if failed(r.updateSlotStats(ctx, slots)) || failed(r.updateAge(ctx, ctl)) {
				return
			}
			if lag, ok := r.hb.Lag(time.Now()); ok {
				r.m.ReplicationLag.Set(lag.Seconds())
			}
		case <-beat.C:
			if failed(r.heartbeat(ctx, ctl)) {
				return
			}
		}
	}
}

func (r *relay) heartbeat(ctx context.Context, ctl *control.Conn) error {
	now := time.Now()
	if err := progress.EmitHeartbeat(ctx, ctl, r.nonce, now); err != nil {
		return err
	}
	r.hb.Sent(now)
	return nil
}

func (r *relay) updateSlotStats(ctx context.Context, ctl *control.Conn) error {
	lag, retained, err := slotStats(ctx, ctl, r.cfg.Slot)
	if err != nil {
		return err
	}
	r.m.SlotLag.Set(float64(lag))
	r.m.RetainedWAL.Set(float64(retained))
	return nil
}

// updateAge sets the oldest-unpublished age: from the oldest unconfirmed
// transaction the reader holds or left behind, else from the outbox rows
// created after the newest confirmed commit.
func (r *relay) updateAge(ctx context.Context, ctl *control.Conn) error {
	oldest, confirmed := r.prog.Snapshot()
	switch {
	case !oldest.IsZero():
		r.m.OldestAge.Set(max(time.Since(oldest).Seconds(), 0))
	case confirmed.IsZero():
		r.m.OldestAge.Set(0)
	default:
		age, err := oldestCreatedAfter(ctx, ctl, r.cfg.Outbox, confirmed)
		if err != nil {
			return err
		}
		r.m.OldestAge.Set(age)
	}
	return nil
}
