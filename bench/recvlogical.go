package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/schema"
)

// recvlogicalSlot names the copy of the benchmark's slot that PostgreSQL's
// own client, pg_recvlogical, drains.
func recvlogicalSlot(slot string) string { return slot + "_limit" }

// copySlot copies slot at its current position, so the copy streams the
// same backlog the reader is about to drain.
func copySlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	_, err := pool.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, slot, recvlogicalSlot(slot))
	if err != nil {
		return fmt.Errorf("copying slot %s: %w", slot, err)
	}
	return nil
}

// decodeLimit is PostgreSQL's own limit for the drain: pg_recvlogical
// streams the copy of the slot up to target, with the reader's pgoutput
// options, to /dev/null, and drops the copy. It returns the seconds taken.
// The walsender decodes every transaction in one process, so this bounds
// any logical replication client of one slot on this machine.
func recvlogicalDrain(ctx context.Context, pool *pgxpool.Pool, dsn, slot string, target pglogrepl.LSN) (float64, error) {
	copyName := recvlogicalSlot(slot)
	defer func() {
		_ = schema.DropSlotsIfExist(context.WithoutCancel(ctx), pool, copyName)
	}()
	bin, err := pgToolPath("pg_recvlogical")
	if err != nil {
		return 0, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return 0, fmt.Errorf("parsing dsn: %w", err)
	}
	pw, _ := u.User.Password()
	cmd := exec.CommandContext(ctx, bin, "--start", "--no-loop", "--slot", copyName, "--endpos", target.String(),
		"-o", "proto_version=1", "-o", "publication_names="+contract.Publication, "-o", "messages=true",
		"-f", os.DevNull, "-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(), "-d", u.Path[1:])
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pw)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("pg_recvlogical: %w\n%s", err, out)
	}
	return time.Since(start).Seconds(), nil
}
