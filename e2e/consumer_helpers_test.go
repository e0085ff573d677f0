package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// Helpers of the consumer suites (files consumer_*_test.go). Events are
// produced straight to the test's topic with the record contract of the CDC
// reader (key = order ID; headers id, type, CloudEvents, content-type), so
// the suites measure and break the consumers alone.

// consumerProc starts `eventforge consumer --name name` on the test's topic
// in group, serving metrics on a free address it returns.
func consumerProc(t testing.TB, pl *pipeline, proc, name, group string, env []string, extra ...string) (*proc, string) {
	t.Helper()
	addr := testkit.FreeAddr(t)
	args := append([]string{"consumer",
		"--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--name", name, "--group", group, "--topics", pl.env.Topic,
		"--commit-interval", "200ms", "--session-timeout", "6s", "--dlq-stats-interval", "500ms", "--metrics-addr", addr,
		"--initial-backoff", "20ms", "--max-backoff", "200ms", "--log-level", "info"}, extra...)
	return start(t, proc, env, args...), addr
}

// ledgerGroup is the ledger consumer's group of a test; removed at cleanup.
func ledgerGroup(t testing.TB, pl *pipeline) string {
	g := pl.env.Group + "-ledger"
	t.Cleanup(func() { deleteGroups(pl.env.Endpoints.KafkaBootstrap, g) })
	return g
}

func deleteGroups(bootstrap string, groups ...string) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = a.DeleteConsumerGroups(ctx, groups)
}

// dlqTopicOf returns the test's DLQ topic and deletes it at cleanup.
func dlqTopicOf(t testing.TB, pl *pipeline) string {
	topic := dlq.Topic(pl.env.Topic, "")
	t.Cleanup(func() {
		a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "log_level": 3})
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = a.DeleteTopics(ctx, []string{topic})
	})
	return topic
}

// seededOrder is an order row written straight to PostgreSQL.
type seededOrder struct {
	id       string
	customer string
	total    int64
}

// seedOrders inserts n orders in status created for customers c-0..c-(customers-1),
// each with one line of 2 × 1999 EUR.
func seedOrders(t testing.TB, pl *pipeline, n, customers int) []seededOrder {
	t.Helper()
	ctx := context.Background()
	rows, err := pl.env.Pool.Query(ctx, `WITH o AS (
			INSERT INTO orders (id, customer_id, currency, total_cents, status)
			SELECT gen_random_uuid(), 'c-' || (g % $2), 'EUR', 3998, 'created' FROM generate_series(1, $1) g
			RETURNING id, customer_id, total_cents
		), i AS (
			INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents)
			SELECT id, 1, 'SKU-1', 2, 1999 FROM o
		)
		SELECT id::text, customer_id, total_cents FROM o`, n, customers)
	if err != nil {
		t.Fatalf("seeding orders: %v", err)
	}
	var out []seededOrder
	for rows.Next() {
		var o seededOrder
		if err := rows.Scan(&o.id, &o.customer, &o.total); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("seeding orders: %v", err)
	}
	return out
}

// orderEvent is one record to produce.
type orderEvent struct {
	id        string // event ID (header id)
	typ       string
	key       string
	payload   []byte
	partition int32 // kafka.PartitionAny to partition by key
}

func createdEvent(o seededOrder) orderEvent {
	b, err := protojson.Marshal(&eventforgev1.OrderCreated{
		OrderId: o.id, CustomerId: o.customer, Currency: "EUR", TotalCents: o.total,
		Items:      []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999}},
		CreateTime: timestamppb.Now(),
	})
	if err != nil {
		panic(err)
	}
	return orderEvent{id: uuid.NewString(), typ: contract.TypeOrderCreated, key: o.id, payload: b, partition: kafka.PartitionAny}
}

func cancelledEvent(o seededOrder) orderEvent {
	b, err := protojson.Marshal(&eventforgev1.OrderCancelled{OrderId: o.id, CustomerId: o.customer, Reason: "test", CancelTime: timestamppb.Now()})
	if err != nil {
		panic(err)
	}
	return orderEvent{id: uuid.NewString(), typ: contract.TypeOrderCancelled, key: o.id, payload: b, partition: kafka.PartitionAny}
}

// eventProducer produces order events with the CDC reader's record contract.
type eventProducer struct {
	p     *kafka.Producer
	topic string
}

func newEventProducer(t testing.TB, pl *pipeline) *eventProducer {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap,
		"enable.idempotence": true, "acks": "all", "linger.ms": 5, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range p.Events() {
		}
	}()
	t.Cleanup(p.Close)
	return &eventProducer{p: p, topic: pl.env.Topic}
}

// send produces evs and waits until Kafka acknowledged all of them.
func (ep *eventProducer) send(t testing.TB, evs ...orderEvent) {
	t.Helper()
	delivery := make(chan kafka.Event, len(evs))
	for _, ev := range evs {
		ceType := "eventforge.order." + strings.ToLower(strings.TrimPrefix(ev.typ, "Order")) + ".v1"
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &ep.topic, Partition: ev.partition},
			Key:            []byte(ev.key),
			Value:          ev.payload,
			Headers: []kafka.Header{
				{Key: contract.HeaderID, Value: []byte(ev.id)}, {Key: contract.HeaderType, Value: []byte(ev.typ)},
				{Key: contract.HeaderCESpecVersion, Value: []byte(contract.CESpecVersion)}, {Key: contract.HeaderCEID, Value: []byte(ev.id)},
				{Key: contract.HeaderCEType, Value: []byte(ceType)}, {Key: contract.HeaderCESource, Value: []byte("/eventforge/order")},
				{Key: contract.HeaderCETime, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
				{Key: contract.HeaderContentType, Value: []byte(contract.ContentTypeJSON)},
			},
		}
		for {
			err := ep.p.Produce(msg, delivery)
			var kerr kafka.Error
			if errors.As(err, &kerr) && kerr.Code() == kafka.ErrQueueFull {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatalf("producing: %v", err)
			}
			break
		}
	}
	for range evs {
		if m := (<-delivery).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatalf("producing: %v", m.TopicPartition.Error)
		}
	}
}

// waitGroupAtEnd waits until group committed the end of every non-empty
// partition of the test's topic.
func waitGroupAtEnd(t testing.TB, pl *pipeline, group string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, pl.env.Endpoints.KafkaBootstrap, group, pl.env.Topic); err != nil {
		t.Fatalf("group %s never committed the end of %s: %v", group, pl.env.Topic, err)
	}
}

// readDLQEntries reads the DLQ topic; a topic that does not exist yet
// reads as empty.
func readDLQEntries(t testing.TB, pl *pipeline, topic string) []dlq.Entry {
	t.Helper()
	c, err := dlq.NewReader(pl.env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	es, err := dlq.Read(context.Background(), c, topic)
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s: %v", topic, err)
	}
	return es
}

// errorLines returns the ERROR-level lines of a process log.
func errorLines(t testing.TB, p *proc) []string {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, l)
		}
	}
	return out
}

// noErrorLines fails the test for each process that logged at level ERROR.
func noErrorLines(t testing.TB, procs ...*proc) {
	t.Helper()
	for _, p := range procs {
		if lines := errorLines(t, p); len(lines) > 0 {
			t.Errorf("%s logged errors: %v", p.name, lines)
		}
	}
}

// fulfillmentState is what PostgreSQL holds about one order for the
// fulfillment consumer.
type fulfillmentState struct {
	status    string
	shipments int
	cancelled int // shipments with cancelled_at set
}

func fulfillmentStates(t testing.TB, pl *pipeline) map[string]fulfillmentState {
	t.Helper()
	rows, err := pl.env.Pool.Query(context.Background(), `SELECT o.id::text, o.status,
			count(s.id), count(s.cancelled_at)
		FROM orders o LEFT JOIN shipments s ON s.order_id = o.id GROUP BY o.id, o.status`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fulfillmentState{}
	for rows.Next() {
		var id string
		var s fulfillmentState
		if err := rows.Scan(&id, &s.status, &s.shipments, &s.cancelled); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ledgerRow is one customer's ledger.
type ledgerRow struct {
	orders, cancelled          int64
	totalCents, cancelledCents int64
}

func ledgerRows(t testing.TB, pl *pipeline) map[string]ledgerRow {
	t.Helper()
	rows, err := pl.env.Pool.Query(context.Background(), `SELECT customer_id, order_count, total_cents, cancelled_count, cancelled_cents FROM ledger`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledgerRow{}
	for rows.Next() {
		var c string
		var r ledgerRow
		if err := rows.Scan(&c, &r.orders, &r.totalCents, &r.cancelled, &r.cancelledCents); err != nil {
			t.Fatal(err)
		}
		out[c] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// marks counts processed_events rows of consumer.
func marks(t testing.TB, pl *pipeline, consumer string) int {
	t.Helper()
	var n int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_events WHERE consumer = $1`, consumer).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checker accumulates invariant violations and reports them all.
type checker struct {
	t      testing.TB
	errors []string
}

func (c *checker) errorf(format string, args ...any) {
	c.errors = append(c.errors, fmt.Sprintf(format, args...))
}

func (c *checker) report() {
	c.t.Helper()
	const show = 25
	for i, e := range c.errors {
		if i == show {
			c.t.Errorf("… and %d more violations", len(c.errors)-show)
			break
		}
		c.t.Error(e)
	}
}

// outboxOrder writes an order and its OrderCreated outbox row in one
// transaction, as the order API does, for the CDC reader to publish. It
// returns the order and event IDs.
func outboxOrder(t testing.TB, pl *pipeline, customer string) (orderID, eventID string) {
	t.Helper()
	ctx := context.Background()
	o := seededOrder{id: uuid.NewString(), customer: customer, total: 3998}
	ev := createdEvent(o)
	tx, err := pl.env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, currency, total_cents, status) VALUES ($1, $2, 'EUR', $3, 'created')`, o.id, o.customer, o.total); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents) VALUES ($1, 1, 'SKU-1', 2, 1999)`, o.id); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'order', $2, 'OrderCreated', $3)`, ev.id, o.id, string(ev.payload)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return o.id, ev.id
}
