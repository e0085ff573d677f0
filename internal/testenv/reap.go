package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/localstack"
)

// A test process that dies before its cleanup runs (a -timeout panic, a
// SIGKILL) leaves its database, slot and topic on the shared stack. The slot
// is the costly part: an inactive logical slot retains WAL without limit,
// which on a long-lived stack (`make run` beside many `make test` runs)
// fills the disk. So every name a test makes carries the
// PID of its process, and the first Stack call of each test process drops
// what belongs to processes that no longer exist.

// ownerPrefix is the part of a test name that says which process made it.
func ownerPrefix(kind string) string { return kind + strconv.Itoa(os.Getpid()) }

// ownedName matches the databases, slots and topics tests make: "ef", the
// kind (t, p), the owner's PID, "_", random hex, and a topic's suffix.
var ownedName = regexp.MustCompile(`^ef[tp]([0-9]+)_[0-9a-f]+`)

// orphaned reports whether name is a test's and its process is gone.
func orphaned(name string) bool {
	m := ownedName.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// reapOrphans drops the slots, databases and topics of test processes that
// are gone. Slots come first: a database with a slot cannot be dropped.
// What a concurrent process reaps first is skipped.
func reapOrphans(ctx context.Context, ep localstack.Endpoints) error {
	admin, err := pgx.Connect(ctx, ep.AdminDSN)
	if err != nil {
		return fmt.Errorf("connecting as admin: %w", err)
	}
	defer admin.Close(ctx)
	slots, err := orphanedRows(ctx, admin, `SELECT slot_name FROM pg_replication_slots WHERE NOT active AND slot_name ~ '^ef[tp][0-9]+_'`)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range slots {
		if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, s); err != nil {
			errs = append(errs, fmt.Errorf("dropping slot %s: %w", s, err))
		}
	}
	dbs, err := orphanedRows(ctx, admin, `SELECT datname FROM pg_database WHERE datname ~ '^ef[tp][0-9]+_'`)
	if err != nil {
		return err
	}
	for _, d := range dbs {
		if _, err := admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, pgx.Identifier{d}.Sanitize())); err != nil {
			errs = append(errs, fmt.Errorf("dropping database %s: %w", d, err))
		}
	}
	if err := reapTopics(ep.KafkaBootstrap); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// orphanedRows runs a one-column query of names and keeps the orphaned ones.
func orphanedRows(ctx context.Context, conn *pgx.Conn, query string) ([]string, error) {
	rows, _ := conn.Query(ctx, query)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing test leftovers: %w", err)
	}
	var out []string
	for _, n := range names {
		if orphaned(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// reapTopics deletes the topics of test processes that are gone.
func reapTopics(bootstrap string) error {
	return withAdmin(bootstrap, func(ctx context.Context, a *kafka.AdminClient) error {
		md, err := a.GetMetadata(nil, true, int(10*time.Second/time.Millisecond))
		if err != nil {
			return fmt.Errorf("listing topics: %w", err)
		}
		var topics []string
		for name := range md.Topics {
			if orphaned(name) {
				topics = append(topics, name)
			}
		}
		if len(topics) == 0 {
			return nil
		}
		if _, err := a.DeleteTopics(ctx, topics); err != nil {
			return fmt.Errorf("deleting %d topics of ended test processes: %w", len(topics), err)
		}
		return nil
	})
}
