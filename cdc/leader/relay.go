package leader

import (
	"log/slog"
	"time"

	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/metrics"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/cdc/retention"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/cdc/stream"
)

// Config is the relay's configuration as the leadership and its stages
// take it.
type Config struct {
	// DatabaseURL reaches the primary: the leadership lock, heartbeats,
	// checkpoints and outbox statements run there.
	DatabaseURL string
	// ReplicationURL, when set, reaches a standby (PostgreSQL 16+) that
	// holds the slot and is decoded from (replication.go); empty, the slot
	// is on DatabaseURL's server.
	ReplicationURL string
	Slot           string
	Publication    string
	Outbox         outbox.Table
	DeadLetters    outbox.Table
	// StatusInterval is how often the leader reads the slot's statistics
	// and checks its own health.
	StatusInterval time.Duration
	// HeartbeatInterval is how often a heartbeat is written to the WAL.
	HeartbeatInterval time.Duration
	// StandbyRetry is how often a standby tries to take over.
	StandbyRetry time.Duration
	// UnhealthyAfter is how long a leader may be unable to publish before
	// it gives up the leadership, and holds off as long.
	UnhealthyAfter time.Duration
	// MaxBackoff caps the wait between reconnection attempts.
	MaxBackoff time.Duration
	// StandbySlots are the standbys the relay waits for (package standby).
	StandbySlots standby.Slots
	Stream       stream.Config
	Gap          gap.Config
	Retention    retention.Config
}

// Deps are what the relay publishes through and reports to.
type Deps struct {
	Driver sink.Driver
	Router sink.Router
	// Health receives the relay's readiness; nil reports nowhere.
	Health *Health
	Logger *slog.Logger
}

// relay is one process's state across control connections and sessions.
type relay struct {
	cfg      Config
	d        Deps
	m        *metrics.Slot
	prog     *progress.Progress
	hb       *progress.Heartbeats
	nonce    string // tells this process's heartbeats from others'
	limit    *gap.Limit
	suspects *deadletter.Suspects
	// holdOff is when a leader that gave up the lead because it could not
	// publish may compete for it again (health.go).
	holdOff time.Time
}
