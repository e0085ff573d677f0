package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// cdcArgs are the flags of a reader on env with the given overrides.
func cdcArgs(env *testenv.Env, extra ...string) []string {
	return append([]string{"cdc", "--database-url", env.DatabaseURL, "--kafka-brokers", env.Endpoints.KafkaBootstrap,
		"--slot", env.Slot, "--topic", "order=" + env.Topic}, extra...)
}

// wantRefused runs the reader with args and fails unless it exits non-zero
// at start with every one of wants in its output.
func wantRefused(t *testing.T, args []string, wants ...string) {
	t.Helper()
	out := eventforge(t, 1, args...).Combined
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestCDCRefusesMisconfiguration: `eventforge cdc` stops at start, with a
// message naming what to fix, when the outbox table is not in the
// publication, when the publication does not publish inserts and when the
// slot exists with another output plugin.
func TestCDCRefusesMisconfiguration(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()

	t.Run("outbox table outside the publication", func(t *testing.T) {
		wantRefused(t, cdcArgs(env, "--outbox-table", "public.orders"),
			"outbox table public.orders is not in publication \""+contract.Publication+"\"")
	})

	t.Run("publication without inserts", func(t *testing.T) {
		if _, err := env.Pool.Exec(ctx, `CREATE PUBLICATION ef_no_inserts FOR TABLE outbox WITH (publish = 'update, delete')`); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, cdcArgs(env, "--publication", "ef_no_inserts"),
			"publication \"ef_no_inserts\" does not publish inserts")
	})

	t.Run("slot with another plugin", func(t *testing.T) {
		slot := env.Slot + "_td"
		if _, err := env.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
			t.Fatal(err)
		}
		// A logical slot keeps its database from being dropped.
		t.Cleanup(func() {
			if err := schema.DropSlot(context.Background(), env.Pool, slot); err != nil {
				t.Error(err)
			}
		})
		other := *env
		other.Slot = slot
		wantRefused(t, cdcArgs(&other), "replication slot \""+slot+"\" uses plugin \"test_decoding\", want \"pgoutput\"")
	})
}

// TestCDCRefusesWALLevelReplica: on a server with wal_level=replica the
// reader stops at start and says which setting to change.
func TestCDCRefusesWALLevelReplica(t *testing.T) {
	stack := testenv.NewPrivate(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, stack.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET wal_level = 'replica'`)
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stack.StopPostgres(t, false)
	stack.Start(t)
	env := &testenv.Env{Endpoints: stack.Endpoints, DatabaseURL: stack.Endpoints.PostgresDSN, Slot: contract.Slot, Topic: contract.Topic}
	wantRefused(t, cdcArgs(env), "wal_level=replica", "needs wal_level=logical")
}
