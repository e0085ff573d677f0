package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// pollingEventsEnv sets the backlog of TestPollingPeerDrainsTheBacklog
// (default 500), to measure a larger drain by hand.
const pollingEventsEnv = "EVENTFORGE_BENCH_POLLING_EVENTS"

// TestPollingPeerDrainsTheBacklog runs the polling relay as the peers phase
// does (a process of eventforge-bench, on a database of its own) over a
// backlog of order transactions committed before it starts, and checks
// that every outbox event reaches its topic and every row is deleted.
func TestPollingPeerDrainsTheBacklog(t *testing.T) {
	events := peerTestEvents(t, pollingEventsEnv)
	te := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "eventforge-bench")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/eventforge-bench").CombinedOutput(); err != nil {
		t.Fatalf("building eventforge-bench: %v\n%s", err, out)
	}
	r := peerTestRunner(te, dir)
	relay := pollingPeer{self: bin}
	db, run := preparePeerTest(ctx, t, r, relay, "polling", events)
	want := map[string]string{} // event ID → order ID
	rows, err := db.pool.Query(ctx, `SELECT id::text, aggregateid FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, order string
		if err := rows.Scan(&id, &order); err != nil {
			t.Fatal(err)
		}
		want[id] = order
	}
	rows.Close()

	var d relayDrain
	c, err := r.drainPeer(ctx, relay, db, run, len(want), &d)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "peer-"+run.name+".log"))
		t.Fatalf("draining with the polling relay: %v\nrelay log:\n%s", err, log)
	}
	t.Logf("polling relay drained %d events in %.2f s (%.0f events/s), first record after %.2f s, peak RSS %.1f MiB, "+
		"relay CPU %.3f s, PostgreSQL CPU %.3f s and WAL %.0f KiB per 1,000 events",
		d.Events, d.Seconds, d.EventsPerSec, d.FirstRecordSecs, float64(d.PeakRSSBytes)/(1<<20),
		d.RelayCPUPer1000, d.PostgresCPUPer1000, d.WALBytesPer1000/1024)
	// The last batch's delete commits just after its acknowledgements.
	err = waitFor(ctx, time.Minute, "the outbox emptied", func() (bool, error) {
		var left int
		err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left)
		return left == 0, err
	})
	if err != nil {
		t.Error(err)
	}
	c.stop()

	recs, err := testenv.ReadTopic(te.Endpoints.KafkaBootstrap, run.topic)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		id := rec.Headers[contract.HeaderID]
		order, ok := want[id]
		switch {
		case !ok:
			t.Errorf("record %d@%d: event %q is not one of the backlog's", rec.Partition, rec.Offset, id)
		case rec.Key != order:
			t.Errorf("event %s: key %q, want order %s", id, rec.Key, order)
		}
		seen[id] = true
	}
	missing := 0
	for id := range want {
		if !seen[id] {
			missing++
		}
	}
	if missing > 0 || len(want) < events {
		t.Errorf("%d of %d events missing from the topic (%d were asked for)", missing, len(want), events)
	}
	if d.Events != len(want) || d.PeakRSSBytes <= 0 || d.RelayCPUPer1000 <= 0 || d.EventsPerSec <= 0 {
		t.Errorf("implausible figures: %+v", d)
	}
}
