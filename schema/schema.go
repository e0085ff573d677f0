// Package schema owns EventForge's PostgreSQL schema: the embedded migrations
// and the database objects the delivery path depends on (the outbox
// publication and the logical replication slot).
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver used by goose
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// OutputPlugin is the logical decoding plugin of the slot. The default slot
// and publication names are contract.Slot and contract.Publication.
const OutputPlugin = "pgoutput"

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the embedded migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded path is a compile-time constant
	}
	return sub
}

// Migrate applies every pending migration to the database at dsn. Concurrent
// callers are serialised by a PostgreSQL advisory lock, so several processes
// may call it at start.
func Migrate(ctx context.Context, dsn string, logger *slog.Logger) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("opening database: %w", err)
	}
	defer db.Close()

	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("creating migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	for _, r := range results {
		logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	version, err := provider.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	logger.Info("schema up to date", "version", version, "applied", len(results))
	return nil
}

// Querier is the part of pgx.Conn / pgxpool.Pool that EnsureSlot needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EnsureSlot creates the logical replication slot if it does not exist and
// reports whether it did. Creating the slot before the first order is written
// matters: changes committed before a slot exists are never decoded from it.
// On PostgreSQL 17 and later the slot is a failover slot, so a standby that
// synchronises slots (sync_replication_slots) keeps it across a promotion.
func EnsureSlot(ctx context.Context, q Querier, slot string) (created bool, err error) {
	var (
		exists  bool
		version int
	)
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1), current_setting('server_version_num')::int`, slot).
		Scan(&exists, &version)
	if err != nil {
		return false, fmt.Errorf("looking up slot %s: %w", slot, err)
	}
	if exists {
		return false, nil
	}
	create := `SELECT slot_name FROM pg_create_logical_replication_slot($1, $2)`
	if version >= 170000 {
		// slot_name, plugin, temporary, twophase, failover
		create = `SELECT slot_name FROM pg_create_logical_replication_slot($1, $2, false, false, true)`
	}
	var name string
	err = q.QueryRow(ctx, create, slot, OutputPlugin).Scan(&name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object: created concurrently
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating slot %s: %w", slot, err)
	}
	return true, nil
}
