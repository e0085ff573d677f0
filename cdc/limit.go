package cdc

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

// confirmLimit is the position the reader may confirm to its slot up to: the
// checkpoint's confirm_limit (gap.go). A session never confirms past it; when
// Kafka acknowledged WAL beyond it, the session asks for a raise to the
// position it received (which the acknowledged WAL never passes) and
// confirms the rest once the raised limit is stored, so the stored limit is
// always at or past the slot's confirmed position.
//
// The limit is raised to positions the slot streamed to this process, never
// to the server's current position: a slot recreated while the reader did
// not look starts past everything the old slot streamed, so it stays past the
// limit and is found out.
type confirmLimit struct {
	lsn    atomic.Uint64
	wanted atomic.Uint64
	want   chan struct{}
}

func newConfirmLimit() *confirmLimit {
	return &confirmLimit{want: make(chan struct{}, 1)}
}

// clamp returns the part of confirmable that may be confirmed now, and asks
// for a raise to received when that is not all of it.
func (l *confirmLimit) clamp(confirmable, received pglogrepl.LSN) pglogrepl.LSN {
	limit := pglogrepl.LSN(l.lsn.Load())
	if confirmable <= limit {
		return confirmable
	}
	maxStore(&l.wanted, uint64(max(confirmable, received)))
	select {
	case l.want <- struct{}{}:
	default:
	}
	return limit
}

// set stores a limit read from the checkpoint (never lowering it).
func (l *confirmLimit) set(lsn pglogrepl.LSN) { maxStore(&l.lsn, uint64(lsn)) }

// maxStore raises v to n unless it is already at or past it.
func maxStore(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// reset forgets the limit: a new leadership reads it from the checkpoint.
func (l *confirmLimit) reset() {
	l.lsn.Store(0)
	l.wanted.Store(0)
}

// raise runs while this process leads: it raises the stored limit whenever a
// session asks for it. A failed raise is retried at the next request; the
// session meanwhile confirms only up to the old limit, which is safe.
func (r *reader) raise(ctx context.Context, ctl *control) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.limit.want:
		}
		lsn, err := raiseConfirmLimit(ctx, ctl, r.checkpoints, r.cfg.Slot, pglogrepl.LSN(r.limit.wanted.Load()))
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("raising the confirm limit", "err", err)
			}
			continue
		}
		r.limit.set(lsn)
	}
}
