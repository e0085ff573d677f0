package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/internal/testenv"
)

// rolesPassword is the password the test gives the least-privilege roles.
const rolesPassword = "eventforge-roles-test"

// applyRolesSQL runs deploy/compose/initdb/sql/roles.sql as a superuser on
// dsn's database, as psql would: :'var' is a quoted variable and a line
// ending in \gexec executes what its query returns. The roles are
// cluster-wide: an existing one keeps its attributes and gets the test's
// password. rolesOnly runs just the CREATE ROLE statements.
func applyRolesSQL(t *testing.T, dsn string, rolesOnly bool) {
	t.Helper()
	b, err := os.ReadFile("../deploy/compose/initdb/sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var stmt strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") || strings.TrimSpace(line) == "" {
			continue
		}
		for _, v := range []string{"owner_password", "api_password", "cdc_password", "consumer_password"} {
			line = strings.ReplaceAll(line, ":'"+v+"'", "'"+rolesPassword+"'")
		}
		if rolesOnly && !strings.HasPrefix(line, "CREATE ROLE") {
			continue
		}
		if q, ok := strings.CutSuffix(strings.TrimSpace(line), `\gexec`); ok {
			var generated string
			if err := conn.QueryRow(ctx, q).Scan(&generated); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if _, err := conn.Exec(ctx, generated); err != nil {
				t.Fatalf("%s: %v", generated, err)
			}
			continue
		}
		stmt.WriteString(line + "\n")
		if !strings.HasSuffix(strings.TrimSpace(line), ";") {
			continue
		}
		s := stmt.String()
		stmt.Reset()
		_, err := conn.Exec(ctx, s)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" && strings.HasPrefix(s, "CREATE ROLE") {
			role := strings.Fields(s)[2]
			_, err = conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, rolesPassword))
		}
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// asRole is dsn with the role's credentials.
func asRole(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, rolesPassword)
	return u.String()
}

// TestLeastPrivilegeRoles runs api, cdc and both consumers as the roles of
// docs/operations.md (created by roles.sql, granted by migration 00005):
// orders are created, cancelled, published and applied, no process hits a
// permission error, and each role is refused what it does not need.
func TestLeastPrivilegeRoles(t *testing.T) {
	applyRolesSQL(t, testenv.Stack(t).AdminDSN, true)
	// The test database is created and migrated after the roles exist, so
	// migration 00005 grants their privileges.
	pl := newPipeline(t)
	applyRolesSQL(t, adminOn(t, pl), false)

	apiDSN, cdcDSN, consumerDSN := asRole(t, pl.env.DatabaseURL, "eventforge_api"),
		asRole(t, pl.env.DatabaseURL, "eventforge_cdc"), asRole(t, pl.env.DatabaseURL, "eventforge_consumer")
	api := pl.apiProc(t, "api", nil, apiDSN)
	pl.waitAPIReady(t, api)
	cdc := start(t, "cdc", nil, "cdc", "--database-url", cdcDSN, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--slot", pl.env.Slot, "--topic", "order="+pl.env.Topic, "--no-create-slot", "--status-interval", "500ms",
		"--heartbeat-interval", "1s", "--outbox-prune-interval", "1s")
	procs := []*proc{api, cdc}
	for _, name := range []string{"fulfillment", "ledger"} {
		procs = append(procs, start(t, name, nil, "consumer", "--database-url", consumerDSN,
			"--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--name", name, "--group", pl.env.Group+"-"+name,
			"--topics", pl.env.Topic, "--commit-interval", "200ms"))
	}

	kept, keptEvent := createREST(t, pl.httpAddr, "roles-kept")
	cancelled, cancelledEvent := createREST(t, pl.httpAddr, "roles-cancelled")
	waitProcessed(t, pl, kept, keptEvent)
	waitProcessed(t, pl, cancelled, cancelledEvent)
	cancelREST(t, pl.httpAddr, cancelled, "")
	testenv.Eventually(t, 30*time.Second, "both consumers applied every event", func() error {
		var marks, ledgerRows int
		if err := pl.env.Pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM processed_events),
			(SELECT count(*) FROM ledger WHERE customer_id IN ('roles-kept', 'roles-cancelled') AND cancelled_count + order_count > 0)`).
			Scan(&marks, &ledgerRows); err != nil {
			return err
		}
		var status string
		if err := pl.env.Pool.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, cancelled).Scan(&status); err != nil {
			return err
		}
		// 3 events (2 created, 1 cancelled) × 2 consumers.
		if marks != 6 || ledgerRows != 2 || status != "cancelled" {
			return fmt.Errorf("marks %d (want 6), ledger rows %d (want 2), cancelled order status %q", marks, ledgerRows, status)
		}
		return nil
	})
	for _, p := range procs {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "permission denied") || strings.Contains(string(b), "42501") {
			t.Errorf("%s hit a permission error:\n%s", p.name, p.tail(20))
		}
	}

	// What each role must not do.
	ctx := context.Background()
	for _, tc := range []struct{ role, dsn, sql string }{
		{"eventforge_api", apiDSN, `INSERT INTO processed_events (consumer, event_id) VALUES ('x', gen_random_uuid())`},
		{"eventforge_api", apiDSN, `DELETE FROM outbox`},
		{"eventforge_cdc", cdcDSN, `UPDATE orders SET status = 'processed'`},
		{"eventforge_cdc", cdcDSN, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'order', 'x', 'X', '{}')`},
		{"eventforge_consumer", consumerDSN, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'order', 'x', 'X', '{}')`},
		{"eventforge_consumer", consumerDSN, `DELETE FROM outbox`},
		{"eventforge_consumer", consumerDSN, `UPDATE processed_events SET event_id = gen_random_uuid()`},
	} {
		conn, err := pgx.Connect(ctx, tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, tc.sql)
		conn.Close(ctx)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: %s: got %v, want permission denied (42501)", tc.role, tc.sql, err)
		}
	}
}

// adminOn is the superuser DSN on the test's database.
func adminOn(t *testing.T, pl *pipeline) string {
	t.Helper()
	admin, err := url.Parse(pl.env.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	db, err := url.Parse(pl.env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	admin.Path = db.Path
	return admin.String()
}
