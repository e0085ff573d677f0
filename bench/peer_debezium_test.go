package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// debeziumEventsEnv sets the backlog of TestDebeziumDrainsTheOutboxBacklog
// (default 500), to measure a larger drain by hand.
const debeziumEventsEnv = "EVENTFORGE_BENCH_DEBEZIUM_EVENTS"

// TestDebeziumDrainsTheOutboxBacklog runs the Debezium peer as the peers
// phase does (a Kafka Connect worker process, on a database of its own,
// timed by drainPeer) over a backlog of order transactions committed before
// it starts, and checks that every outbox event is in its topic once, keyed
// by its order ID, with its event ID and type as headers and its payload as
// the value.
func TestDebeziumDrainsTheOutboxBacklog(t *testing.T) {
	events := peerTestEvents(t, debeziumEventsEnv)
	te := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	logDir := t.TempDir()
	r := peerTestRunner(te, logDir)
	relay, err := newDebeziumPeer(ctx, "", r.logger)
	if err != nil {
		t.Fatal(err)
	}
	db, run := preparePeerTest(ctx, t, r, relay, "debezium", events)
	want := outboxEvents(t, db)

	var d relayDrain
	c, err := r.drainPeer(ctx, relay, db, run, len(want), &d)
	if c != nil {
		c.stop()
	}
	if err != nil {
		logTail(t, filepath.Join(logDir, "peer-"+run.name+".log"))
		t.Fatalf("draining with debezium: %v", err)
	}
	t.Logf("%s drained %d events in %.2f s (%.0f events/s), first record after %.2f s, peak RSS %d MiB, "+
		"CPU %.2f s per 1,000 events (start-up included)",
		relay.Version(), d.Events, d.Seconds, d.EventsPerSec, d.FirstRecordSecs, d.PeakRSSBytes>>20, d.RelayCPUPer1000)

	recs, err := testenv.ReadTopic(te.Endpoints.KafkaBootstrap, run.topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < events {
		t.Errorf("the backlog holds %d events, %d were asked for", len(want), events)
	}
	for _, problem := range checkRouted(recs, want) {
		t.Error(problem)
	}
	if d.PeakRSSBytes <= 0 || d.RelayCPUPer1000 <= 0 || d.EventsPerSec <= 0 || d.FirstRecordSecs > d.Seconds {
		t.Errorf("implausible figures: %+v", d)
	}
}

// outboxRow is what the router should publish of one outbox row.
type outboxRow struct{ orderID, eventType, payload string }

// outboxEvents reads the outbox, by event ID.
func outboxEvents(t *testing.T, db *peerDB) map[string]outboxRow {
	t.Helper()
	rows, err := db.pool.Query(t.Context(), `SELECT id::text, aggregateid, type, payload::text FROM outbox`)
	if err != nil {
		t.Fatalf("reading outbox: %v", err)
	}
	defer rows.Close()
	out := map[string]outboxRow{}
	for rows.Next() {
		var id string
		var row outboxRow
		if err := rows.Scan(&id, &row.orderID, &row.eventType, &row.payload); err != nil {
			t.Fatalf("reading outbox: %v", err)
		}
		out[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading outbox: %v", err)
	}
	return out
}

// checkRouted returns every difference between the records and the outbox
// rows: a missing, duplicated or unknown event, a wrong key, type header or
// payload.
func checkRouted(recs []testenv.Record, want map[string]outboxRow) []string {
	var problems []string
	seen := map[string]bool{}
	for _, rec := range recs {
		id := rec.Headers[contract.HeaderID]
		row, ok := want[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("record %d@%d: event id %q is not in the outbox", rec.Partition, rec.Offset, id))
			continue
		case seen[id]:
			problems = append(problems, fmt.Sprintf("event %s published twice", id))
		}
		seen[id] = true
		if rec.Key != row.orderID {
			problems = append(problems, fmt.Sprintf("event %s: key %q, want order id %q", id, rec.Key, row.orderID))
		}
		if got := rec.Headers[contract.HeaderType]; got != row.eventType {
			problems = append(problems, fmt.Sprintf("event %s: type header %q, want %q", id, got, row.eventType))
		}
		if !sameJSON(rec.Value, []byte(row.payload)) {
			problems = append(problems, fmt.Sprintf("event %s: value %s, want payload %s", id, rec.Value, row.payload))
		}
	}
	for id := range want {
		if !seen[id] {
			problems = append(problems, fmt.Sprintf("event %s is not in the topic", id))
		}
	}
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("… and %d more", len(problems)-20))
	}
	return problems
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}

// logTail logs the last lines of a process's log file.
func logTail(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("reading %s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("last lines of %s:\n%s", path, strings.Join(lines[max(0, len(lines)-40):], "\n"))
}
