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
// Outbox Event Router, with a slot and a publication of its own in the
// relay's database, named by dbzName.
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

// Name labels the relay.
func (*debeziumPeer) Name() string { return debeziumName }

// debeziumName labels the Debezium peer.
const debeziumName = "Debezium"

// Version names what runs.
func (*debeziumPeer) Version() string {
	return fmt.Sprintf("Debezium %s on Kafka Connect %s", debezium.DebeziumVersion, debezium.KafkaConnectVersion)
}

// dbzName names the connector, its slot, publication and topic prefix in
// db: apart from any other relay's slot in the same database.
func dbzName(db *peerDB) string { return db.name + "_dbz" }

// config is the worker of db, its files in dir.
func (p *debeziumPeer) config(db *peerDB, dir, restAddr string) debezium.Config {
	name := dbzName(db)
	return debezium.Config{Name: name, DatabaseURL: db.dsn, Bootstrap: db.kafka, Slot: name, Publication: name,
		RESTAddr: restAddr, Dir: dir, Tuning: p.tuning}
}

// Prepare creates the connector's publication and slot before any event is
// committed: the slot streams only what commits after it is made, and
// pgoutput looks a publication up as of each change, so one made later is
// not found. The publication is EventForge's: the outbox, inserts only. It
// returns the topic the router sends order events to.
func (p *debeziumPeer) Prepare(ctx context.Context, db *peerDB) (string, error) {
	name := dbzName(db)
	if _, err := db.pool.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{name}.Sanitize()+" FOR TABLE outbox WITH (publish = 'insert')"); err != nil {
		return "", fmt.Errorf("creating publication %s: %w", name, err)
	}
	if _, err := db.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		return "", fmt.Errorf("creating slot %s: %w", name, err)
	}
	return p.config(db, "", "").OrderTopic(), nil
}

// Start writes the worker's files into logDir/peer-debezium and starts it,
// its output in logDir/peer-debezium.log.
func (p *debeziumPeer) Start(_ context.Context, db *peerDB, topic, logDir string) (*child, error) {
	rest, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	cfg := p.config(db, filepath.Join(logDir, "peer-debezium"), rest)
	if cfg.OrderTopic() != topic {
		return nil, fmt.Errorf("debezium routes order events to %s, not %s", cfg.OrderTopic(), topic)
	}
	java, args, err := cfg.Command(p.jars)
	if err != nil {
		return nil, err
	}
	return startChild(java, logDir, "peer-debezium", false, args...)
}
