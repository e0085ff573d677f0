package schema_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// TestMigrateIsIdempotent runs on a migrated test database (testenv.New
// migrates and creates the slot): a second Migrate and EnsureSlot change
// nothing, and the objects the delivery path depends on exist as specified.
func TestMigrateIsIdempotent(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	if err := schema.Migrate(ctx, env.DatabaseURL, quiet); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	created, err := schema.EnsureSlot(ctx, env.Pool, env.Slot)
	if err != nil || created {
		t.Fatalf("EnsureSlot on an existing slot: created=%v err=%v", created, err)
	}

	var insert, update, del bool
	err = env.Pool.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete FROM pg_publication WHERE pubname = $1`, contract.Publication).Scan(&insert, &update, &del)
	if err != nil {
		t.Fatalf("publication %s: %v", contract.Publication, err)
	}
	if !insert || update || del {
		t.Fatalf("publication publishes insert=%v update=%v delete=%v, want inserts only", insert, update, del)
	}
	rows, err := env.Pool.Query(ctx, `SELECT tablename FROM pg_publication_tables WHERE pubname = $1`, contract.Publication)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) != 1 || tables[0] != "outbox" {
		t.Fatalf("publication tables %v (err %v), want [outbox]", tables, err)
	}

	st, err := schema.ReadSlotStatus(ctx, env.Pool, env.Slot)
	if err != nil || st.Plugin != schema.OutputPlugin {
		t.Fatalf("slot plugin %q (err %v), want %s", st.Plugin, err, schema.OutputPlugin)
	}
	if err := schema.DropSlotsIfExist(ctx, env.Pool, env.Slot, "no_such_slot"); err != nil {
		t.Fatalf("dropping the slot and a missing one: %v", err)
	}
	if _, err := schema.ReadSlotStatus(ctx, env.Pool, env.Slot); !errors.Is(err, schema.ErrSlotNotFound) {
		t.Fatalf("after the drop: %v, want ErrSlotNotFound", err)
	}

	// Debezium-compatible outbox columns plus headers and created_at.
	want := map[string]string{"id": "uuid", "aggregatetype": "text", "aggregateid": "text", "type": "text", "payload": "jsonb", "headers": "jsonb", "created_at": "timestamp with time zone"}
	rows, err = env.Pool.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'outbox'`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var c, typ string
		if err := rows.Scan(&c, &typ); err != nil {
			t.Fatal(err)
		}
		got[c] = typ
	}
	for c, typ := range want {
		if got[c] != typ {
			t.Errorf("outbox.%s is %q, want %q", c, got[c], typ)
		}
	}

	var pk string
	err = env.Pool.QueryRow(ctx, `SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey, a.attnum))
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = 'processed_events'::regclass AND i.indisprimary`).Scan(&pk)
	if err != nil || pk != "consumer,event_id" {
		t.Fatalf("processed_events primary key %q (err %v), want consumer,event_id", pk, err)
	}
}
