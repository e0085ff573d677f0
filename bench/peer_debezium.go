package bench

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/bench/debezium"
	"github.com/eventforge/eventforge/internal/freeport"
	"github.com/eventforge/eventforge/internal/localstack"
)

// debeziumPeer is Debezium as the peers phase runs it (a peerRelay): a
// Kafka Connect standalone worker with the PostgreSQL connector and the
// Outbox Event Router, with a publication of its own in its database
// (dbzPublication) and a slot, a connector name and a topic per run.
type debeziumPeer struct {
	jars   localstack.Jars
	tuning debezium.Tuning
}

// newDebeziumPeer resolves Debezium's pinned jars into the stack's state
// dir (from Maven Central on first use) and finds the java to run them.
func newDebeziumPeer(ctx context.Context, stateDir string, logger *slog.Logger) (*debeziumPeer, error) {
	jars, err := debezium.Resolve(ctx, localstack.Config{StateDir: stateDir}, logger)
	if err != nil {
		return nil, err
	}
	return &debeziumPeer{jars: jars, tuning: debezium.DefaultTuning()}, nil
}

// Traits: Debezium streams from a slot, in a database of its own. With
// pgoutput on PostgreSQL 14 and later it asks for logical decoding messages
// too and publishes each to a topic of its own, so it does not share a
// database with EventForge's reader, whose heartbeats are such messages.
func (*debeziumPeer) Traits() peerTraits {
	return peerTraits{Name: debeziumName, Key: "dbz", Home: homeDebezium, Slot: true}
}

// Version names what runs.
func (*debeziumPeer) Version() string {
	return fmt.Sprintf("Debezium %s on Kafka Connect %s", debezium.DebeziumVersion, debezium.KafkaConnectVersion)
}

// dbzPublication names the connector's publication in db.
func dbzPublication(db *peerDB) string { return db.name + "_dbz" }

// config is the worker of run in db, its files in dir: the connector, its
// topic prefix and slot are named after the run.
func (p *debeziumPeer) config(db *peerDB, run peerRun, dir, restAddr string) debezium.Config {
	return debezium.Config{Name: run.name, DatabaseURL: db.dsn, Bootstrap: db.kafka, Slot: run.slot, Publication: dbzPublication(db),
		RESTAddr: restAddr, Dir: dir, Tuning: p.tuning}
}

// Prepare creates the connector's publication before any event is
// committed: pgoutput looks a publication up as of each change, so one made
// later is not found. The publication is EventForge's: the outbox, inserts
// only.
func (p *debeziumPeer) Prepare(ctx context.Context, db *peerDB) error {
	name := dbzPublication(db)
	if _, err := db.pool.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{name}.Sanitize()+" FOR TABLE outbox WITH (publish = 'insert')"); err != nil {
		return fmt.Errorf("creating publication %s: %w", name, err)
	}
	return nil
}

// Start writes the worker's files into logDir/peer-<run> and starts it, its
// output in logDir/peer-<run>.log.
func (p *debeziumPeer) Start(_ context.Context, db *peerDB, run peerRun, logDir string) (*child, error) {
	rest, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	cfg := p.config(db, run, filepath.Join(logDir, "peer-"+run.name), rest)
	if cfg.OrderTopic() != run.topic {
		return nil, fmt.Errorf("debezium routes order events to %s, not %s", cfg.OrderTopic(), run.topic)
	}
	java, args, err := cfg.Command(p.jars)
	if err != nil {
		return nil, err
	}
	return startChild(java, logDir, "peer-"+run.name, false, args...)
}
