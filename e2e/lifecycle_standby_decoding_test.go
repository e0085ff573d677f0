package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestLifecycleDecodeFromStandby17 (in `make test`) follows
// docs/operations.md's runbook "Decoding on a standby" on PostgreSQL 17:
// the reader decodes on a physical standby (--replication-url;
// hot_standby_feedback on, a physical slot on the primary) while --database-url stays the primary for the
// leadership lock, heartbeats and checkpoints. The slot is created on the
// standby (a gap recovery on the first start, since no checkpoint exists);
// a reader given the standby as --database-url says why it cannot run there.
// Under load the standby crashes (immediate shutdown) and later restarts
// as planned (the slot saved first, then a fast shutdown): the slot survives
// each restart on the standby, the reader resumes from its confirmed
// position without another recovery, and the slot's confirmed_flush_lsn on
// the standby keeps advancing. Then the slot is dropped on the standby: the
// reader recovers the gap from the outbox with the snapshot the new slot
// exports on the standby. Every order is applied once with its events in
// order (0 lost; duplicates counted). On 17 the slot on the standby is not
// a failover slot (PostgreSQL refuses one there).
func TestLifecycleDecodeFromStandby17(t *testing.T) { decodeFromStandby(t, 17) }

func decodeFromStandby(t *testing.T, version int) {
	began := time.Now()
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(version), testenv.WithoutKafka())
	env := stack.EnvOnSharedKafka(t)
	standby := stack.AddStandby(t)
	ctx := context.Background()
	// The runbook's grant (functions are granted per database): the reader
	// asks the primary to log its running transactions while it creates
	// the slot on the standby.
	primaryDSN := inDatabase(t, stack.Endpoints.AdminDSN, env.Database)
	if err := localstack.ExecOnce(ctx, primaryDSN, `GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO eventforge`); err != nil {
		t.Fatal(err)
	}
	env.DecodeOnStandby(t, standby)

	flags := append([]string{"--synchronized-standby-slots", standby.Name}, gapFlags...)
	// What the reader did before --replication-url: --database-url at the
	// standby. It now says why it cannot run there (its leadership lock,
	// heartbeats and checkpoints are writes) and retries.
	onStandby := *env
	onStandby.DatabaseURL, onStandby.ReplicationURL = env.ReplicationURL, ""
	wrong, _ := cdcReader(t, &onStandby, "cdc-database-url-on-standby", nil, flags...)
	testenv.Eventually(t, 30*time.Second, "reader refusing a standby as --database-url", func() error {
		b, err := os.ReadFile(wrong.Log)
		if err != nil || !strings.Contains(string(b), "database-url reaches a standby") {
			return fmt.Errorf("not in %s yet (%v)", wrong.Log, err)
		}
		return nil
	})
	wrong.stop()

	pl := newPipelineOn(t, env)
	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	reader, metrics := cdcReader(t, env, "cdc", nil, flags...)
	waitMetric(t, metrics, "eventforge_cdc_active", time.Minute, "reader active on the standby's slot", func(v float64) bool { return v == 1 })
	startRecoveries, _ := gapRecoveries(t, metrics)
	load := startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+200, "orders applied before the first restart")
	waitCheckpointed(t, pl)
	t.Logf("slot on the standby: %s; on the primary: %s", slotDesc(t, env.SlotPool, env.Slot), slotDesc(t, env.Pool, env.Slot))

	for _, planned := range []bool{false, true} {
		var saved pglogrepl.LSN
		if planned {
			saved = saveStandbySlot(t, primaryDSN, env)
		}
		before, err := slotConfirmed(env)
		if err != nil {
			t.Fatal(err)
		}
		published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		down := time.Now()
		err = standby.Restart(rctx, !planned)
		cancel()
		if err != nil {
			t.Fatalf("restarting the standby: %v", err)
		}
		restarted := time.Since(down)
		afterRestart, err := slotConfirmed(env)
		if err != nil {
			t.Fatal(err)
		}
		if planned && afterRestart < saved {
			t.Fatalf("after the planned restart the slot is confirmed at %s, before the restart_lsn saved with it (%s)", afterRestart, saved)
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
		t.Logf("standby restart (planned %v): streaming again after %s, reader publishing after %s; slot confirmed_flush_lsn %s before, %s right after the restart, %s now; the slot went back %d bytes of WAL (streamed again)",
			planned, restarted.Round(time.Millisecond), resumed.Round(time.Millisecond), before, afterRestart, now, int64(before)-int64(afterRestart))
	}
	if recoveries, _ := gapRecoveries(t, metrics); recoveries != startRecoveries {
		t.Fatalf("eventforge_cdc_gap_recoveries_total went from %v to %v across the standby's restarts: the slot did not survive on the standby", startRecoveries, recoveries)
	}

	// A slot lost on the standby: recovered from the outbox with the
	// snapshot exported there.
	waitCheckpointed(t, pl)
	dropSlotUnderReader(t, pl)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "gap of the slot dropped on the standby recovered",
		func(v float64) bool { return v > startRecoveries })
	waitApplying(t, pl, marks(t, pl, "fulfillment")+100, "orders applied after the recovery")
	t.Logf("after the recovery: slot on the standby: %s", slotDesc(t, env.SlotPool, env.Slot))

	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
	recoveries, republished := gapRecoveries(t, metrics)
	log, err := os.ReadFile(reader.Log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "replication slot created for the recovery"); n != 2 {
		t.Fatalf("reader log %s shows %d slots created for a recovery, want 2 (the first start's, the dropped slot's)", reader.Log, n)
	}
	t.Logf("PostgreSQL %d, decoding on the standby: 2 restarts of the standby, 1 slot dropped there; gap recoveries %v, events republished %v; took %s",
		version, recoveries, republished, time.Since(began).Round(time.Second))
}

// saveStandbySlot is the runbook's step before a planned restart of the
// standby: the primary logs its running transactions
// (pg_log_standby_snapshot); once the reader confirms past that record the
// standby advances the slot's restart_lsn and catalog_xmin and saves the
// slot to disk — its confirmed position with them. It waits until the
// slot's restart_lsn moved and returns it: a restart cannot take the slot
// back before it.
func saveStandbySlot(t *testing.T, primaryDSN string, env *testenv.Env) pglogrepl.LSN {
	t.Helper()
	ctx := context.Background()
	restartLSN := func() pglogrepl.LSN {
		var s string
		if err := env.SlotPool.QueryRow(ctx, `SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, env.Slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	before := restartLSN()
	if err := localstack.ExecOnce(ctx, primaryDSN, `SELECT pg_log_standby_snapshot()`); err != nil {
		t.Fatalf("logging a standby snapshot on the primary: %v", err)
	}
	var saved pglogrepl.LSN
	testenv.Eventually(t, time.Minute, "slot's restart_lsn advanced on the standby", func() error {
		if saved = restartLSN(); saved <= before {
			return fmt.Errorf("restart_lsn %s", saved)
		}
		return nil
	})
	return saved
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

// inDatabase is dsn with its database replaced by db.
func inDatabase(t *testing.T, dsn, db string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}
