package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetDatabase sets a run-time parameter for every new session of the test's
// database (ALTER DATABASE … SET, as the superuser, so that parameters only
// a superuser may set, such as lc_messages, work too) and resets the Env's
// pool, so its connections are new ones that run with it. The server's own
// settings are not touched; the database, and with it the setting, is
// dropped at cleanup.
func (e *Env) SetDatabase(t testing.TB, name, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.Endpoints.AdminDSN)
	if err != nil {
		t.Fatalf("connecting as admin: %v", err)
	}
	defer admin.Close(ctx)
	literal := "'" + strings.ReplaceAll(value, "'", "''") + "'"
	sql := fmt.Sprintf(`ALTER DATABASE %s SET %s = %s`, pgx.Identifier{e.Database}.Sanitize(), pgx.Identifier{name}.Sanitize(), literal)
	if _, err := admin.Exec(ctx, sql); err != nil {
		t.Fatalf("setting %s = %s on database %s: %v", name, value, e.Database, err)
	}
	e.Pool.Reset()
}
