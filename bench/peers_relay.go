package bench

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/bench/polling"
	"github.com/eventforge/eventforge/schema"
)

// peerDB is one relay's database in the peers phase: the schema migrated,
// the relay's topic created, the backlog committed into its outbox.
type peerDB struct {
	name string // database name, unique to the run and the relay
	dsn  string
	pool *pgxpool.Pool
	// kafka is the Kafka bootstrap address.
	kafka string
}

// peerRelay is one outbox relay the peers phase measures: EventForge's
// reader, the polling relay, Debezium. Each gets a database of its own on the
// same PostgreSQL, with the same schema and the same backlog, and a topic of
// its own on the same Kafka; the phase times it, samples its process and
// stops it.
type peerRelay interface {
	// Name labels the relay in the table and the chart.
	Name() string
	// Prepare readies db before any event is committed into it (a slot, a
	// column) and returns the topic the relay publishes to, which the phase
	// creates.
	Prepare(ctx context.Context, db *peerDB) (topic string, err error)
	// Start starts the relay as a process, its output in logDir.
	Start(ctx context.Context, db *peerDB, topic, logDir string) (*child, error)
}

// eventforgePeer is EventForge's CDC reader (eventforge cdc).
type eventforgePeer struct{ binary string }

func (eventforgePeer) Name() string { return "EventForge" }

func (p eventforgePeer) Prepare(ctx context.Context, db *peerDB) (string, error) {
	if _, err := schema.EnsureSlot(ctx, db.pool, db.name); err != nil {
		return "", err
	}
	return db.name + ".orders", nil
}

func (p eventforgePeer) Start(_ context.Context, db *peerDB, topic, logDir string) (*child, error) {
	return startChild(p.binary, logDir, "peer-eventforge", false, "cdc", "--database-url", db.dsn, "--kafka-brokers", db.kafka,
		"--slot", db.name, "--topic", "order="+topic, "--log-level", "warn")
}

// slot is the slot the reader streams from, copied for pg_recvlogical.
func (eventforgePeer) slot(db *peerDB) string { return db.name }

// pollingPeer is the polling relay (bench/polling), run as
// `eventforge-bench polling-relay` with its default settings.
type pollingPeer struct{ self string }

func (pollingPeer) Name() string { return "polling" }

func (pollingPeer) Prepare(ctx context.Context, db *peerDB) (string, error) {
	if err := polling.Prepare(ctx, db.pool, polling.DefaultConfig().Workers); err != nil {
		return "", err
	}
	return db.name + ".orders", nil
}

func (p pollingPeer) Start(_ context.Context, db *peerDB, topic, logDir string) (*child, error) {
	return startChild(p.self, logDir, "peer-polling", false, polling.Command, "--database-url", db.dsn,
		"--kafka-brokers", db.kafka, "--topic", topic, "--log-level", "warn")
}

// peerCleaner is a peerRelay that removes what its Prepare made once its
// process stopped (the phase then drops the database and its slots).
type peerCleaner interface {
	Cleanup(ctx context.Context, db *peerDB) error
}

// peerRelays returns the relays the peers phase measures, EventForge's
// reader first: the pg_recvlogical reference drains a copy of its slot. A
// relay that cannot be set up (Debezium's jars not resolvable) is left out
// with the reason in unavailable, so the table says why its column is
// empty and the run's check fails.
func (r *runner) peerRelays(ctx context.Context) (relays []peerRelay, unavailable map[string]string, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("locating own binary: %w", err)
	}
	want := func(name string) bool { return len(r.cfg.PeerRelays) == 0 || slices.Contains(r.cfg.PeerRelays, name) }
	for _, relay := range []peerRelay{eventforgePeer{binary: r.binary}, pollingPeer{self: self}} {
		if want(relay.Name()) {
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
