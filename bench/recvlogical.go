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

// copySlot copies slot src as dst at src's position, so the copy streams
// what src would: the backlog committed after src was made.
func copySlot(ctx context.Context, pool *pgxpool.Pool, src, dst string) error {
	_, err := pool.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, src, dst)
	if err != nil {
		return fmt.Errorf("copying slot %s as %s: %w", src, dst, err)
	}
	return nil
}

// recvlogicalDrain is PostgreSQL's own limit for the drain: pg_recvlogical
// streams slot (a copy made for it) up to target, with the reader's
// pgoutput options, to /dev/null, and drops it. It returns the seconds
// taken. The walsender decodes every transaction in one process, so this bounds
// any logical replication client of one slot on this machine.
func recvlogicalDrain(ctx context.Context, pool *pgxpool.Pool, dsn, slot string, target pglogrepl.LSN) (float64, error) {
	defer func() {
		_ = schema.DropSlotsIfExist(context.WithoutCancel(ctx), pool, slot)
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
	cmd := exec.CommandContext(ctx, bin, "--start", "--no-loop", "--slot", slot, "--endpos", target.String(),
		"-o", "proto_version=1", "-o", "publication_names="+contract.Publication, "-o", "messages=true",
		"-f", os.DevNull, "-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(), "-d", u.Path[1:])
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pw)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("pg_recvlogical: %w\n%s", err, out)
	}
	return time.Since(start).Seconds(), nil
}
