package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/childproc"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// TestCDCCrashMidTransaction: a 1,000-event transaction; the reader is
// SIGKILLed after part of it was acknowledged by Kafka and before its COMMIT
// was processed. The restarted reader delivers every event (duplicates
// allowed), none missing, each order's events in commit order in one
// partition.
func TestCDCCrashMidTransaction(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	// A small in-flight bound makes the reader wait for acknowledgements
	// inside the transaction, so the failpoint fires with part of it acked
	// and most of it not yet produced.
	crashing, _ := cdcReader(t, env, "cdc-crashing",
		[]string{"EVENTFORGE_FAILPOINTS=" + failpoint.CDCMidTransaction + "=crash"}, "--max-inflight-events", "50")

	insertEvents(ctx, t, env.Pool, 1000, 40)
	// The transaction's commit ends at or before this position. While idle,
	// the reader may confirm WAL written before the commit (keepalive WAL
	// end), never the transaction itself.
	afterCommit := currentLSN(t, env)

	if err := crashing.waitExit(60 * time.Second); err == nil || !crashing.killedBySIGKILL() {
		t.Fatalf("cdc with %s armed: exit %v, want death by SIGKILL", failpoint.CDCMidTransaction, err)
	}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || len(recs) >= 1000 {
		t.Fatalf("after the crash: %d records in Kafka, want part of the transaction (1..999)", len(recs))
	}
	if after, err := slotConfirmed(env); err != nil || after >= afterCommit {
		t.Fatalf("after the crash: confirmed_flush_lsn %s (err %v), want it before the transaction's commit (< %s)", after, err, afterCommit)
	}
	t.Logf("crashed with %d of 1000 events acknowledged in Kafka", len(recs))

	cdcReader(t, env, "cdc-restarted", nil)
	c := waitDelivered(t, env, 2*time.Minute)
	if c.Duplicates == 0 {
		t.Errorf("no duplicates after a crash with %d events acknowledged: the transaction was not republished from the confirmed LSN", len(recs))
	}
}

// TestCDCIdleWAL: 50 MB of WAL written to another table with no outbox insert;
// the reader confirms the server's WAL end, so the slot lag falls under 1 MB.
func TestCDCIdleWAL(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	_, metrics := cdcReader(t, env, "cdc", nil)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })

	if _, err := env.Pool.Exec(ctx, `CREATE TABLE filler (id bigint GENERATED ALWAYS AS IDENTITY, body text)`); err != nil {
		t.Fatal(err)
	}
	start := currentLSN(t, env)
	for currentLSN(t, env)-start < 50<<20 {
		if _, err := env.Pool.Exec(ctx, `INSERT INTO filler (body) SELECT md5(g::text) || md5(random()::text) FROM generate_series(1, 50000) g`); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Now()
	end := currentLSN(t, env)
	t.Logf("wrote %.1f MB of WAL to another table", float64(end-start)/(1<<20))

	testenv.Eventually(t, 2*time.Minute, "slot lag under 1 MB", func() error {
		st, err := schema.ReadSlotStatus(ctx, env.Pool, env.Slot)
		if err != nil {
			return err
		}
		lag := st.LagBytes
		if lag >= 1<<20 {
			return fmt.Errorf("slot lag %d bytes", lag)
		}
		return nil
	})
	t.Logf("slot lag under 1 MB %.1f s after the WAL was written", time.Since(written).Seconds())
	waitMetric(t, metrics, "eventforge_cdc_slot_lag_bytes", 30*time.Second, "lag metric under 1 MB", func(v float64) bool { return v < 1<<20 })
	waitMetric(t, metrics, "eventforge_cdc_replication_lag_seconds", 30*time.Second, "heartbeat round trip measured", func(v float64) bool { return v > 0 && v < 5 })
	if recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic); err != nil || len(recs) != 0 {
		t.Fatalf("topic holds %d records (err %v); the filler table must not be published", len(recs), err)
	}
}

// TestCDCLargeTransaction: a single 200,000-row outbox transaction is
// streamed with bounded memory; the reader's peak RSS stays within 128 MB.
func TestCDCLargeTransaction(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	reader, metrics := cdcReader(t, env, "cdc", nil)
	insertEvents(ctx, t, env.Pool, 200_000, 1000)
	begin := time.Now()
	end := currentLSN(t, env)
	waitConfirmedPast(t, env, end, 5*time.Minute, "the transaction")
	secs := time.Since(begin).Seconds()
	u, err := childproc.ReadUsage(reader.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The Go heap beside the peak RSS tells, when the bound is missed,
	// whether Go or the C side (librdkafka, malloc arenas) grew.
	goHeap, _ := scrape(metrics, "go_memstats_heap_sys_bytes")
	t.Logf("200,000-event transaction published and confirmed in %.1f s (%.0f events/s); cdc peak RSS %.1f MiB (Go heap %.1f MiB, %d threads)",
		secs, 200_000/secs, float64(u.PeakRSSBytes)/(1<<20), goHeap/(1<<20), u.Threads)
	if u.PeakRSSBytes > 128<<20 {
		t.Errorf("cdc peak RSS %.1f MiB, want at most 128 MiB", float64(u.PeakRSSBytes)/(1<<20))
	}
	waitDelivered(t, env, 2*time.Minute)
}

// TestCDCDrainBacklog measures how fast the reader drains a backlog of
// 100,000 one-event transactions committed while it was stopped, and its
// peak RSS (figures for the report; no timing is asserted).
func TestCDCDrainBacklog(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `SET synchronous_commit = off`)
	if err == nil {
		_, err = conn.Conn().Exec(ctx, `DO $$
			BEGIN
				FOR i IN 1..100000 LOOP
					INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
					VALUES (gen_random_uuid(), 'order', gen_random_uuid()::text, 'OrderCreated',
						jsonb_build_object('seq', 0, 'pad', repeat('x', 150)));
					COMMIT;
				END LOOP;
			END $$`, pgx.QueryExecModeSimpleProtocol)
	}
	conn.Release()
	if err != nil {
		t.Fatalf("writing the backlog: %v", err)
	}
	end := currentLSN(t, env)

	begin := time.Now()
	reader, _ := cdcReader(t, env, "cdc", nil)
	waitConfirmedPast(t, env, end, 5*time.Minute, "the backlog's end")
	secs := time.Since(begin).Seconds()
	u, err := childproc.ReadUsage(reader.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drained 100,000 one-event transactions in %.1f s from process start: %.0f events/s; cdc peak RSS %.1f MiB",
		secs, 100_000/secs, float64(u.PeakRSSBytes)/(1<<20))
	c := waitDelivered(t, env, 2*time.Minute)
	if c.Events != 100_000 {
		t.Fatalf("outbox holds %d events, want 100000", c.Events)
	}
}

// TestCDCSlotCommands: `slot status` shows the slot and its holder; `slot
// drop` refuses without --yes and while a reader holds the slot, and drops
// it otherwise.
func TestCDCSlotCommands(t *testing.T) {
	env := testenv.New(t)
	base := []string{"--database-url", env.DatabaseURL, "--slot", env.Slot}
	reader, metrics := cdcReader(t, env, "cdc", nil)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })

	out := eventforge(t, 0, append([]string{"slot", "status"}, base...)...).Combined
	for _, want := range []string{env.Slot, "confirmed_flush_lsn", "restart_lsn", "lag", "retained WAL", "pid "} {
		if !strings.Contains(out, want) {
			t.Errorf("slot status lacks %q:\n%s", want, out)
		}
	}
	if out := eventforge(t, 1, append([]string{"slot", "drop"}, base...)...).Combined; !strings.Contains(out, "--yes") {
		t.Errorf("slot drop without --yes: %s", out)
	}
	if out := eventforge(t, 1, append([]string{"slot", "drop", "--yes"}, base...)...).Combined; !strings.Contains(out, "active") {
		t.Errorf("slot drop of an active slot: %s", out)
	}
	reader.stop()
	testenv.Eventually(t, 30*time.Second, "slot released", func() error {
		if st, err := schema.ReadSlotStatus(context.Background(), env.Pool, env.Slot); err != nil || st.Active {
			return fmt.Errorf("active %v, err %v", st.Active, err)
		}
		return nil
	})
	eventforge(t, 0, append([]string{"slot", "drop", "--yes"}, base...)...)
	if _, err := schema.ReadSlotStatus(context.Background(), env.Pool, env.Slot); !errors.Is(err, schema.ErrSlotNotFound) {
		t.Fatalf("after slot drop: slot %s read with err %v, want it not found", env.Slot, err)
	}
	eventforge(t, 1, append([]string{"slot", "status"}, base...)...)
}

// TestCDCOutboxReplay republishes stored events by ID and by time range with
// their original IDs and keys.
func TestCDCOutboxReplay(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	ids := insertEvents(ctx, t, env.Pool, 30, 10)
	base := []string{"outbox", "replay", "--database-url", env.DatabaseURL, "--kafka-brokers", env.Endpoints.KafkaBootstrap,
		"--topic", "order=" + env.Topic, "--no-progress"}

	eventforge(t, 0, append(base, "--event-id", ids[3], "--event-id", ids[7])...)
	by := map[string]int{}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		by[r.Headers[contract.HeaderID]]++
	}
	if len(recs) != 2 || by[ids[3]] != 1 || by[ids[7]] != 1 {
		t.Fatalf("replay by ID: records %v, want one each of %s and %s", by, ids[3], ids[7])
	}

	out := eventforge(t, 0, append(base, "--since", time.Now().Add(-time.Hour).Format(time.RFC3339), "--until", time.Now().Add(time.Minute).Format(time.RFC3339))...).Combined
	if !strings.Contains(out, "replayed 30 of 30") {
		t.Errorf("replay by time range: %s", out)
	}
	recs, err = testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	orderOf := map[string]string{}
	for _, e := range storedEvents(t, env.Pool) {
		orderOf[e.id] = e.order
	}
	clear(by)
	for _, r := range recs {
		id := r.Headers[contract.HeaderID]
		by[id]++
		if r.Key != orderOf[id] || r.Headers[contract.HeaderCEID] != id {
			t.Errorf("replayed record %d@%d: key %q, ce_id %q; want the original order %q and event ID %q", r.Partition, r.Offset, r.Key, r.Headers[contract.HeaderCEID], orderOf[id], id)
		}
	}
	for i, id := range ids {
		want := 1
		if i == 3 || i == 7 {
			want = 2
		}
		if by[id] != want {
			t.Errorf("event %s: %d records after both replays, want %d", id, by[id], want)
		}
	}
	if out := eventforge(t, 1, append(base, "--event-id", "0195f5a8-0000-7000-8000-000000000000")...).Combined; !strings.Contains(out, "not found") {
		t.Errorf("replay of an unknown ID: %s", out)
	}
	// A row its writer deleted is kept in outbox_deleted, and replayed from
	// there.
	gone := ids[5]
	if _, err := env.Pool.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	eventforge(t, 0, append(base, "--event-id", gone)...)
	recs, err = testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Headers[contract.HeaderID] == gone {
			n++
		}
	}
	if n != 2 {
		t.Errorf("event %s, deleted by its writer: %d records after its replay, want 2", gone, n)
	}
}

// TestCDCOutboxRetention: the active reader deletes rows past the retention
// and keeps newer ones.
func TestCDCOutboxRetention(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	insertEvents(ctx, t, env.Pool, 25, 5)
	if _, err := env.Pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	insertEvents(ctx, t, env.Pool, 5, 5)
	// Two rows deleted by their writer: kept in outbox_deleted, the old one
	// pruned like an outbox row.
	deleted := insertEvents(ctx, t, env.Pool, 2, 2)
	if _, err := env.Pool.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1::uuid[])`, deleted); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE outbox_deleted SET created_at = now() - interval '2 hours' WHERE id = $1`, deleted[0]); err != nil {
		t.Fatal(err)
	}
	cdcReader(t, env, "cdc", nil, "--outbox-retention", "1h", "--outbox-prune-interval", "1s", "--outbox-prune-batch", "7")
	testenv.Eventually(t, time.Minute, "old rows pruned", func() error {
		var old, fresh, kept int
		var keptID string
		err := env.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < now() - interval '1 hour'), count(*) FILTER (WHERE created_at >= now() - interval '1 hour'),
			(SELECT count(*) FROM outbox_deleted), (SELECT coalesce(min(id::text), '') FROM outbox_deleted) FROM outbox`).Scan(&old, &fresh, &kept, &keptID)
		if err != nil {
			return err
		}
		// The retention's own deletes are not kept.
		if old != 0 || fresh != 5 || kept != 1 || keptID != deleted[1] {
			return fmt.Errorf("%d old rows, %d fresh rows, %d kept deleted rows (%s); want 0, 5 and only %s", old, fresh, kept, keptID, deleted[1])
		}
		return nil
	})
}
