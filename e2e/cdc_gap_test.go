package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// gapFlags make the reader record its checkpoint often, so a lost slot
// republishes a short stretch of the outbox.
var gapFlags = []string{"--checkpoint-interval", "1s"}

// waitCheckpointed waits until the reader recorded a checkpoint with a
// published_below for the pipeline's slot.
func waitCheckpointed(t *testing.T, pl *pipeline) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "reader recorded a checkpoint", func() error {
		var below *int64
		err := pl.env.Pool.QueryRow(context.Background(), `SELECT published_below FROM cdc_checkpoints WHERE slot = $1`, pl.env.Slot).Scan(&below)
		if err != nil || below == nil {
			return fmt.Errorf("published_below %v, err %v", below, err)
		}
		return nil
	})
}

// dropSlotUnderReader ends the reader's walsender and drops the slot before
// the reader reconnects: it retries until the drop wins the race with the
// reconnect.
func dropSlotUnderReader(t *testing.T, pl *pipeline) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, time.Minute, "slot dropped between the reader's reconnects", func() error {
		if err := terminateSlotReader(ctx, pl); err != nil {
			return err
		}
		return schema.DropSlot(ctx, slotPool(pl.env), pl.env.Slot)
	})
}

// gapRecoveries reads the reader's recovery counters.
func gapRecoveries(t *testing.T, metrics string) (recoveries, republished float64) {
	t.Helper()
	recoveries, _ = scrape(metrics, "eventforge_cdc_gap_recoveries_total")
	republished, _ = scrape(metrics, "eventforge_cdc_gap_republished_total")
	return recoveries, republished
}

// windowSlotLost: under load, the reader's slot is lost twice. First it is
// dropped between the reader's reconnects (the reader finds it missing);
// then, with the reader frozen, it is dropped and created again at the
// current position, as `eventforge migrate` or an operator would (the
// reader finds a slot confirmed past every position it confirmed). Each
// time the reader recreates the slot, republishes the outbox rows from its
// checkpoint on, and streams on: every order is applied once and verify
// finds nothing lost.
func windowSlotLost(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	reader, metrics := cdcReader(t, pl.env, "cdc", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })

	load := startOrderLoad(t, pl, 300)
	applyMore := func(what string) { waitApplying(t, pl, marks(t, pl, "fulfillment")+300, what) }
	applyMore("orders applied before the first drop")
	waitCheckpointed(t, pl)

	dropSlotUnderReader(t, pl)
	dropped := time.Now()
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap of the dropped slot recovered", func(v float64) bool { return v >= 1 })
	t.Logf("dropped slot: recovered and publishing again %s after the drop", time.Since(dropped).Round(time.Millisecond))
	_, firstRepublished := gapRecoveries(t, metrics)
	applyMore("orders applied after the first recovery")
	waitCheckpointed(t, pl)

	// Freeze the reader, drop its slot and create it again at the current
	// position while orders keep committing, then let the reader go on.
	if err := reader.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := terminateSlotReader(ctx, pl); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "frozen reader's slot dropped", func() error {
		return schema.DropSlot(ctx, slotPool(pl.env), pl.env.Slot)
	})
	waitOrdersCommitted(t, pl, 200)
	if _, err := schema.EnsureSlot(ctx, pl.env.Pool, pl.env.Slot); err != nil {
		t.Fatal(err)
	}
	waitOrdersCommitted(t, pl, 200)
	if err := reader.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap of the recreated slot recovered", func(v float64) bool { return v >= 2 })
	applyMore("orders applied after the second recovery")
	load.finish(t)

	mustDrain(t, pl)
	mustVerify(t, pl)
	recoveries, republished := gapRecoveries(t, metrics)
	if recoveries != 2 {
		t.Fatalf("gap recoveries %v, want 2", recoveries)
	}
	t.Logf("gap recoveries: 2; events republished: %v (first %v, second %v)", republished, firstRepublished, republished-firstRepublished)
	log, err := os.ReadFile(reader.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"the replication slot is missing", "it was recreated"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("reader log %s does not name the gap %q", reader.Log, want)
		}
	}
}

// waitOrdersCommitted waits until n more orders than now are committed.
func waitOrdersCommitted(t *testing.T, pl *pipeline, n int) {
	t.Helper()
	count := func() (int, error) {
		var c int
		err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&c)
		return c, err
	}
	base, err := count()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d more orders committed", n), func() error {
		c, err := count()
		if err != nil {
			return err
		}
		if c < base+n {
			return fmt.Errorf("%d of %d more orders", c-base, n)
		}
		return nil
	})
}

// windowSlotInvalidated: the reader is stopped while orders keep coming,
// and the server, with max_slot_wal_keep_size set, invalidates the slot
// once more WAL than that was written past it. Restarted, the reader finds
// the slot invalidated, recreates it, republishes the outbox rows from its
// checkpoint on, and streams on: every order is applied once and verify
// finds nothing lost. The server is a private one: the setting would put
// every other test's slots at risk.
func windowSlotInvalidated(t *testing.T) {
	stack := testenv.NewPrivate(t)
	pl := newPipelineOn(t, stack.Env(t))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, stack.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, stmt := range []string{`ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}

	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	reader, metrics := cdcReader(t, pl.env, "cdc", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	load := startOrderLoad(t, pl, 300)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "orders applied before the reader stops")
	waitCheckpointed(t, pl)
	reader.stop()
	waitOrdersCommitted(t, pl, 200)

	// Write WAL past the slot until a checkpoint invalidates it.
	if _, err := pl.env.Pool.Exec(ctx, `CREATE TABLE wal_filler (b text)`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "slot invalidated", func() error {
		if _, err := pl.env.Pool.Exec(ctx, `INSERT INTO wal_filler SELECT repeat(md5(g::text), 32) FROM generate_series(1, 20000) g`); err != nil {
			return err
		}
		if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
			return err
		}
		st, err := schema.ReadSlotStatus(ctx, pl.env.Pool, pl.env.Slot)
		if err != nil {
			return err
		}
		if st.WALStatus != "lost" {
			return fmt.Errorf("wal_status %q", st.WALStatus)
		}
		return nil
	})
	waitOrdersCommitted(t, pl, 200)

	restarted, metrics := cdcReader(t, pl.env, "cdc-restarted", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap of the invalidated slot recovered", func(v float64) bool { return v >= 1 })
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "orders applied after the recovery")
	load.finish(t)

	mustDrain(t, pl)
	mustVerify(t, pl)
	_, republished := gapRecoveries(t, metrics)
	t.Logf("invalidated slot recovered; events republished: %v", republished)
	log, err := os.ReadFile(restarted.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "the replication slot was invalidated") {
		t.Fatalf("reader log %s does not name the invalidated slot", restarted.Log)
	}
}

// terminateSlotReader ends the walsender streaming the pipeline's slot, if
// the slot exists and one does.
func terminateSlotReader(ctx context.Context, pl *pipeline) error {
	pool := slotPool(pl.env)
	st, err := schema.ReadSlotStatus(ctx, pool, pl.env.Slot)
	if errors.Is(err, schema.ErrSlotNotFound) {
		return nil
	}
	if err != nil || st.ActivePID == nil {
		return err
	}
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, *st.ActivePID)
	return err
}
