package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/schema"
)

// checkpointedThenStopped runs a reader until it published an event and
// recorded a checkpoint, and stops it: what is committed next is a gap once
// the slot is lost.
func checkpointedThenStopped(t *testing.T, pl *pipeline) {
	t.Helper()
	reader, metrics := cdcReader(t, pl.env, "cdc-first", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_active", 30*time.Second, "reader active", func(v float64) bool { return v == 1 })
	warm := insertOutboxRow(t, pl.env, uuid.NewString(), contract.TypeOrderCreated, `{"warm": true}`)
	waitEventsInKafka(t, pl.env, []string{warm}, time.Minute)
	waitCheckpointed(t, pl)
	reader.stop()
}

// TestCDCGapRecoveryDeadLetters: a gap holds rows no record can be built
// from (headers that are not a JSON object of strings) and a record over
// the topic's max.message.bytes, beside an innocent order created and
// cancelled in two transactions, and a row its writer deleted in the same
// transaction. The recovery dead-letters the two, publishes the others —
// the innocent order's events in commit order — and streams on: one record
// Kafka can never take does not stop every order, and a deleted row is not
// lost.
func TestCDCGapRecoveryDeadLetters(t *testing.T) {
	pl := newPipeline(t)
	env := pl.env
	const limit = 64 << 10
	setTopicMaxMessageBytes(t, env.Endpoints.KafkaBootstrap, env.Topic, limit)
	checkpointedThenStopped(t, pl)

	ctx := context.Background()
	innocent := uuid.NewString()
	created := insertOutboxRow(t, env, innocent, contract.TypeOrderCreated, `{"innocent": true}`)
	malformed := uuid.NewString()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers) VALUES ($1, 'order', $2, 'OrderCreated', '{}', '["not", "an", "object"]')`,
		malformed, uuid.NewString()); err != nil {
		t.Fatal(err)
	}
	oversized := insertOutboxRow(t, env, keyOnPartitionOf(innocent, 6), contract.TypeOrderCreated, incompressible(4*limit))
	cancelled := insertOutboxRow(t, env, innocent, contract.TypeOrderCancelled, `{"innocent": true}`)
	deleted := uuid.NewString()
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, 'OrderCreated', '{}')`, deleted, uuid.NewString()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, deleted)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.DropSlot(ctx, env.Pool, env.Slot); err != nil {
		t.Fatal(err)
	}

	_, metrics := cdcReader(t, env, "cdc-recovering", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "the gap recovered", func(v float64) bool { return v >= 1 })
	waitEventsInKafka(t, env, []string{created, cancelled, deleted}, time.Minute)
	after := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"after": true}`)
	waitEventsInKafka(t, env, []string{after}, time.Minute)

	var dead []string
	rows, err := env.Pool.Query(ctx, `SELECT event_id FROM cdc_dead_letters ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	if dead, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{malformed: true, oversized: true}
	if len(dead) != 2 || !want[dead[0]] || !want[dead[1]] {
		t.Errorf("dead letters %v, want exactly the malformed %s and the oversized %s", dead, malformed, oversized)
	}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for _, r := range recs {
		if r.Key == innocent {
			seq = append(seq, fmt.Sprintf("%s@%d", r.Headers[contract.HeaderType], r.Offset))
		}
	}
	if len(seq) == 0 || seq[0][:len(contract.TypeOrderCreated)] != contract.TypeOrderCreated {
		t.Errorf("the innocent order's records %v, want its OrderCreated first", seq)
	}
	t.Logf("the innocent order's records: %v; dead letters: %v", seq, dead)
}

// TestCDCGapRecoveryCommitOrder: two transactions of other writers write
// events of one order, the one that commits first with the higher
// transaction ID (the other took its ID earlier and wrote later). A gap
// holding both is republished in commit order, as the stream would have
// delivered them: by commit timestamp (track_commit_timestamp on), not by
// transaction ID.
func TestCDCGapRecoveryCommitOrder(t *testing.T) {
	stack := testenv.NewPrivate(t, testenv.WithoutKafka(), testenv.WithPGSettings("track_commit_timestamp = on"))
	env := stack.EnvOnSharedKafka(t)
	pl := newPipelineOn(t, env)
	checkpointedThenStopped(t, pl)

	ctx := context.Background()
	order := uuid.NewString()
	early, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = early.Rollback(ctx) }()
	var lowXID int64
	if err := early.QueryRow(ctx, `SELECT txid_current()`).Scan(&lowXID); err != nil {
		t.Fatal(err)
	}
	created := insertOutboxRow(t, env, order, contract.TypeOrderCreated, `{}`)
	cancelled := uuid.NewString()
	if _, err := early.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, 'OrderCancelled', '{}')`, cancelled, order); err != nil {
		t.Fatal(err)
	}
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("OrderCreated %s committed first; OrderCancelled %s committed after it in transaction %d, which is older", created, cancelled, lowXID)
	if err := schema.DropSlot(ctx, env.Pool, env.Slot); err != nil {
		t.Fatal(err)
	}

	_, metrics := cdcReader(t, env, "cdc-recovering", nil, gapFlags...)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 2*time.Minute, "the gap recovered", func(v float64) bool { return v >= 1 })
	waitEventsInKafka(t, env, []string{created, cancelled}, time.Minute)
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	for _, r := range recs {
		if r.Key == order {
			seq = append(seq, r.Headers[contract.HeaderType])
		}
	}
	if len(seq) == 0 || seq[0] != contract.TypeOrderCreated {
		t.Fatalf("the order's records %v, want OrderCreated (committed first) first", seq)
	}
	t.Logf("the order's records: %v", seq)
}

// TestCDCSlotReplacedBeforeStreaming: the slot is dropped and created again
// between the reader's check of it and the start of streaming (the
// failpoint holds the reader there), with a row committed before the new
// slot exists. The server would forward the reader silently to the new
// slot's position, past the row; the reader finds out once it holds the
// slot, ends the session, finds the gap and republishes the row.
func TestCDCSlotReplacedBeforeStreaming(t *testing.T) {
	pl := newPipeline(t)
	env := pl.env
	ctx := context.Background()
	reader, metrics := cdcReader(t, env, "cdc", []string{"EVENTFORGE_FAILPOINTS=cdc.before_start_replication=2*delay(5s)"}, gapFlags...)
	// The first session's start is held too; a row committed then is
	// streamed once it starts.
	first := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"first": true}`)
	waitEventsInKafka(t, env, []string{first}, time.Minute)
	waitCheckpointed(t, pl)

	// End the session; the next one is held before it streams.
	if err := terminateSlotReader(ctx, pl); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the next session checked the slot and is held before streaming", func() error {
		log, err := os.ReadFile(reader.Log)
		if err != nil {
			return err
		}
		if n := strings.Count(string(log), `"failpoint":"cdc.before_start_replication"`); n < 2 {
			return fmt.Errorf("the failpoint fired %d times", n)
		}
		return nil
	})
	skipped := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"skipped": true}`)
	if err := schema.DropSlot(ctx, env.Pool, env.Slot); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot); err != nil {
		t.Fatal(err)
	}
	t.Logf("event %s committed before the slot was recreated under the held reader", skipped)
	waitEventsInKafka(t, env, []string{skipped}, time.Minute)
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", time.Minute, "the gap recovered", func(v float64) bool { return v >= 1 })
}

// TestCDCRecoveryNamesWhatItWaitsFor: a prepared transaction nobody
// resolves holds the creation of the recovery's slot — and with it every
// order. The reader says what it waits for, and its leadership turns
// unhealthy (not ready, naming the prepared transaction) instead of
// counting a recovery that cannot progress as healthy; once the
// transaction is resolved the gap is recovered.
func TestCDCRecoveryNamesWhatItWaitsFor(t *testing.T) {
	stack := testenv.NewPrivate(t, testenv.WithoutKafka(), testenv.WithPGSettings("max_prepared_transactions = 4"))
	env := stack.EnvOnSharedKafka(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orphan := uuid.NewString()
	for _, stmt := range []string{
		`BEGIN`,
		fmt.Sprintf(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', '%s', 'OrderCreated', '{}')`, orphan, uuid.NewString()),
		`PREPARE TRANSACTION 'orphaned'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	resolved := false
	t.Cleanup(func() {
		if !resolved {
			_, _ = conn.Exec(context.Background(), `ROLLBACK PREPARED 'orphaned'`)
		}
	})
	if err := schema.DropSlot(ctx, env.Pool, env.Slot); err != nil {
		t.Fatal(err)
	}
	reader, metrics := cdcReader(t, env, "cdc", nil, append([]string{"--unhealthy-after", "5s"}, gapFlags...)...)
	testenv.Eventually(t, time.Minute, "the reader not ready, naming the prepared transaction", func() error {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), "prepared transaction 'orphaned'") {
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, body)
		}
		return nil
	})
	if logCount(t, reader.Log, "creating the replication slot waits for transactions that hold a transaction ID to end") == 0 {
		t.Error("the reader did not log what the slot creation waits for")
	}
	if _, err := conn.Exec(ctx, `COMMIT PREPARED 'orphaned'`); err != nil {
		t.Fatal(err)
	}
	resolved = true
	waitMetric(t, metrics, "eventforge_cdc_gap_recoveries_total", 3*time.Minute, "the gap recovered", func(v float64) bool { return v >= 1 })
	waitEventsInKafka(t, env, []string{orphan}, time.Minute)
}

// TestCDCGapUnderNoCreateSlot: a reader with --no-create-slot that finds a
// gap does not exit (a supervisor would restart it in a loop) and does not
// stream past the gap: it reports the gap and waits. A reader without the
// flag beside it recovers the gap, and the pair goes on.
func TestCDCGapUnderNoCreateSlot(t *testing.T) {
	pl := newPipeline(t)
	env := pl.env
	ctx := context.Background()
	checkpointedThenStopped(t, pl)
	if err := schema.DropSlot(ctx, env.Pool, env.Slot); err != nil {
		t.Fatal(err)
	}
	inGap := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"gap": true}`)

	strict, metrics := cdcReader(t, env, "cdc-no-create", nil, append([]string{"--no-create-slot", "--unhealthy-after", "5s"}, gapFlags...)...)
	waitMetric(t, metrics, "eventforge_cdc_slot_gap", 30*time.Second, "the gap reported", func(v float64) bool { return v == 1 })
	time.Sleep(3 * time.Second)
	select {
	case <-strict.Exited():
		t.Fatalf("the reader with --no-create-slot exited on a gap: %v", strict.Err())
	default:
	}
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Headers[contract.HeaderID] == inGap {
			t.Fatal("the gap's event was published by a reader that may not recover it")
		}
	}
	cdcReader(t, env, "cdc-recovering", nil, gapFlags...)
	waitEventsInKafka(t, env, []string{inGap}, 2*time.Minute)
	after := insertOutboxRow(t, env, uuid.NewString(), contract.TypeOrderCreated, `{"after": true}`)
	waitEventsInKafka(t, env, []string{after}, time.Minute)
	select {
	case <-strict.Exited():
		t.Fatalf("the reader with --no-create-slot exited: %v", strict.Err())
	default:
	}
}
