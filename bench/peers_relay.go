package bench

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/bench/polling"
)

// peerDB is a database of the peers phase: the schema migrated, readied by
// the Prepare of each relay that uses it, a backlog committed into it.
type peerDB struct {
	name string // database name, unique to the run
	dsn  string
	pool *pgxpool.Pool
	// kafka is the Kafka bootstrap address.
	kafka string
}

// peerRun is one run of a relay: a drain or a latency window. Each run has
// a slot (for a relay that streams from one) and a topic of its own, both
// named after the run, so no run sees another's records or resumes from
// another's position.
type peerRun struct {
	name  string // unique to the run: <database>_<relay key>_<run>
	slot  string // the run's slot (its name); empty for the polling relay
	topic string // <name>.order, as Debezium's router names it
}

// newPeerRun names run (e.g. "d1", "l500r2") of the relay in db.
func newPeerRun(db *peerDB, t peerTraits, run string) peerRun {
	name := db.name + "_" + t.Key + "_" + run
	pr := peerRun{name: name, topic: name + ".order"}
	if t.Slot {
		pr.slot = name
	}
	return pr
}

// peerTraits is what the peers phase must know of a relay to run it.
type peerTraits struct {
	// Name labels the relay in the table, the chart and --peer-relays.
	Name string
	// Key names its slots, topics and logs (lowercase, short).
	Key string
	// Home names the database it drains: relays that read the same
	// database in the same way share one (EventForge's reader in both
	// modes), each run on a slot of its own.
	Home string
	// Slot is true for a relay that streams from a logical replication
	// slot: each run gets a copy of the slot made before the backlog (a
	// drain) or a new one (a latency window).
	Slot bool
	// Transactional is true for a relay whose records a read_committed
	// reader sees only at their Kafka transaction's commit: its drain ends
	// when such a reader has read every event, not when the end offsets
	// (which count uncommitted records and transaction markers) reach the
	// backlog.
	Transactional bool
}

// peerRelay is one outbox relay the peers phase measures: EventForge's
// reader in either delivery mode, the polling relay, Debezium. Each reads a
// database of its own kind on the same PostgreSQL and publishes to a topic
// of its own per run on the same Kafka; the phase times it, samples its
// process and stops it.
type peerRelay interface {
	Traits() peerTraits
	// Prepare readies its home database once, before any event is
	// committed into it (a publication, a column).
	Prepare(ctx context.Context, db *peerDB) error
	// Start starts the relay as a process for run, its output in logDir.
	Start(ctx context.Context, db *peerDB, run peerRun, logDir string) (*child, error)
}

// The relays' names, as the table's columns and --peer-relays name them.
const (
	eventforgeName   = "EventForge"
	exactlyOnceName  = "EventForge-exactly-once"
	pollingName      = "polling"
	debeziumName     = "Debezium"
	homeEventForge   = "cdc"
	homeDebezium     = "dbz"
	homePollingRelay = "poll"
)

// eventforgePeer is EventForge's CDC reader (eventforge cdc), at least once
// or, with positionTopic set, exactly once (--exactly-once).
type eventforgePeer struct {
	binary string
	// positionTopic is the exactly-once relay's compacted position topic,
	// one per benchmark run; empty for the default mode.
	positionTopic string
}

func (p eventforgePeer) Traits() peerTraits {
	if p.positionTopic != "" {
		return peerTraits{Name: exactlyOnceName, Key: "efx", Home: homeEventForge, Slot: true, Transactional: true}
	}
	return peerTraits{Name: eventforgeName, Key: "ef", Home: homeEventForge, Slot: true}
}

// Prepare does nothing: the schema has the reader's publication, and each
// run's slot is made by the phase.
func (eventforgePeer) Prepare(context.Context, *peerDB) error { return nil }

func (p eventforgePeer) Start(_ context.Context, db *peerDB, run peerRun, logDir string) (*child, error) {
	// The stack has no standby of its own; a test elsewhere on the machine
	// may attach one to its PostgreSQL for a while, which the reader would
	// otherwise refuse to publish beside. Debezium and the polling relay
	// never wait for standbys either.
	args := []string{"cdc", "--database-url", db.dsn, "--kafka-brokers", db.kafka,
		"--slot", run.slot, "--topic", "order=" + run.topic, "--log-level", "warn",
		"--synchronized-standby-slots", "none"}
	if p.positionTopic != "" {
		args = append(args, "--exactly-once", "--position-topic", p.positionTopic)
	}
	return startChild(p.binary, logDir, "peer-"+run.name, false, args...)
}

// pollingPeer is the polling relay (bench/polling), run as
// `eventforge-bench polling-relay` with its default settings.
type pollingPeer struct{ self string }

func (pollingPeer) Traits() peerTraits {
	return peerTraits{Name: pollingName, Key: "poll", Home: homePollingRelay}
}

func (pollingPeer) Prepare(ctx context.Context, db *peerDB) error {
	return polling.Prepare(ctx, db.pool, polling.DefaultConfig().Workers)
}

func (p pollingPeer) Start(_ context.Context, db *peerDB, run peerRun, logDir string) (*child, error) {
	return startChild(p.self, logDir, "peer-"+run.name, false, polling.Command, "--database-url", db.dsn,
		"--kafka-brokers", db.kafka, "--topic", run.topic, "--log-level", "warn")
}

// peerRelays returns the relays the peers phase measures, in the order of
// each round. A relay that cannot be set up (Debezium's jars not
// resolvable) is left out with the reason in unavailable, so the table says
// why its column is empty and the run's check fails.
func (r *runner) peerRelays(ctx context.Context) (relays []peerRelay, unavailable map[string]string, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("locating own binary: %w", err)
	}
	want := func(name string) bool { return len(r.cfg.PeerRelays) == 0 || slices.Contains(r.cfg.PeerRelays, name) }
	for _, relay := range []peerRelay{
		eventforgePeer{binary: r.binary},
		eventforgePeer{binary: r.binary, positionTopic: r.env.database + ".positions"},
		pollingPeer{self: self},
	} {
		if want(relay.Traits().Name) {
			relays = append(relays, relay)
		}
	}
	if !want(debeziumName) {
		return relays, nil, nil
	}
	dbz, err := newDebeziumPeer(ctx, r.cfg.StateDir, r.logger)
	if err != nil {
		r.logger.Warn("debezium peer unavailable", "err", err)
		return relays, map[string]string{debeziumName: err.Error()}, nil
	}
	return append(relays, dbz), nil, nil
}
