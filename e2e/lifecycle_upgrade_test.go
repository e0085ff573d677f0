package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestLifecycleUpgrade15To17RecoversGap (in `make test`): the runbook "A
// major upgrade before PostgreSQL 17". pg_upgrade from 15 does not carry logical slots:
// the reader on 17 finds its slot missing, creates it again (a failover
// slot) and republishes the outbox rows its checkpoint does not cover:
// every event delivered, duplicates only.
func TestLifecycleUpgrade15To17RecoversGap(t *testing.T) {
	up := upgradeUnderLoad(t, 15, 17, false)
	recoveries, republished := gapRecoveries(t, up.metrics)
	if recoveries < 1 {
		t.Fatalf("eventforge_cdc_gap_recoveries_total = %v after an upgrade that drops the slot, want at least 1", recoveries)
	}
	if !strings.Contains(up.readerLog, "replication slot is missing") {
		t.Fatalf("reader log %s does not name the missing slot", up.readerLogPath)
	}
	t.Logf("slot dropped by pg_upgrade from 15, gap recovered: eventforge_cdc_gap_recoveries_total %v, events republished %v", recoveries, republished)
}

// upgraded is what upgradeUnderLoad leaves to check: the metrics address
// and log of the reader that ran on the new version.
type upgraded struct {
	metrics       string
	readerLog     string
	readerLogPath string
}

// upgradeUnderLoad runs the pipeline on a private stack of PostgreSQL from
// under load, drains it, stops it, upgrades PostgreSQL to to with
// pg_upgrade, starts the pipeline again under load and checks with the
// auditor that every event is delivered and applied once (0 lost).
func upgradeUnderLoad(t *testing.T, from, to int, link bool) upgraded {
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(from))
	pl := newPipelineOn(t, stack.Env(t))
	api := pl.startAPI(t)
	consumer := pl.startConsumer(t, "consumer", nil)
	reader, metrics := cdcReader(t, pl.env, "cdc", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	load := startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, fmt.Sprintf("orders applied on %d", from))

	// Drain: no writer, every event applied, the slot confirmed past the
	// last commit, the checkpoint past every outbox row.
	load.finish(t)
	mustDrain(t, pl)
	waitCheckpointCovers(t, pl)
	api.stop()
	consumer.stop()
	reader.stop()
	if from >= 17 {
		res := eventforge(t, 0, "slot", "catch-up", "--database-url", pl.env.DatabaseURL, "--slot", pl.env.Slot)
		t.Logf("eventforge slot catch-up: %s", strings.TrimSpace(res.Stdout))
	}
	stack.StopPostgres(t, false)
	res := stack.Upgrade(t, to, link)
	t.Logf("pg_upgrade %d → %d (link %v) took %s; its report ends:\n%s", from, to, link, res.Elapsed.Round(time.Millisecond), res.Output)
	logSlots(t, pl)

	pl.startConsumer(t, "consumer-upgraded", nil)
	reader, metrics = cdcReader(t, pl.env, "cdc-upgraded", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 2*time.Minute, "reader active on the upgraded server", func(v float64) bool { return v == 1 })
	pl.startAPI(t)
	load = startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, fmt.Sprintf("orders applied on %d", to))
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
	log, err := os.ReadFile(reader.Log)
	if err != nil {
		t.Fatal(err)
	}
	return upgraded{metrics: metrics, readerLog: string(log), readerLogPath: reader.Log}
}

// waitCheckpointCovers waits until the reader's checkpoint covers every
// outbox row: published_below past the transaction of each (the row's
// 32-bit xmin widened by its age), so a reader on the upgraded server finds
// nothing unpublished.
func waitCheckpointCovers(t *testing.T, pl *pipeline) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "checkpoint past every outbox row", func() error {
		var uncovered int
		err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox o, cdc_checkpoints c
			WHERE c.slot = $1 AND (c.published_below IS NULL
				OR pg_snapshot_xmax(pg_current_snapshot())::text::bigint - age(o.xmin) >= c.published_below)`, pl.env.Slot).Scan(&uncovered)
		if err != nil {
			return err
		}
		if uncovered > 0 {
			return fmt.Errorf("%d outbox rows at or above published_below", uncovered)
		}
		return nil
	})
}

// logSlots logs the replication slots of the pipeline's server.
func logSlots(t *testing.T, pl *pipeline) {
	t.Helper()
	var slots string
	err := pl.env.Pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(format('%s (%s, failover %s, confirmed %s)',
		slot_name, slot_type, to_jsonb(s)->>'failover', confirmed_flush_lsn), ', '), 'none') FROM pg_replication_slots s`).Scan(&slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replication slots on PostgreSQL %s: %s", serverVersion(t, pl), slots)
}

func serverVersion(t *testing.T, pl *pipeline) string {
	t.Helper()
	var v string
	if err := pl.env.Pool.QueryRow(context.Background(), `SHOW server_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
