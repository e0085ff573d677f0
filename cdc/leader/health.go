package leader

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eventforge/eventforge/cdc/progress"
)

// Health-aware leadership.
//
// A leader that holds the lock but cannot publish would keep every standby
// waiting. So the leader watches itself every status interval: it is
// unhealthy when events have waited UnhealthyAfter for Kafka's
// acknowledgement with none acknowledged meanwhile, or when no session has
// streamed for UnhealthyAfter (sessions keep failing). An unhealthy leader
// reports eventforge_cdc_active 0, ends its session (flush for at most
// FlushTimeout, purge, confirm what was acknowledged), closes its control
// connection — which frees the lock for a standby — and then stays a
// standby itself for UnhealthyAfter before it competes for the lock again.
//
// A statement on the control connection that fails while the connection
// stays open (a statistics query refused, say) leaves the lock held: it is
// logged, not taken for lost leadership. Only a connection that closed (a
// timeout, a network failure, the server gone) ends the leadership.

// errUnhealthy is the cause of a leadership released because the leader
// could not publish.
var errUnhealthy = errors.New("this reader cannot publish")

// Health is what /readyz of `eventforge cdc` reports: ready while the
// process leads and publishes, or stands by with a working control
// connection; not ready while it starts, has no control connection, leads
// without being able to publish, or holds off after giving up the lead. The
// zero value reports not ready. It is safe for concurrent use.
type Health struct {
	mu  sync.Mutex
	err error
	set bool
}

// Ready returns nil when the reader is ready, else why not.
func (h *Health) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.set {
		return errors.New("starting")
	}
	return h.err
}

func (h *Health) report(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.err, h.set = err, true
	h.mu.Unlock()
}

// leaderHealth tracks one leadership's ability to publish.
type leaderHealth struct {
	after     time.Duration
	streaming time.Time // last time a session was seen streaming (or when the leadership began)
}

// check returns nil while the leader can publish, else why not. prog holds
// the running session's tracker, if any.
func (l *leaderHealth) check(now time.Time, prog *progress.Progress) error {
	attached, stalled := prog.State(now, l.after)
	waited, blockers := prog.Creating(now)
	switch {
	case waited >= l.after:
		if blockers == "" {
			blockers = "none found yet"
		}
		return fmt.Errorf("%w: creating the replication slot has waited %s for transactions that hold a transaction ID to end (%s)",
			errUnhealthy, waited.Round(time.Second), blockers)
	case stalled:
		return fmt.Errorf("%w: events waited %s for Kafka's acknowledgement and none was acknowledged", errUnhealthy, l.after)
	case attached:
		l.streaming = now
		return nil
	case now.Sub(l.streaming) >= l.after:
		return fmt.Errorf("%w: no replication session has streamed for %s", errUnhealthy, l.after)
	}
	return nil
}
