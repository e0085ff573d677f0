package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/testenv"
)

// consumerTableGrants are the privileges every consumer's business table
// needs, per role of docs/operations.md: the consumers write it, the api's
// console reads it.
var consumerTableGrants = []struct {
	role       string
	privileges []string
}{
	{"eventforge_consumer", []string{"SELECT", "INSERT", "UPDATE"}},
	{"eventforge_api", []string{"SELECT"}},
}

// TestConsumerTablesAreGranted walks the registry (consumer/registry): on
// a database migrated while the roles of deploy/compose/initdb/sql/roles.sql
// exist, every table a registered consumer lists exists, and its role and
// the api's have the privileges they need on it. A finding names
// schema/migrations and the GRANT a migration of the consumer must run.
func TestConsumerTablesAreGranted(t *testing.T) {
	ensureComponentRoles(t, testenv.Stack(t).AdminDSN)
	// Migrated after the roles exist, so the migrations grant them.
	env := testenv.New(t)
	ctx := context.Background()
	for _, c := range registry.All() {
		for _, table := range c.Tables {
			var exists bool
			if err := env.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if !exists {
				t.Errorf("schema/migrations: consumer %q lists table %s, which no migration creates", c.Name, table)
				continue
			}
			for _, g := range consumerTableGrants {
				var missing []string
				for _, p := range g.privileges {
					var ok bool
					if err := env.Pool.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, g.role, table, p).Scan(&ok); err != nil {
						t.Fatal(err)
					}
					if !ok {
						missing = append(missing, p)
					}
				}
				if len(missing) > 0 {
					t.Errorf("schema/migrations: consumer %q: role %s lacks %v on table %s: the migration that creates the table must run, when the role exists, "+
						"GRANT %s ON %s TO %s (as 00005_component_grants.sql does for shipments and ledger)",
						c.Name, g.role, missing, table, strings.Join(g.privileges, ", "), table, g.role)
				}
			}
		}
	}
}

// ensureComponentRoles creates the roles of consumerTableGrants on the
// cluster of adminDSN when they do not exist, with the attributes
// roles.sql gives them (LOGIN, no password until an administrator, or a
// test, sets one). Roles are cluster-wide: existing ones are left as they
// are.
func ensureComponentRoles(t *testing.T, adminDSN string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, g := range consumerTableGrants {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, g.role).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			continue
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN", pgx.Identifier{g.role}.Sanitize()))
		if err != nil && !roleExists(err) {
			t.Fatalf("creating role %s: %v", g.role, err)
		}
	}
}

// roleExists reports whether err says the role was created meanwhile, by
// a test running beside this one (duplicate_object, or unique_violation
// when both inserted into pg_authid at once).
func roleExists(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42710" || pgErr.Code == "23505")
}
