//go:build lifecycle

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// Node names of the replication pair: each is the application_name and the
// physical slot of the server while it follows the other.
const (
	nodeA = "eventforge_node_a"
	nodeB = "eventforge_node_b"
)

// switchRounds is how often the switchover tests switch over and back.
const switchRounds = 3

// TestLifecycleSwitchover17 follows docs/operations.md's runbook "A planned
// switchover and back" on PostgreSQL 17 with a failover slot, under load,
// three times there and back: before each switch the slot is synchronised
// on the standby (synced, not temporary); the primary stops cleanly, the
// standby is promoted, and the old primary follows the new one (its own
// slots removed, the failover slot synchronised from the new primary). The
// reader follows through its multi-host URL and streams from the
// synchronised slot after every switch without a gap recovery; every event
// is applied once (0 lost).
func TestLifecycleSwitchover17(t *testing.T) {
	recoveries := switchoverUnderLoad(t, 17)
	if recoveries != 0 {
		t.Fatalf("eventforge_cdc_gap_recoveries_total = %v after %d switchovers with a synchronised failover slot, want 0", recoveries, 2*switchRounds)
	}
}

// TestLifecycleSwitchover15: the same runbook on PostgreSQL 15, which
// keeps no logical slot on a standby: after every switch the reader finds
// its slot missing on the new primary and recovers the gap from the outbox
// (duplicates, no loss).
func TestLifecycleSwitchover15(t *testing.T) {
	recoveries := switchoverUnderLoad(t, 15)
	if recoveries != 2*switchRounds {
		t.Fatalf("eventforge_cdc_gap_recoveries_total = %v after %d switchovers on 15, want one per switch", recoveries, 2*switchRounds)
	}
}

// switchoverUnderLoad runs the pipeline on a private primary (node A) with
// a streaming standby (node B), all connected through a multi-host URL,
// switches over and back switchRounds times under load, checks the slot
// after every switch, and audits the end state. It returns the reader's
// gap recoveries.
func switchoverUnderLoad(t *testing.T, version int) float64 {
	stack := testenv.NewPrivate(t, testenv.WithPGVersion(version), testenv.WithoutKafka())
	env := stack.EnvOnSharedKafka(t)
	syncSlots := version >= 17
	opts := []testenv.StandbyOption{testenv.StandbyName(nodeB)}
	if syncSlots {
		opts = append(opts, testenv.FailoverSlotSync())
	}
	standby := stack.AddStandby(t, opts...)
	env.UseDatabaseURL(t, standby.MultiHostDSN(t, env.DatabaseURL))
	primary, other := stack.PrimaryNode(t, nodeA), standby.Node()

	pl := newPipelineOn(t, env)
	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	flags := gapFlags
	if !syncSlots {
		// 15 has no synchronized_standby_slots, and the flag names physical
		// slots that must all exist on the primary, which the switches swap.
		// A planned switchover needs no wait: the primary stops cleanly, so
		// the standby has every commit before it is promoted.
		flags = append([]string{"--synchronized-standby-slots", "none"}, gapFlags...)
	}
	_, metrics := cdcReader(t, pl.env, "cdc", nil, flags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	load := startOrderLoad(t, pl, 100)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+200, "orders applied before the first switchover")

	for i := 1; i <= 2*switchRounds; i++ {
		waitCheckpointed(t, pl)
		if syncSlots {
			other.WaitSlotSynced(t, primary, pl.env.Slot, 2*time.Minute)
		}
		published, _ := scrape(metrics, "eventforge_cdc_events_published_total")
		before, _ := gapRecoveries(t, metrics)
		down := testenv.Switchover(t, primary, other, syncSlots)
		primary, other = other, primary
		waitMetric(t, metrics, "eventforge_cdc_events_published_total", 3*time.Minute, "reader publishing on "+primary.Name,
			func(v float64) bool { return v > published+100 })
		if !syncSlots {
			// Republished events count as published before the recovery ends.
			waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 3*time.Minute, "gap recovered on "+primary.Name,
				func(v float64) bool { return v > before })
		}
		waitApplying(t, pl, marks(t, pl, "fulfillment")+100, "orders applied after switch "+fmt.Sprint(i))
		after, _ := gapRecoveries(t, metrics)
		t.Logf("switch %d: %s promoted, %s follows; no primary for %s; slot: %s; gap recoveries %v", i, primary.Name, other.Name,
			down.Round(time.Millisecond), slotOn(t, pl), after-before)
	}
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
	recoveries, republished := gapRecoveries(t, metrics)
	t.Logf("PostgreSQL %d: %d switchovers; gap recoveries %v, events republished %v", version, 2*switchRounds, recoveries, republished)
	return recoveries
}

// slotOn describes the pipeline's slot on the server its pool reaches (the
// primary): whether it is a failover slot, and who holds it.
func slotOn(t *testing.T, pl *pipeline) string {
	t.Helper()
	var desc string
	err := pl.env.Pool.QueryRow(t.Context(), `SELECT format('%s on port %s, failover %s, active %s', slot_name, current_setting('port'),
		coalesce(to_jsonb(s)->>'failover', 'n/a'), active) FROM pg_replication_slots s WHERE slot_name = $1`, pl.env.Slot).Scan(&desc)
	if err != nil {
		return "unreadable: " + strings.TrimSpace(err.Error())
	}
	return desc
}
