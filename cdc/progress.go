package cdc

import (
	"sync"
	"time"

	"github.com/eventforge/eventforge/cdc/checkpoint"
)

// progress carries what the metrics need across sessions: the tracker of the
// running session, the commit time of the oldest transaction an ended session
// left unconfirmed, and the commit time of the newest confirmed transaction.
type progress struct {
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
}

// setCreating marks the recovery's slot creation begun (at) or ended (zero).
func (p *progress) setCreating(at time.Time) {
	p.mu.Lock()
	p.creatingSince, p.blockers = at, ""
	p.mu.Unlock()
}

// setBlockers records what the slot creation waits for.
func (p *progress) setBlockers(b string) {
	p.mu.Lock()
	p.blockers = b
	p.mu.Unlock()
}

// creating returns how long the recovery's slot creation has waited at
// now, and what for.
func (p *progress) creating(now time.Time) (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.creatingSince.IsZero() {
		return 0, ""
	}
	return now.Sub(p.creatingSince), p.blockers
}

// setRecovering marks a gap recovery running or ended.
func (p *progress) setRecovering(on bool) {
	p.mu.Lock()
	p.recovering = on
	p.mu.Unlock()
}

// attach makes t the running session's tracker.
func (p *progress) attach(t *checkpoint.Tracker) {
	p.mu.Lock()
	p.tracker = t
	p.mu.Unlock()
}

// detach records what the ended session's tracker left behind.
func (p *progress) detach() {
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

// reset forgets everything: what another leader published meanwhile is
// unknown to this process.
func (p *progress) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracker, p.carry, p.confirmed = nil, time.Time{}, time.Time{}
}

// fold takes the running tracker's confirmed commit time. p.mu must be held.
func (p *progress) fold() {
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

// publishing reports whether a session streams and its producer is not
// stalled: events waited for an acknowledgement for stall or longer.
func (p *progress) publishing(now time.Time, stall time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker != nil && !p.tracker.Stalled(now, stall)
}

// state reports whether a session streams, and whether its producer is
// stalled: events waited for an acknowledgement for stall or longer.
func (p *progress) state(now time.Time, stall time.Duration) (attached, stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker != nil || p.recovering, p.tracker != nil && p.tracker.Stalled(now, stall)
}

// snapshot returns the commit time of the oldest transaction known to be
// unconfirmed (zero if none) and of the newest confirmed one (zero if none
// yet).
func (p *progress) snapshot() (oldest, confirmed time.Time) {
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

// maxOutstandingHeartbeats bounds the heartbeats remembered while none comes
// back (e.g. while the session is down).
const maxOutstandingHeartbeats = 1024

// heartbeats measures the round trip of heartbeat messages through the WAL.
type heartbeats struct {
	mu          sync.Mutex
	outstanding []time.Time // send times not yet seen, oldest first
	rtt         time.Duration
	measured    bool
}

// sent records a heartbeat sent at t.
func (h *heartbeats) sent(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.outstanding) < maxOutstandingHeartbeats {
		h.outstanding = append(h.outstanding, t)
	}
}

// received records that the heartbeat sent at sentAt arrived at now; every
// heartbeat sent before it arrived too (the WAL is ordered).
func (h *heartbeats) received(sentAt, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	for i < len(h.outstanding) && !h.outstanding[i].After(sentAt) {
		i++
	}
	h.outstanding = append(h.outstanding[:0], h.outstanding[i:]...)
	h.rtt = max(now.Sub(sentAt), 0)
	h.measured = true
}

// lag returns the replication lag at now: the newest round trip, or the age
// of the oldest outstanding heartbeat when that is longer. ok is false before
// anything can be said.
func (h *heartbeats) lag(now time.Time) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lag, ok := h.rtt, h.measured
	if len(h.outstanding) > 0 {
		if age := now.Sub(h.outstanding[0]); age > lag {
			lag, ok = age, true
		}
	}
	return lag, ok
}
