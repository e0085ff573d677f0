//go:build lifecycle

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// standbyRestarts is how often TestLifecycleDecodeFromStandby16 restarts
// the standby under load: the first time immediately (crash recovery), then
// with a fast shutdown.
const standbyRestarts = 2

// TestLifecycleDecodeFromStandby16 follows docs/operations.md's runbook
// "Decoding on a standby" on PostgreSQL 16: the reader decodes on a
// physical standby (--replication-url; hot_standby_feedback on, a physical
// slot on the primary) while --database-url stays the primary for the
// leadership lock, heartbeats and checkpoints. The slot is created on the
// standby (a gap recovery from the outbox on the first start, since no
// checkpoint exists); under load the standby is restarted twice. The slot
// survives each restart on the standby: the reader resumes from its
// confirmed position without another recovery, the slot's
// confirmed_flush_lsn on the standby keeps advancing, and every order is
// applied once with its events in order (0 lost; duplicates counted).
func TestLifecycleDecodeFromStandby16(t *testing.T) {
	began := time.Now()
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(16), testenv.WithoutKafka())
	env := stack.EnvOnSharedKafka(t)
	standby := stack.AddStandby(t)
	ctx := context.Background()
	// The runbook's grant: the reader asks the primary to log its running
	// transactions while it creates the slot on the standby.
	if err := localstack.ExecOnce(ctx, stack.Endpoints.AdminDSN, `GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO eventforge`); err != nil {
		t.Fatal(err)
	}
	env.DecodeOnStandby(t, standby)

	pl := newPipelineOn(t, env)
	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	flags := append([]string{"--synchronized-standby-slots", standby.Name}, gapFlags...)
	reader, metrics := cdcReader(t, env, "cdc", nil, flags...)
	waitMetric(t, metrics, "eventforge_cdc_active", time.Minute, "reader active on the standby's slot", func(v float64) bool { return v == 1 })
	startRecoveries, _ := gapRecoveries(t, metrics)
	load := startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+200, "orders applied before the first restart")
	waitCheckpointed(t, pl)
	t.Logf("slot on the standby: %s; on the primary: %s", slotDesc(t, env.SlotPool, env.Slot), slotDesc(t, env.Pool, env.Slot))

	for i := 1; i <= standbyRestarts; i++ {
		immediate := i == 1
		before, err := slotConfirmed(env)
		if err != nil {
			t.Fatal(err)
		}
		published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		down := time.Now()
		err = standby.Restart(rctx, immediate)
		cancel()
		if err != nil {
			t.Fatalf("restarting the standby: %v", err)
		}
		restarted := time.Since(down)
		afterRestart, err := slotConfirmed(env)
		if err != nil {
			t.Fatal(err)
		}
		waitMetric(t, metrics, "eventforge_cdc_events_published_total", 2*time.Minute, "reader publishing after the standby's restart",
			func(v float64) bool { return v > published+100 })
		resumed := time.Since(down)
		waitApplying(t, pl, marks(t, pl, "fulfillment")+100, "orders applied after the restart")
		testenv.Eventually(t, time.Minute, "slot confirmed past its position before the restart", func() error {
			now, err := slotConfirmed(env)
			if err != nil {
				return err
			}
			if now <= before {
				return fmt.Errorf("confirmed_flush_lsn %s, before the restart %s", now, before)
			}
			return nil
		})
		now, _ := slotConfirmed(env)
		t.Logf("restart %d (immediate %v): standby streaming again after %s, reader publishing after %s; confirmed_flush_lsn %s before, %s after the restart, %s now",
			i, immediate, restarted.Round(time.Millisecond), resumed.Round(time.Millisecond), before, afterRestart, now)
	}
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
	recoveries, republished := gapRecoveries(t, metrics)
	if recoveries != startRecoveries {
		t.Fatalf("eventforge_cdc_gap_recoveries_total went from %v to %v across the standby's restarts: the slot did not survive on the standby", startRecoveries, recoveries)
	}
	log, err := os.ReadFile(reader.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "replication slot created for the recovery") {
		t.Fatalf("reader log %s does not show the slot created on the standby", reader.Log)
	}
	t.Logf("PostgreSQL 16 standby decoding: %d restarts of the standby; gap recoveries %v (the first start's), events republished %v; took %s",
		standbyRestarts, recoveries, republished, time.Since(began).Round(time.Second))
}

// slotDesc describes slot on pool's server: its port, whether that server
// is in recovery, and the slot's position and holder; "none" when missing.
func slotDesc(t *testing.T, pool *pgxpool.Pool, slot string) string {
	t.Helper()
	var desc string
	err := pool.QueryRow(context.Background(), `SELECT coalesce((SELECT format('%s on port %s (in recovery %s), confirmed_flush_lsn %s, active %s',
			slot_name, current_setting('port'), pg_is_in_recovery(), confirmed_flush_lsn, active) FROM pg_replication_slots WHERE slot_name = $1),
		format('none on port %s', current_setting('port')))`, slot).Scan(&desc)
	if err != nil {
		return "unreadable: " + strings.TrimSpace(err.Error())
	}
	return desc
}
