// Package progress is what the relay knows about its own progress, across
// replication sessions and leaderships: the running session's checkpoint
// tracker, the transactions an ended session left unconfirmed, the position
// this process last confirmed to its slot, a gap recovery under way, and the
// round trip of heartbeat messages through the WAL. The metrics, the
// leader's health and the outbox retention read it; the stream and gap
// recovery write it.
package progress

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/checkpoint"
)

// Progress carries what the metrics, the leader's health and the retention
// need across sessions: the tracker of the running session, the commit time
// of the oldest transaction an ended session left unconfirmed, the commit
// time of the newest confirmed transaction, and the position this process
// last confirmed. The zero value is ready; it is safe for concurrent use.
type Progress struct {
	mu        sync.Mutex
	tracker   *checkpoint.Tracker
	carry     time.Time // oldest commit left unconfirmed by an ended session
	confirmed time.Time // newest confirmed commit, over the process's life
	// recovering is set while a gap recovery republishes: the leader is
	// publishing although no session streams.
	recovering bool
	// creatingSince is when the recovery began to create its slot (zero
	// when it does not), and blockers what it waits for, as last read.
	creatingSince time.Time
	blockers      string
	// sent is the position this process last confirmed to its slot.
	sent atomic.Uint64
}

// SetSent records that lsn was confirmed to the slot (a status update sent).
func (p *Progress) SetSent(lsn pglogrepl.LSN) { p.sent.Store(uint64(lsn)) }

// Sent is the position this process last confirmed to its slot in this
// leadership; 0 before the first status update. Only positions this
// process confirmed prove what it published (the retention's rule).
func (p *Progress) Sent() pglogrepl.LSN { return pglogrepl.LSN(p.sent.Load()) }

// SetCreating marks the recovery's slot creation begun (at) or ended (zero).
func (p *Progress) SetCreating(at time.Time) {
	p.mu.Lock()
	p.creatingSince, p.blockers = at, ""
	p.mu.Unlock()
}

// SetBlockers records what the slot creation waits for.
func (p *Progress) SetBlockers(b string) {
	p.mu.Lock()
	p.blockers = b
	p.mu.Unlock()
}

// Creating returns how long the recovery's slot creation has waited at
// now, and what for.
func (p *Progress) Creating(now time.Time) (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.creatingSince.IsZero() {
		return 0, ""
	}
	return now.Sub(p.creatingSince), p.blockers
}

// SetRecovering marks a gap recovery running or ended.
func (p *Progress) SetRecovering(on bool) {
	p.mu.Lock()
	p.recovering = on
	p.mu.Unlock()
}

// Attach makes t the running session's tracker.
func (p *Progress) Attach(t *checkpoint.Tracker) {
	p.mu.Lock()
	p.tracker = t
	p.mu.Unlock()
}

// Detach records what the ended session's tracker left behind.
func (p *Progress) Detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tracker == nil {
		return
	}
	p.fold()
	if o := p.tracker.OldestPending(); !o.IsZero() && (p.carry.IsZero() || o.Before(p.carry)) {
		p.carry = o
	}
	p.tracker = nil
}

// Reset forgets everything: what another leader published meanwhile is
// unknown to this process.
func (p *Progress) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracker, p.carry, p.confirmed = nil, time.Time{}, time.Time{}
	p.sent.Store(0)
}

// fold takes the running tracker's confirmed commit time. p.mu must be held.
func (p *Progress) fold() {
	if p.tracker == nil {
		return
	}
	if ct := p.tracker.ConfirmedCommitTime(); ct.After(p.confirmed) {
		p.confirmed = ct
	}
	if !p.carry.IsZero() && !p.confirmed.Before(p.carry) {
		p.carry = time.Time{}
	}
}

// Publishing reports whether a session streams and its producer is not
// stalled: events waited for an acknowledgement for stall or longer.
func (p *Progress) Publishing(now time.Time, stall time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker != nil && !p.tracker.Stalled(now, stall)
}

// State reports whether a session streams, and whether its producer is
// stalled: events waited for an acknowledgement for stall or longer.
func (p *Progress) State(now time.Time, stall time.Duration) (attached, stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker != nil || p.recovering, p.tracker != nil && p.tracker.Stalled(now, stall)
}

// Snapshot returns the commit time of the oldest transaction known to be
// unconfirmed (zero if none) and of the newest confirmed one (zero if none
// yet).
func (p *Progress) Snapshot() (oldest, confirmed time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fold()
	oldest = p.carry
	if p.tracker != nil {
		if o := p.tracker.OldestPending(); !o.IsZero() && (oldest.IsZero() || o.Before(oldest)) {
			oldest = o
		}
	}
	return oldest, p.confirmed
}
