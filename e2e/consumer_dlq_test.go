package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// windowRetriesExhausted: an event for an order that does not
// exist exhausts its attempts and is dead-lettered with every dlq header.
// The consumer dies between the DLQ ack and the offset store: nothing is
// lost (the restarted consumer dead-letters it again — a duplicate DLQ
// record). Once the order exists, `dlq replay` republishes it with its
// original event ID and it is applied once; replaying it again changes
// nothing. Then the DLQ is purged.
func windowRetriesExhausted(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	ep := newEventProducer(t, pl)
	ghost := seededOrder{id: uuid.NewString(), customer: "c-ghost", total: 3998}
	ev := createdEvent(ghost)
	ep.send(t, ev)

	crash := []string{"EVENTFORGE_FAILPOINTS=" + failpoint.ConsumerAfterDLQAckBeforeOffset + "=crash"}
	p, _ := consumerProc(t, pl, "fulfillment-crashing", "fulfillment", pl.env.Group, crash, "--max-attempts", "3", "--not-found-grace", "0s")
	if err := p.waitExit(60 * time.Second); err == nil || !p.killedBySIGKILL() {
		t.Fatalf("consumer: exit %v, want death by SIGKILL after the DLQ ack", err)
	}
	es := readDLQEntries(t, pl, topic)
	if len(es) != 1 {
		t.Fatalf("after the crash the DLQ holds %d records, want 1", len(es))
	}
	committed, _, err := testenv.CommittedOffsets(pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	for part, off := range committed {
		if off > 0 {
			t.Fatalf("partition %d committed %d before the crash: the source offset moved past an unacked dead letter", part, off)
		}
	}

	// The restarted consumer retries and dead-letters the event again.
	cons, addr := consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil, "--max-attempts", "3", "--not-found-grace", "0s")
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)
	es = readDLQEntries(t, pl, topic)
	if len(es) != 2 {
		t.Fatalf("DLQ holds %d records, want 2 (the crash may duplicate, never lose, a dead letter)", len(es))
	}
	for _, e := range es {
		var c checker
		c.t = t
		want := map[string]string{
			contract.HeaderID: ev.id, contract.HeaderType: contract.TypeOrderCreated, contract.HeaderContentType: contract.ContentTypeJSON, contract.HeaderCEID: ev.id,
			dlq.HeaderOriginalTopic: pl.env.Topic, dlq.HeaderConsumer: "fulfillment", dlq.HeaderErrorClass: "not_found", dlq.HeaderAttempts: "3",
		}
		for k, v := range want {
			if got := e.Header(k); got != v {
				c.errorf("DLQ record %s: header %s = %q, want %q", e.Position(), k, got, v)
			}
		}
		for _, k := range []string{dlq.HeaderOriginalPartition, dlq.HeaderOriginalOffset, dlq.HeaderErrorMessage, dlq.HeaderFirstFailedAt, dlq.HeaderLastFailedAt, contract.HeaderCETime, contract.HeaderCEType, contract.HeaderCESource, contract.HeaderCESpecVersion} {
			if e.Header(k) == "" {
				c.errorf("DLQ record %s: header %s missing", e.Position(), k)
			}
		}
		if string(e.Key) != ghost.id || string(e.Value) != string(ev.payload) || e.OriginalOffset != 0 || !strings.Contains(e.Message, "not found") {
			c.errorf("DLQ record %s: key %q, offset %d, message %q; want the original record", e.Position(), e.Key, e.OriginalOffset, e.Message)
		}
		c.report()
	}
	if d := readDurable(t, pl, ghost.id, ev.id); d.marks != 0 {
		t.Fatalf("a dead-lettered event left %d marks", d.marks)
	}

	// The operator's view.
	out := eventforge(t, 0, "dlq", "list", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic).Stdout
	if !strings.Contains(out, "2 records held, 2 match") || !strings.Contains(out, "not_found=2") || !strings.Contains(out, ev.id) {
		t.Errorf("dlq list:\n%s", out)
	}
	out = eventforge(t, 0, "dlq", "show", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic, "--event-id", ev.id).Stdout
	if !strings.Contains(out, dlq.HeaderFirstFailedAt) || !strings.Contains(out, ghost.id) {
		t.Errorf("dlq show:\n%s", out)
	}

	// Fix the cause (the order appears), then replay by event ID: the two
	// DLQ records are one event, replayed once, applied once.
	seedOrder(t, pl, ghost)
	out = eventforge(t, 0, "dlq", "replay", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic, "--event-id", ev.id).Stdout
	if !strings.Contains(out, "replayed 1 of 1") {
		t.Errorf("dlq replay:\n%s", out)
	}
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)
	if d := readDurable(t, pl, ghost.id, ev.id); d.status != "processed" || d.marks != 1 || d.shipments != 1 {
		t.Fatalf("after the replay: status %q, marks for event %s %d, shipments %d; want processed/1/1", d.status, ev.id, d.marks, d.shipments)
	}
	recs := recordsByEventID(t, pl)[ev.id]
	if len(recs) != 2 || recs[1].Headers[dlq.HeaderReplaySource] == "" || recs[1].Key != ghost.id {
		t.Fatalf("source topic holds %d records of event %s (want the original and one replay with %s): %+v", len(recs), ev.id, dlq.HeaderReplaySource, recs)
	}

	// Both DLQ records of the event now list as replayed (the replay of
	// the newer one covers the older), none as pending.
	listState := func(state string) string {
		return eventforge(t, 0, "dlq", "list", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic,
			"--database-url", pl.env.DatabaseURL, "--state", state).Stdout
	}
	if out := listState("replayed"); !strings.Contains(out, "2 records held, 2 match") || !strings.Contains(out, "pending=0 replayed=2") {
		t.Errorf("dlq list --state replayed after the replay:\n%s", out)
	}
	if out := listState("pending"); !strings.Contains(out, "2 records held, 0 match") {
		t.Errorf("dlq list --state pending after the replay:\n%s", out)
	}

	// Replaying an applied event changes nothing.
	before := events(mustMetrics(t, addr), "fulfillment", "duplicate")
	eventforge(t, 0, "dlq", "replay", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic, "--all")
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)
	testenv.Eventually(t, 10*time.Second, "replay counted as duplicate", func() error {
		if got := events(mustMetrics(t, addr), "fulfillment", "duplicate"); got != before+1 {
			return fmt.Errorf("duplicate %v, want %v", got, before+1)
		}
		return nil
	})
	if d := readDurable(t, pl, ghost.id, ev.id); d.marks != 1 || d.shipments != 1 {
		t.Fatalf("after replaying an applied event: marks %d, shipments %d; want 1 and 1", d.marks, d.shipments)
	}
	if n := len(readDLQEntries(t, pl, topic)); n != 2 {
		t.Fatalf("DLQ holds %d records after the replays, want 2", n)
	}
	m := mustMetrics(t, addr)
	if v := m.value("eventforge_dlq_events", "topic", topic); v != 2 {
		t.Errorf("eventforge_dlq_events = %v, want 2", v)
	}
	if v := m.value("eventforge_dlq_oldest_age_seconds", "topic", topic); v <= 0 {
		t.Errorf("eventforge_dlq_oldest_age_seconds = %v, want > 0", v)
	}

	// Purge needs --yes: without it, it says what it would delete (a dry
	// run: nothing failed, exit status 0).
	out = eventforge(t, 0, "dlq", "purge", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic, "--all").Stdout
	if !strings.Contains(out, "would delete 2 records") || !strings.Contains(out, "--yes") {
		t.Errorf("purge without --yes: %s", out)
	}
	if n := len(readDLQEntries(t, pl, topic)); n != 2 {
		t.Fatalf("DLQ holds %d records after a purge without --yes, want 2", n)
	}
	eventforge(t, 0, "dlq", "purge", "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap, "--topic", topic, "--database-url", pl.env.DatabaseURL, "--all", "--yes")
	if n := len(readDLQEntries(t, pl, topic)); n != 0 {
		t.Fatalf("DLQ holds %d records after purge", n)
	}
	if out := listState("purged"); !strings.Contains(out, "0 records held, 2 match") || !strings.Contains(out, "purged=2") {
		t.Errorf("dlq list --state purged after the purge:\n%s", out)
	}
	testenv.Eventually(t, 10*time.Second, "dlq gauge after purge", func() error {
		if v := mustMetrics(t, addr).value("eventforge_dlq_events", "topic", topic); v != 0 {
			return fmt.Errorf("eventforge_dlq_events = %v", v)
		}
		return nil
	})
	if lines := errorLines(t, cons); len(lines) != 1 {
		t.Errorf("restarted consumer logged %d errors, want its one dead-letter report:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	verifyConsumersOnly(t, pl)
}

// TestConsumerPoisonRecord: a record whose payload is not JSON sits in the
// middle of a partition. It goes to the DLQ at its first attempt (class
// permanent), and every record behind it is applied.
func TestConsumerPoisonRecord(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	ep := newEventProducer(t, pl)
	orders := seedOrders(t, pl, 40, 5)
	var evs []orderEvent
	poison := orderEvent{id: uuid.NewString(), typ: contract.TypeOrderCreated, key: orders[0].id, payload: []byte(`{"order_id": "` + orders[0].id), partition: 0}
	for i, o := range orders[1:] {
		if i == 20 {
			evs = append(evs, poison)
		}
		ev := createdEvent(o)
		ev.partition = 0
		evs = append(evs, ev)
	}
	ep.send(t, evs...)
	_, addr := consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil, "--batch-size", "16")
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)

	states := fulfillmentStates(t, pl)
	var c checker
	c.t = t
	for _, o := range orders[1:] {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: %+v, want processed with one shipment", o.id, s)
		}
	}
	if s := states[orders[0].id]; s.status != "created" || s.shipments != 0 {
		c.errorf("poisoned order %s: %+v, want untouched", orders[0].id, s)
	}
	c.report()
	es := readDLQEntries(t, pl, topic)
	if len(es) != 1 || es[0].EventID != poison.id || es[0].Class != "permanent" || es[0].Attempts != 1 || es[0].OriginalOffset != 20 {
		t.Fatalf("DLQ: %+v; want the poison record only, class permanent, 1 attempt, offset 20", es)
	}
	m := mustMetrics(t, addr)
	if a, d := events(m, "fulfillment", "applied"), events(m, "fulfillment", "dead_lettered"); a != 39 || d != 1 {
		t.Errorf("events applied %v, dead_lettered %v; want 39 and 1", a, d)
	}
}

// seedOrder inserts one order row in status created.
func seedOrder(t testing.TB, pl *pipeline, o seededOrder) {
	t.Helper()
	if _, err := pl.env.Pool.Exec(context.Background(), `INSERT INTO orders (id, customer_id, currency, total_cents, status) VALUES ($1, $2, 'EUR', $3, 'created')`,
		o.id, o.customer, o.total); err != nil {
		t.Fatal(err)
	}
}
