package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
	"github.com/eventforge/eventforge/verify"
)

// mentions reports whether one of the report's violations names s.
func mentions(rep verify.Report, s string) bool {
	return strings.Contains(strings.Join(rep.Violations, "\n"), s)
}

// TestVerifyAfterOutboxPruned runs the whole pipeline with both consumers,
// then prunes the outbox as the reader's retention does: the audit still
// passes, with no false duplicate. On that pruned deployment it plants, one
// at a time, a second shipment (fulfillment) and a ledger counter one too
// high, each reported as a duplicate effect with exit 1 and removed again;
// a dead letter purged with `dlq purge` is reported as purged, and as lost
// once its purge record is hidden; a stopped consumer makes `--wait` fail;
// and a group offset committed past an event never applied is a loss.
func TestVerifyAfterOutboxPruned(t *testing.T) {
	pl := newPipeline(t)
	dlqTopic := dlqTopicOf(t, pl)
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	ful := pl.startConsumer(t, "fulfillment", nil)
	lgroup := ledgerGroup(t, pl)
	consumerProc(t, pl, "ledger", "ledger", lgroup, nil)
	client := grpcClient(t, pl.grpcAddr)
	ctx := context.Background()
	consumers := []string{"--consumer", "fulfillment=" + pl.env.Group, "--consumer", "ledger=" + lgroup}
	audit := func(t *testing.T, flags ...string) (verify.Report, int) {
		t.Helper()
		return runVerifyArgs(t, pl, append(append([]string{}, consumers...), flags...)...)
	}
	mustPass := func(t *testing.T, what string) verify.Report {
		t.Helper()
		rep, code := audit(t, "--wait", "90s")
		if code != 0 || !rep.Drained || !rep.OK() {
			t.Fatalf("%s: exit %d, report %+v; want exit 0 and no failure", what, code, rep)
		}
		return rep
	}

	var orders, events []string
	for i := range 6 {
		orderID, eventID := createGRPC(t, client, fmt.Sprintf("verify-pruned-%d", i%2))
		waitProcessed(t, pl, orderID, eventID)
		orders, events = append(orders, orderID), append(events, eventID)
	}
	for _, id := range orders[:2] {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := client.CancelOrder(cctx, &eventforgev1.CancelOrderRequest{OrderId: id, Reason: "verify"})
		cancel()
		if err != nil {
			t.Fatalf("cancelling %s: %v", id, err)
		}
	}
	before := mustPass(t, "healthy pipeline")
	if before.LogicalEvents != 8 || before.BusinessChanges["fulfillment"] != 8 || before.BusinessChanges["ledger"] != 8 {
		t.Fatalf("healthy pipeline: %d events, changes %v; want 8 events, 8 changes per consumer", before.LogicalEvents, before.BusinessChanges)
	}

	// The reader's pruning: DELETE outbox rows past the retention — here
	// all — saying so to the deletion trigger, which keeps nothing then.
	var pruneCount int64
	err := pgx.BeginFunc(ctx, pl.env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('eventforge.outbox_pruning', 'on', true)`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM outbox`)
		pruneCount = tag.RowsAffected()
		return err
	})
	if err != nil || pruneCount != 8 {
		t.Fatalf("pruning the outbox: %v (%d rows)", err, pruneCount)
	}
	pruned := mustPass(t, "outbox pruned")
	if pruned.LogicalEvents != 0 || pruned.Deliveries != 8 || pruned.BusinessChanges["ledger"] != 8 || pruned.BusinessChanges["fulfillment"] != 8 ||
		pruned.UnattributedMarks["ledger"] != 0 || pruned.UnattributedMarks["fulfillment"] != 0 {
		t.Fatalf("outbox pruned: %+v; want 0 logical events, 8 deliveries, 8 changes per consumer, every mark attributed from Kafka", pruned)
	}

	t.Run("duplicate effect in fulfillment", func(t *testing.T) {
		var id int64
		if err := pl.env.Pool.QueryRow(ctx, `INSERT INTO shipments (order_id) VALUES ($1) RETURNING id`, orders[4]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		rep, code := audit(t, "--wait", "30s")
		if code != 1 || rep.DuplicateEffects != 1 || !mentions(rep, "fulfillment: duplicate effect: order "+orders[4]) {
			t.Fatalf("second shipment of %s: exit %d, duplicate effects %d, violations %v; want exit 1 and the order named", orders[4], code, rep.DuplicateEffects, rep.Violations)
		}
		if _, err := pl.env.Pool.Exec(ctx, `DELETE FROM shipments WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("duplicate effect in the ledger", func(t *testing.T) {
		if _, err := pl.env.Pool.Exec(ctx, `UPDATE ledger SET order_count = order_count + 1 WHERE customer_id = 'verify-pruned-1'`); err != nil {
			t.Fatal(err)
		}
		rep, code := audit(t, "--wait", "30s")
		if code != 1 || rep.DuplicateEffects != 1 || !mentions(rep, "ledger: duplicate effect: ledger counts 4 orders of verify-pruned-1/USD for 3 marks") {
			t.Fatalf("ledger counter one too high: exit %d, duplicate effects %d, violations %v; want exit 1 and the customer named", code, rep.DuplicateEffects, rep.Violations)
		}
		if _, err := pl.env.Pool.Exec(ctx, `UPDATE ledger SET order_count = order_count - 1 WHERE customer_id = 'verify-pruned-1'`); err != nil {
			t.Fatal(err)
		}
	})
	mustPass(t, "planted duplicates removed")

	t.Run("purged dead letter", func(t *testing.T) {
		// An event type no consumer knows, in its order's partition.
		created := recordsByEventID(t, pl)[events[5]]
		if len(created) != 1 {
			t.Fatalf("order %s: %d records of its OrderCreated", orders[5], len(created))
		}
		poison := orderEvent{id: uuid.NewString(), typ: "OrderShipped", key: orders[5], payload: []byte(`{}`), partition: created[0].Partition}
		newEventProducer(t, pl).send(t, poison)
		testenv.Eventually(t, 60*time.Second, "poison record dead-lettered by both consumers", func() error {
			if n := len(readDLQEntries(t, pl, dlqTopic)); n != 2 {
				return fmt.Errorf("DLQ holds %d records", n)
			}
			return nil
		})
		rep := mustPass(t, "dead-lettered")
		if rep.DeadLettered["fulfillment"] != 1 || rep.DeadLettered["ledger"] != 1 {
			t.Fatalf("dead-lettered %v, want one per consumer", rep.DeadLettered)
		}
		eventforge(t, 0, "dlq", "purge", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", dlqTopic, "--database-url", pl.env.DatabaseURL, "--all", "--yes")
		if n := len(readDLQEntries(t, pl, dlqTopic)); n != 0 {
			t.Fatalf("DLQ holds %d records after the purge", n)
		}
		rep = mustPass(t, "purged")
		if rep.Purged["fulfillment"] != 1 || rep.Purged["ledger"] != 1 || rep.DeadLettered["fulfillment"]+rep.DeadLettered["ledger"] != 0 {
			t.Fatalf("purged %v, dead-lettered %v; want one purged per consumer, none dead-lettered", rep.Purged, rep.DeadLettered)
		}

		// Without its purge records the event would be lost by both.
		if _, err := pl.env.Pool.Exec(ctx, `UPDATE dlq_purged SET dlq_topic = dlq_topic || '.hidden'`); err != nil {
			t.Fatal(err)
		}
		rep, code := audit(t, "--wait", "30s")
		if code != 1 || rep.Lost != 2 || !mentions(rep, poison.id) {
			t.Fatalf("purge records hidden: exit %d, lost %d, violations %v; want exit 1 and event %s lost by both consumers", code, rep.Lost, rep.Violations, poison.id)
		}
		if _, err := pl.env.Pool.Exec(ctx, `UPDATE dlq_purged SET dlq_topic = left(dlq_topic, -length('.hidden'))`); err != nil {
			t.Fatal(err)
		}
		mustPass(t, "purge records restored")
	})

	// The fulfillment consumer stops; an order arrives that only the ledger
	// applies.
	ful.stop()
	orderID, eventID := createGRPC(t, client, "verify-pruned-late")
	waitPublished(t, pl, eventID)

	t.Run("not drained within --wait", func(t *testing.T) {
		rep, code := audit(t, "--wait", "2s")
		if code != 1 || rep.Drained || !rep.ContractKept() || rep.Pending["fulfillment"] != 1 {
			t.Fatalf("fulfillment stopped: exit %d, drained %v, pending %v, violations %v; want exit 1, not drained, one pending, no violation",
				code, rep.Drained, rep.Pending, rep.Violations)
		}
	})

	t.Run("event lost by a consumer", func(t *testing.T) {
		commitToEnd(t, pl)
		rep, code := audit(t, "--wait", "60s")
		if code != 1 || rep.Lost != 1 || !rep.Drained || !mentions(rep, "lost: consumer fulfillment") || !mentions(rep, eventID) {
			t.Fatalf("offset committed past %s (order %s): exit %d, lost %d, drained %v, violations %v; want exit 1 and the event lost by fulfillment",
				eventID, orderID, code, rep.Lost, rep.Drained, rep.Violations)
		}
	})
}

// TestVerifyRelayLost plants an event the relay never publishes: an outbox
// row committed an hour ago with no reader running is unpublished beyond the
// grace (exit 1; within a longer grace, exit 0); once the slot is
// confirmed past it and a reader runs on, it is lost.
func TestVerifyRelayLost(t *testing.T) {
	pl := newPipeline(t)
	ctx := context.Background()
	orderID, eventID := uuid.NewString(), uuid.NewString()
	_, err := pl.env.Pool.Exec(ctx, `WITH o AS (
			INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at) VALUES ($1, 'verify-relay', 'EUR', 100, 'created', now() - interval '1 hour'))
		INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at)
		VALUES ($2, 'order', $1, 'OrderCreated', '{}', now() - interval '1 hour')`, orderID, eventID)
	if err != nil {
		t.Fatal(err)
	}
	consumers := []string{"--consumer", "fulfillment=" + pl.env.Group}

	rep, code := runVerifyArgs(t, pl, append(consumers, "--wait", "0s", "--grace", "2h")...)
	if code != 0 || rep.Unpublished != 1 || rep.UnpublishedPastGrace != 0 {
		t.Fatalf("within a 2 h grace: exit %d, unpublished %d, past the grace %d (%v); want exit 0, 1 unpublished", code, rep.Unpublished, rep.UnpublishedPastGrace, rep.Violations)
	}
	rep, code = runVerifyArgs(t, pl, append(consumers, "--wait", "0s")...)
	if code != 1 || rep.UnpublishedPastGrace != 1 || rep.Lost != 0 || !mentions(rep, "unpublished: outbox event "+eventID) {
		t.Fatalf("beyond the default grace: exit %d, past the grace %d, lost %d, violations %v; want exit 1 and the event named", code, rep.UnpublishedPastGrace, rep.Lost, rep.Violations)
	}

	// The slot confirmed past the event, which never reached Kafka.
	if _, err := pl.env.Pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, pl.env.Slot); err != nil {
		t.Fatalf("advancing the slot: %v", err)
	}
	pl.startCDC(t, "cdc", nil)
	rep, code = runVerifyArgs(t, pl, append(consumers, "--wait", "60s")...)
	if code != 1 || !rep.Drained || rep.Lost != 1 || rep.UnpublishedPastGrace != 0 || !mentions(rep, "lost: outbox event "+eventID) {
		t.Fatalf("slot past the event: exit %d, drained %v, lost %d, past the grace %d, violations %v; want exit 1 and the event lost",
			code, rep.Drained, rep.Lost, rep.UnpublishedPastGrace, rep.Violations)
	}
}

// TestVerifyOrdering plants records of one order out of order in Kafka —
// its OrderCancelled before its OrderCreated in one partition, with no
// outbox rows to compare with (pruned) — beside an order whose records are
// in order: the first is an ordering violation, exit 1; the second is not.
func TestVerifyOrdering(t *testing.T) {
	pl := newPipeline(t)
	orders := seedOrders(t, pl, 2, 2)
	bad, good := orders[0], orders[1]
	cancelBad, createBad := cancelledEvent(bad), createdEvent(bad)
	cancelBad.partition, createBad.partition = 2, 2
	createGood, cancelGood := createdEvent(good), cancelledEvent(good)
	createGood.partition, cancelGood.partition = 3, 3
	ep := newEventProducer(t, pl)
	for _, ev := range []orderEvent{cancelBad, createBad, createGood, cancelGood} {
		ep.send(t, ev) // one at a time: each acknowledged before the next
	}

	rep, code := runVerifyArgs(t, pl, "--consumer", "fulfillment="+pl.env.Group, "--wait", "0s")
	if code != 1 || rep.OrderingViolations != 1 || !mentions(rep, "OrderCancelled "+cancelBad.id+" of order "+bad.id) || mentions(rep, good.id) {
		t.Fatalf("cancel before create: exit %d, ordering violations %d, violations %v; want exit 1 and order %s only", code, rep.OrderingViolations, rep.Violations, bad.id)
	}
}

// TestVerifyRelayDeadLetter plants what the relay leaves when Kafka refuses
// a record permanently: an order's OrderCreated in the outbox and in
// cdc_dead_letters, written in one transaction, with the slot confirmed past
// it; the relay then publishes the order's OrderCancelled and another
// order. The audit reports the refused event as dead-lettered by the relay
// and names the replay command: exit 1, the contract kept, nothing lost or
// unpublished. Once `eventforge outbox dead-letters replay` publishes it
// with its original event ID (after the OrderCancelled of its order, as
// docs/cdc.md says), the audit passes: no ordering violation for the
// replayed event, every event applied.
func TestVerifyRelayDeadLetter(t *testing.T) {
	pl := newPipeline(t)
	ctx := context.Background()
	orders := seedOrders(t, pl, 2, 2)
	refused := createdEvent(orders[0])
	_, err := pl.env.Pool.Exec(ctx, `WITH o AS (
			INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, $3, $4::jsonb)
			RETURNING id, aggregatetype, aggregateid, type, payload, headers, created_at)
		INSERT INTO cdc_dead_letters (event_id, slot, lsn, topic, aggregatetype, aggregateid, type, payload, headers, created_at, error_code, error)
		SELECT id::text, $5, pg_current_wal_lsn(), $6, aggregatetype, aggregateid, type, payload::text, headers::text, created_at,
			'MSG_SIZE_TOO_LARGE', 'Broker: Message size too large' FROM o`,
		refused.id, refused.key, refused.typ, string(refused.payload), pl.env.Slot, pl.env.Topic)
	if err != nil {
		t.Fatalf("planting the dead letter: %v", err)
	}
	// The relay confirms past a dead-lettered event once its row is written.
	if _, err := pl.env.Pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, pl.env.Slot); err != nil {
		t.Fatalf("advancing the slot: %v", err)
	}
	pl.startCDC(t, "cdc", nil)
	pl.startConsumer(t, "fulfillment", nil)
	later := []orderEvent{cancelledEvent(orders[0]), createdEvent(orders[1])}
	for _, ev := range later {
		if _, err := pl.env.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, $3, $4::jsonb)`,
			ev.id, ev.key, ev.typ, string(ev.payload)); err != nil {
			t.Fatal(err)
		}
	}
	consumers := []string{"--consumer", "fulfillment=" + pl.env.Group}

	rep, code := runVerifyArgs(t, pl, append(consumers, "--wait", "60s")...)
	if code != 1 || !rep.Drained || rep.RelayDeadLettered != 1 || !rep.ContractKept() || rep.Lost != 0 || rep.Unpublished != 0 ||
		rep.UnpublishedPastGrace != 0 || rep.Deliveries != 2 || rep.BusinessChanges["fulfillment"] != 1 ||
		!mentions(rep, "dead-lettered by the relay: event "+refused.id) || !mentions(rep, verify.ReplayDeadLettersCommand) {
		t.Fatalf("relay dead letter pending: exit %d, report %+v; want exit 1, drained, one relay dead letter named with the replay command, 2 deliveries, 1 change, contract kept",
			code, rep)
	}
	table := eventforge(t, 1, append([]string{"verify", "--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--topic", pl.env.Topic, "--slot", pl.env.Slot}, consumers...)...).Stdout
	if !strings.Contains(table, "FAILED: dead-lettered by the relay 1 (replay with `"+verify.ReplayDeadLettersCommand+"`") {
		t.Fatalf("table output does not fail on the relay dead letter with the replay command:\n%s", table)
	}

	out := eventforge(t, 0, "outbox", "dead-letters", "replay", "--database-url", pl.env.DatabaseURL,
		"--kafka-brokers", pl.env.Endpoints.KafkaBootstrap).Stdout
	if !strings.Contains(out, "replayed 1 of 1") {
		t.Fatalf("replay: %q, want one dead letter replayed", out)
	}
	byID := recordsByEventID(t, pl)
	if r, c := byID[refused.id], byID[later[0].id]; len(r) != 1 || len(c) != 1 || r[0].Partition != c[0].Partition || r[0].Offset < c[0].Offset {
		t.Fatalf("replayed OrderCreated %v, OrderCancelled %v of order %s: want each once, the replay after the cancel in one partition", r, c, refused.key)
	}
	rep, code = runVerifyArgs(t, pl, append(consumers, "--wait", "60s")...)
	if code != 0 || !rep.OK() || rep.RelayDeadLettered != 0 || rep.RelayReplayed != 1 || rep.OrderingViolations != 0 ||
		rep.LogicalEvents != 3 || rep.Deliveries != 3 || rep.Pending["fulfillment"] != 0 {
		t.Fatalf("after the replay: exit %d, report %+v; want exit 0, one replayed dead letter, 3 events delivered and applied, no ordering violation", code, rep)
	}
	if !eventProcessed(t, pl, refused.id) {
		t.Fatalf("replayed event %s has no fulfillment mark", refused.id)
	}
}
