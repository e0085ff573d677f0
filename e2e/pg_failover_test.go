package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/eventforge/eventforge/consumer/dlq"
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
// is applied once, and verify finds nothing lost.
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
		phantoms := 0
		if version >= 17 {
			mustVerify(t, pl)
		} else {
			phantoms = mustVerifyAllowingPhantoms(t, pl)
		}
		recoveries, republished := gapRecoveries(t, metrics)
		t.Logf("PostgreSQL %d failover: promoted %s after the kill, publishing again %s after the kill; gap recoveries %v, events republished %v, phantom events %d",
			version, promoted.Round(time.Millisecond), resumed.Round(time.Millisecond), recoveries, republished, phantoms)
		switch {
		case version >= 17 && recoveries != 0:
			t.Fatalf("PostgreSQL %d: %v gap recoveries; the synchronised failover slot should have survived the promotion", version, recoveries)
		case version < 17 && recoveries != 1:
			t.Fatalf("PostgreSQL %d: %v gap recoveries, want 1 (the promoted standby has no slot)", version, recoveries)
		}
	}
}

// mustVerifyAllowingPhantoms is mustVerify for a failover on PostgreSQL 15
// or 16, where the old primary's walsender may have decoded and published a
// transaction that the synchronous standby never received: its commit was
// flushed locally, the primary died while waiting for the standby, and the
// client got an error. The promoted standby has no such order, so the
// consumer dead-letters its event as not found (no effect is applied). Such
// a phantom is no loss; every dead letter must be one: an event whose order
// and outbox row do not exist. It returns how many there were. PostgreSQL
// 17's synchronized_standby_slots rules them out (docs/cdc.md).
func mustVerifyAllowingPhantoms(t *testing.T, pl *pipeline) int {
	t.Helper()
	rep, code := runVerify(t, pl)
	if !rep.Drained || rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.MarksWithoutEffect != 0 || rep.OrderingViolations != 0 {
		t.Fatalf("verify: exit %d, drained %v, lost %d, duplicate effects %d, marks without effect %d, ordering violations %d, dead-lettered %v: %v",
			code, rep.Drained, rep.Lost, rep.DuplicateEffects, rep.MarksWithoutEffect, rep.OrderingViolations, rep.DeadLettered, rep.Violations)
	}
	dead, err := testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic+".dlq")
	if err != nil {
		t.Fatalf("reading the DLQ: %v", err)
	}
	total := 0
	for _, n := range rep.DeadLettered {
		total += n
	}
	if total != len(dead) {
		t.Fatalf("verify counts %d dead letters, the DLQ topic holds %d", total, len(dead))
	}
	for _, r := range dead {
		var orders, outbox int
		err := pl.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders WHERE id::text = $1),
			(SELECT count(*) FROM outbox WHERE id::text = $2)`, r.Key, r.Headers["id"]).Scan(&orders, &outbox)
		if err != nil {
			t.Fatal(err)
		}
		if orders != 0 || outbox != 0 || r.Headers[dlq.HeaderErrorClass] != "not_found" {
			t.Fatalf("dead letter of event %s (order %s, class %q) is no phantom: the promoted standby has %d such orders and %d such outbox rows",
				r.Headers["id"], r.Key, r.Headers[dlq.HeaderErrorClass], orders, outbox)
		}
	}
	t.Logf("verify: logical events %d, deliveries %d (duplicates %d), business changes %v, lost 0, duplicate effects 0, phantom events dead-lettered %d",
		rep.LogicalEvents, rep.Deliveries, rep.DuplicateDeliveries, rep.BusinessChanges, len(dead))
	recordReport(t, rep)
	return len(dead)
}
