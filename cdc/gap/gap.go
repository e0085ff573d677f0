// Package gap finds and closes the gaps a lost replication slot leaves.
//
// A logical slot lives on one server. It is lost when it is dropped, when
// max_slot_wal_keep_size invalidates it, and when a standby without it is
// promoted (PostgreSQL 16 and older never copy logical slots to a standby;
// 17 does for a failover slot that was synchronised in time). A slot created
// afresh streams only what commits after its creation: rows committed in
// between would never be published. The relay never lets that pass
// silently. Before every session it checks its slot against its checkpoint
// (table --checkpoint-table, one row per slot; Checkpoint):
//
//   - confirm_limit: the relay raises this limit, durably, before it
//     confirms a position past it (Limit). Only the relay advances its
//     slot, so a slot confirmed past the limit was not advanced by it: the
//     slot was recreated, or the server is not the one the relay confirmed
//     on.
//   - published_below: a 64-bit transaction ID below which every outbox row
//     was acknowledged by the sink (package retention takes it from the
//     marks it prunes by, and says why a mark proves it).
//
// A slot that is missing, invalidated, or confirmed past the limit is a gap
// (Reason). The relay then recovers (Guard.Prepare, recover.go): it drops
// what is left of the slot, creates it again exporting a snapshot,
// republishes every outbox row of that snapshot inserted by a transaction at
// or above published_below, with its original event ID (republish.go),
// waits for the sink to acknowledge them, records the recovery, and only
// then streams from the new slot, whose first change is the first commit
// the snapshot did not see. Duplicates are possible, loss is not.
// docs/cdc.md, "A lost slot and failover", has the argument and the limits.
package gap

import (
	"log/slog"
	"time"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/metrics"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/cdc/sink"
)

// Config is what gap recovery needs of the relay's configuration.
type Config struct {
	// DatabaseURL reaches the database on the server that holds the slot
	// (the primary, or the standby the relay decodes on): the recovery
	// opens a replication connection there to create the slot and a
	// connection that reads its snapshot — an exported snapshot can be
	// imported only on the server that exported it.
	DatabaseURL string
	Slot        string
	Outbox      outbox.Table
	DeadLetters outbox.Table
	Checkpoints outbox.Table
	// NoCreateSlot forbids creating the slot: a gap waits for a relay
	// that may.
	NoCreateSlot bool
	// LogEvery is how often a recovery waiting to create its slot logs what
	// it waits for.
	LogEvery time.Duration
	// Stall is how long the recovery waits for a delivery report before it
	// gives up and starts over.
	Stall time.Duration
	// MaxInflight bounds the records of a recovery awaiting acknowledgement.
	MaxInflight int
}

// Guard checks the slot against its checkpoint before each session of one
// leadership, and recovers a gap.
type Guard struct {
	cfg    Config
	ctl    *control.Conn
	slots  *control.Conn
	driver sink.Driver
	router sink.Router
	dead   *deadletter.Recorder
	limit  *Limit
	m      *metrics.Slot
	prog   *progress.Progress
	logger *slog.Logger
}

// Deps are what a Guard works with, shared with the rest of the relay.
type Deps struct {
	Control *control.Conn
	// Slots reaches the server that holds the slot: Control itself, or the
	// standby the relay decodes on. The slot is read, dropped and adopted
	// there; the checkpoint stays on Control.
	Slots       *control.Conn
	Driver      sink.Driver
	Router      sink.Router
	DeadLetters *deadletter.Recorder
	Limit       *Limit
	Metrics     *metrics.Slot
	Progress    *progress.Progress
	Logger      *slog.Logger
}

// NewGuard returns the guard of one leadership.
func NewGuard(cfg Config, d Deps) *Guard {
	slots := d.Slots
	if slots == nil {
		slots = d.Control
	}
	return &Guard{cfg: cfg, ctl: d.Control, slots: slots, driver: d.Driver, router: d.Router, dead: d.DeadLetters,
		limit: d.Limit, m: d.Metrics, prog: d.Progress, logger: d.Logger}
}
