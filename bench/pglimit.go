package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// orderTxScript is, statement for statement, the transaction the API runs
// for one order without an idempotency key (api/store): the orders,
// order_items and outbox inserts in one pipeline, which PostgreSQL runs as
// one implicit transaction committed at the pipeline's Sync — one round
// trip, prepared statements. IDs derive from one random number per
// transaction; the payload is built by the server instead of the client,
// with the same content, so the events it commits are valid OrderCreated
// events the consumer applies.
const orderTxScript = `\set n random(1, 9223372036854775806)
\startpipeline
INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at, updated_at) VALUES (md5(:n::text)::uuid, 'bench-pgbench', 'EUR', 3998, 'created', now(), now());
INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents) SELECT md5(:n::text)::uuid, t.n, t.sku, t.qty, t.price FROM unnest('{SKU-1}'::text[], '{2}'::int[], '{1999}'::bigint[]) WITH ORDINALITY AS t(sku, qty, price, n);
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers) VALUES (md5(:n::text || 'e')::uuid, 'order', md5(:n::text)::uuid::text, 'OrderCreated', jsonb_build_object('order_id', md5(:n::text)::uuid::text, 'customer_id', 'bench-pgbench', 'currency', 'EUR', 'items', '[{"sku":"SKU-1","quantity":2,"unit_price_cents":"1999"}]'::jsonb, 'total_cents', '3998', 'create_time', '2026-01-01T00:00:00Z'), '{}');
\endpipeline
`

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgToolPath finds a PostgreSQL client program: PATH first, then the
// PostgreSQL 15 packages.
func pgToolPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := "/usr/lib/postgresql/15/bin/" + name
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found on PATH or at %s (Debian package postgresql-client-15)", name, p)
	}
	return p, nil
}

// pgLimitResult is PostgreSQL's own limit for the order transaction.
type pgLimitResult struct {
	BestCommitsPerSec float64         `json:"best_commits_per_sec"`
	BestClients       int             `json:"best_clients"`
	ByClients         map[int]float64 `json:"by_clients"`
}

// pgLimit runs the order transaction with pgbench at each client count for
// d and keeps the best rate.
func pgLimit(ctx context.Context, dsn, workDir string, clients []int, d time.Duration) (pgLimitResult, error) {
	res := pgLimitResult{ByClients: map[int]float64{}}
	for _, c := range clients {
		tps, err := runPgbench(ctx, dsn, workDir, "-c", strconv.Itoa(c), "-T", strconv.Itoa(int(d.Seconds())))
		if err != nil {
			return res, fmt.Errorf("pgbench with %d clients: %w", c, err)
		}
		res.ByClients[c] = tps
		if tps > res.BestCommitsPerSec {
			res.BestCommitsPerSec, res.BestClients = tps, c
		}
	}
	return res, nil
}

// warmOrders is how many orders warmSchema commits.
const warmOrders = 2_000

// warmSchema commits warmOrders order transactions to a freshly migrated
// database and analyzes it, so that the connections measured next plan
// against tables that are not empty: planned on an empty orders table, the
// order_items foreign key check scans orders sequentially for as long as
// the connection keeps the plan (docs/bench.md).
func warmSchema(ctx context.Context, dsn, workDir string) error {
	if err := commitOrders(ctx, dsn, workDir, warmOrders); err != nil {
		return fmt.Errorf("warming the schema: %w", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("analyzing: %w", err)
	}
	return nil
}

// commitOrders commits n order transactions with pgbench (16 clients).
func commitOrders(ctx context.Context, dsn, workDir string, n int) error {
	const clients = 16
	if n <= 0 {
		return nil
	}
	_, err := runPgbench(ctx, dsn, workDir, "-c", strconv.Itoa(clients), "-t", strconv.Itoa((n+clients-1)/clients))
	return err
}

// runPgbench runs the order transaction script with extra pgbench
// arguments and returns the transactions per second it reports.
func runPgbench(ctx context.Context, dsn, workDir string, args ...string) (float64, error) {
	out, err := pgbench(ctx, dsn, workDir, args...)
	if err != nil {
		return 0, err
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps line:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// pgbench runs the order transaction script with extra pgbench arguments
// and returns its output. A run that committed nothing prints no rate and
// still succeeds: a load measured by its orders, not by pgbench's report,
// counts what it finds.
func pgbench(ctx context.Context, dsn, workDir string, args ...string) ([]byte, error) {
	bin, err := pgToolPath("pgbench")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(workDir, "order_tx.sql")
	if err := os.WriteFile(script, []byte(orderTxScript), 0o644); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing dsn: %w", err)
	}
	pw, _ := u.User.Password()
	full := append([]string{"-n", "-M", "prepared", "-j", "2", "-f", script}, args...)
	full = append(full, "-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(), u.Path[1:])
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w\n%s", err, out)
	}
	return out, nil
}
