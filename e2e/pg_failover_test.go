package e2e

import (
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// windowPrimaryFailover returns the failure window "primary failover under
// load" on PostgreSQL version: a private primary with a synchronous
// streaming standby (on 17+ also synchronising failover slots), the api,
// the reader and the consumer connected through a multi-host URL, orders
// created at 300/s. The primary is SIGKILLed and the standby promoted; every
// process follows the promotion by itself. On 15/16 the new primary has no
// slot and the reader recovers the gap from the outbox; on 17+ the
// synchronised slot survives and nothing is recovered. Every order committed
// is applied once, and verify finds nothing lost and no dead letter: the
// reader publishes no commit the standby lacks (17: the server's
// synchronized_standby_slots; 15/16: --synchronized-standby-slots).
func windowPrimaryFailover(version int) func(t *testing.T) {
	return func(t *testing.T) {
		stack := testenv.NewPrivate(t, testenv.WithPGVersion(version), testenv.WithoutKafka())
		env := stack.EnvOnSharedKafka(t)
		opts := []testenv.StandbyOption{testenv.Synchronous()}
		if version >= 17 {
			opts = append(opts, testenv.FailoverSlotSync())
		}
		standby := stack.AddStandby(t, opts...)
		env.UseDatabaseURL(t, standby.MultiHostDSN(t, env.DatabaseURL))

		pl := newPipelineOn(t, env)
		pl.startAPI(t)
		pl.startConsumer(t, "consumer", nil)
		flags := gapFlags
		if version < 17 {
			// 17 holds the walsender back itself (synchronized_standby_slots).
			flags = append([]string{"--synchronized-standby-slots", standby.Name}, gapFlags...)
		}
		_, metrics := cdcReader(t, pl.env, "cdc", nil, flags...)
		waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })

		load := startOrderLoad(t, pl, 300)
		waitApplying(t, pl, marks(t, pl, "fulfillment")+600, "orders applied before the failover")
		waitCheckpointed(t, pl)
		if version >= 17 {
			standby.WaitSlotSynced(t, pl.env.Slot, 2*time.Minute)
		}
		waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "orders applied just before the failover")

		published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
		stack.KillPrimary(t)
		killed := time.Now()
		standby.Promote(t)
		promoted := time.Since(killed)
		waitMetric(t, metrics, "eventforge_cdc_events_published_total", 3*time.Minute, "reader publishing on the promoted standby",
			func(v float64) bool { return v > published+100 })
		resumed := time.Since(killed)
		waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "orders applied after the failover")
		load.finish(t)

		mustDrain(t, pl)
		// No phantom event either: 17's synchronized_standby_slots and 15/16's
		// --synchronized-standby-slots publish no commit the standby lacks.
		mustVerify(t, pl)
		recoveries, republished := gapRecoveries(t, metrics)
		t.Logf("PostgreSQL %d failover: promoted %s after the kill, publishing again %s after the kill; gap recoveries %v, events republished %v",
			version, promoted.Round(time.Millisecond), resumed.Round(time.Millisecond), recoveries, republished)
		switch {
		case version >= 17 && recoveries != 0:
			t.Fatalf("PostgreSQL %d: %v gap recoveries; the synchronised failover slot should have survived the promotion", version, recoveries)
		case version < 17 && recoveries != 1:
			t.Fatalf("PostgreSQL %d: %v gap recoveries, want 1 (the promoted standby has no slot)", version, recoveries)
		}
	}
}
