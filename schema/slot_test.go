package schema_test

import (
	"context"
	"testing"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// TestStandbySlotsFlushedWaitsForEverySlot: a named standby slot that has
// no position yet (its standby never connected) holds the flushed position
// back instead of being left out of the minimum.
//
// Physical slots are the cluster's, and a reader on a server with standbys
// refuses to publish without a choice: the test runs on a private server.
func TestStandbySlotsFlushedWaitsForEverySlot(t *testing.T) {
	env := testenv.NewPrivate(t, testenv.WithoutKafka()).Env(t)
	ctx := context.Background()
	reserved, unreserved := env.Slot+"_sa", env.Slot+"_sb"
	for _, s := range []struct {
		name    string
		reserve bool
	}{{reserved, true}, {unreserved, false}} {
		if _, err := env.Pool.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, $2)`, s.name, s.reserve); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = schema.DropSlotsIfExist(context.Background(), env.Pool, reserved, unreserved) })
	got, err := schema.StandbySlotsFlushed(ctx, env.Pool, []string{reserved})
	if err != nil || got == "" {
		t.Fatalf("a reserved slot alone: %q, %v; want its restart_lsn", got, err)
	}
	if got, err := schema.StandbySlotsFlushed(ctx, env.Pool, []string{reserved, unreserved}); err != nil || got != "" {
		t.Fatalf("with a slot that has no position: %q, %v; want \"\" (nothing flushed by every standby)", got, err)
	}
}
