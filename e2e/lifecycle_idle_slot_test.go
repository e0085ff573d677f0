//go:build lifecycle

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
)

// The lifecycle tests (`make test-lifecycle`, build tag lifecycle) follow
// the database's own life: each takes minutes of its server's clock, so
// they stay out of `make test`. docs/operations.md has the runbooks they
// exercise.

// TestLifecycleIdleSlotTimeout: PostgreSQL 18 invalidates a replication
// slot that stayed idle longer than idle_replication_slot_timeout (checked
// at checkpoints; its unit is a minute). With the reader stopped under
// load, the slot is invalidated ("idle_timeout"); the restarted reader
// finds the gap, recreates the slot and republishes from its checkpoint:
// every order applied once, nothing lost.
func TestLifecycleIdleSlotTimeout(t *testing.T) {
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(18), testenv.WithPGSettings("idle_replication_slot_timeout = '1min'"))
	pl := newPipelineOn(t, stack.Env(t))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, stack.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	reader, metrics := cdcReader(t, pl.env, "cdc", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	load := startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+200, "orders applied before the reader stops")
	waitCheckpointed(t, pl)
	reader.stop()
	stopped := time.Now()

	testenv.Eventually(t, 4*time.Minute, "slot invalidated by the idle timeout", func() error {
		if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
			return err
		}
		var reason *string
		if err := admin.QueryRow(ctx, `SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1`, pl.env.Slot).Scan(&reason); err != nil {
			return err
		}
		if reason == nil || *reason != "idle_timeout" {
			return fmt.Errorf("invalidation_reason %v", reason)
		}
		return nil
	})
	t.Logf("slot invalidated (idle_timeout) %s after the reader stopped", time.Since(stopped).Round(time.Second))

	restarted, metrics := cdcReader(t, pl.env, "cdc-restarted", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap of the idle slot recovered", func(v float64) bool { return v >= 1 })
	waitApplying(t, pl, marks(t, pl, "fulfillment")+200, "orders applied after the recovery")
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
	_, republished := gapRecoveries(t, metrics)
	log, err := os.ReadFile(restarted.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "idle_timeout") {
		t.Fatalf("reader log %s does not name the invalidation", restarted.Log)
	}
	t.Logf("idle slot recovered; events republished: %v", republished)
}
