package progress

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
)

// HeartbeatPrefix is the prefix of the relay's pg_logical_emit_message
// heartbeats.
const HeartbeatPrefix = "eventforge.cdc.heartbeat"

// maxOutstandingHeartbeats bounds the heartbeats remembered while none comes
// back (e.g. while the session is down).
const maxOutstandingHeartbeats = 1024

// Heartbeats measures the round trip of heartbeat messages through the WAL.
// The zero value is ready; it is safe for concurrent use.
type Heartbeats struct {
	mu          sync.Mutex
	outstanding []time.Time // send times not yet seen, oldest first
	rtt         time.Duration
	measured    bool
}

// Sent records a heartbeat sent at t.
func (h *Heartbeats) Sent(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.outstanding) < maxOutstandingHeartbeats {
		h.outstanding = append(h.outstanding, t)
	}
}

// Received records that the heartbeat sent at sentAt arrived at now; every
// heartbeat sent before it arrived too (the WAL is ordered).
func (h *Heartbeats) Received(sentAt, now time.Time) {
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

// Lag returns the replication lag at now: the newest round trip, or the age
// of the oldest outstanding heartbeat when that is longer. ok is false before
// anything can be said.
func (h *Heartbeats) Lag(now time.Time) (time.Duration, bool) {
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

// EmitHeartbeat writes a non-transactional logical decoding message carrying
// nonce and the send time at; the stream measures its round trip when the
// slot delivers it (ParseHeartbeat).
func EmitHeartbeat(ctx context.Context, ctl *control.Conn, nonce string, at time.Time) error {
	payload := nonce + "/" + strconv.FormatInt(at.UnixNano(), 10)
	err := ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1::text, $2::text)`, HeartbeatPrefix, payload)
		return err
	})
	if err != nil {
		return fmt.Errorf("emitting heartbeat: %w", err)
	}
	return nil
}

// ParseHeartbeat splits a heartbeat payload into its nonce and send time.
func ParseHeartbeat(content []byte) (nonce string, sentAt time.Time, ok bool) {
	n, ts, found := strings.Cut(string(content), "/")
	if !found {
		return "", time.Time{}, false
	}
	ns, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return n, time.Unix(0, ns), true
}
