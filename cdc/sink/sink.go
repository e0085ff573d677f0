// Package sink is the seam between the relay and where its events go. The
// stream, gap recovery and every replay publish through a Sink, opened by a
// Driver; Kafka (package kafkasink) is the one driver EventForge ships, and
// a second one plugs in without a change to the stream or the recovery
// (package sinktest holds the contract suite every driver must pass).
package sink

import (
	"context"
	"time"

	"github.com/eventforge/eventforge/cdc/decode"
)

// DeliveryFunc receives the outcome of one Publish call: err is nil once the
// sink stored the record durably (for Kafka: acknowledged with acks=all). It
// is called from one goroutine at a time.
type DeliveryFunc func(opaque any, err error)

// Sink publishes outbox events. The relay's promise rests on four rules,
// which every implementation keeps:
//
//   - Every record handed over by a Publish that returned nil has its
//     outcome reported exactly once to the DeliveryFunc — unless Fatal fired,
//     after which nothing more is reported or stored.
//   - A record reported stored is durable: the relay confirms its WAL
//     position past it.
//   - Records of one key (the aggregate ID) are stored in the order of the
//     Publish calls, across groups; once a record of a key failed, no later
//     record of that key is stored (each fails too), so a refused event
//     never has a later event of its order stored before it. Records of one
//     key and one group may be in flight together.
//   - Close ends the sink whatever the destination does: it waits up to its
//     timeout, then gives up on what is left and reports each such record as
//     failed (it may still have been stored: a duplicate, never a loss).
type Sink interface {
	// Publish hands ev over for destination dest (a topic) in group (the
	// relay's group is the PostgreSQL transaction) with opaque, the value
	// its outcome is reported with. It returns once the record is queued;
	// an error means it was not, and is permanent for the record when the
	// Driver says so.
	Publish(ctx context.Context, ev *decode.Event, dest string, group, opaque any) error
	// Fatal delivers an error after which the sink stores nothing more: the
	// caller closes it, opens a new one and republishes from its last
	// confirmed position, never skipping.
	Fatal() <-chan error
	// Close flushes for up to timeout, gives up on the rest and returns how
	// many records were left undelivered.
	Close(timeout time.Duration) (left int)
}

// Driver opens sinks of one kind and classifies their errors.
type Driver interface {
	// Open opens a sink; name says what it is for (the relay's stream, a
	// gap recovery, a replay) and names its client where the destination
	// shows one. onDelivery receives every record's outcome.
	Open(name string, onDelivery DeliveryFunc) (Sink, error)
	// Permanent reports whether err, a delivery's or Publish's error, says
	// that the destination will never accept this record as it is (too
	// large, no such destination, not authorised): the relay dead-letters
	// such a record instead of retrying it. Anything else is retried.
	Permanent(err error) bool
	// ErrorCode names err's cause for the dead-letter table, e.g. "10
	// Broker: Message size too large".
	ErrorCode(err error) string
}

// Position is how far a transactional sink's stored records reach in the
// WAL: the end LSN of the last PostgreSQL transaction stored whole and,
// when a transaction was stored in part (one larger than a sink transaction,
// or cut at a record produced alone), its ID and how many of its events
// were stored. Generation names the slot's incarnation (the checkpoint's
// last recovery); a position of another generation says nothing about the
// slot the relay streams now.
type Position struct {
	LSN           uint64 `json:"lsn"`
	Generation    string `json:"generation,omitempty"`
	PartialXID    uint32 `json:"partial_xid,omitempty"`
	PartialEvents int    `json:"partial_events,omitempty"`
}

// Transactional is a Sink that stores records in transactions: nothing
// published is stored until Commit, which stores every record published
// since the previous Commit together with the position they reach — all of
// them or none. Outcomes are reported when the transaction ends: stored on
// commit, failed on abort.
type Transactional interface {
	Sink
	// Commit ends the open transaction, recording pos with its records.
	// An error means nothing of it was stored (each record is reported
	// failed); the caller starts over from the last committed position.
	Commit(ctx context.Context, pos Position) error
}

// TransactionalDriver opens Transactional sinks. Opening one fences every
// earlier sink of the same relay: nothing it still sends becomes visible.
type TransactionalDriver interface {
	Driver
	// Position reads the position the last committed transaction
	// recorded; ok is false when none was recorded.
	Position(ctx context.Context) (pos Position, ok bool, err error)
	// Published returns the event IDs stored for dests at or after since,
	// so that a gap recovery republishes only what is missing.
	Published(ctx context.Context, dests []string, since time.Time) (map[string]bool, error)
}
