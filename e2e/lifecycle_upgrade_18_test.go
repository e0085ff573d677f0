//go:build lifecycle

package e2e

import (
	"strings"
	"testing"
)

// TestLifecycleUpgrade17To18KeepsSlot (`make test-lifecycle`) follows
// docs/operations.md's runbook "A major upgrade with pg_upgrade (PostgreSQL 17 and later)": under load,
// the writers stop, the pipeline drains (every event applied, the slot
// confirmed past the last commit and the checkpoint past every outbox row),
// the api, consumers and reader stop, `eventforge slot catch-up` moves the
// slot past the writes that are no events, PostgreSQL 17 stops cleanly and
// pg_upgrade --link makes an 18 cluster that carries the failover slot. The
// reader on 18 adopts the slot (pg_upgrade created it past every position
// of 17) without a gap recovery, and every event is delivered.
func TestLifecycleUpgrade17To18KeepsSlot(t *testing.T) {
	up := upgradeUnderLoad(t, 17, 18, true)
	if recoveries, _ := gapRecoveries(t, up.metrics); recoveries != 0 {
		t.Fatalf("eventforge_cdc_gap_recoveries_total = %v after pg_upgrade kept the slot, want 0", recoveries)
	}
	if !strings.Contains(up.readerLog, "adopted the replication slot confirmed past the checkpoint's limit") {
		t.Fatalf("reader log %s does not say it adopted the upgraded slot", up.readerLogPath)
	}
	t.Logf("slot carried over by pg_upgrade and adopted: eventforge_cdc_gap_recoveries_total 0")
}
