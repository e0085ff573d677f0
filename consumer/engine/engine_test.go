package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// These tests run the runtime in-process against the real PostgreSQL and
// Kafka of the local stack, with a hand-written handler that records every
// application in a table of its own, in order.

const effectsDDL = `CREATE TABLE test_effects (
	seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id uuid NOT NULL,
	key      text NOT NULL,
	payload  text NOT NULL
)`

// fakeHandler records each application in test_effects. fail, when set,
// returns an error to inject for an event (before anything is written).
type fakeHandler struct {
	fail func(ev Event) error
}

func (h fakeHandler) Apply(ctx context.Context, tx pgx.Tx, ev Event) error {
	if string(ev.Payload) == "poison" {
		return fmt.Errorf("%w: payload is not JSON", ErrMalformed)
	}
	if h.fail != nil {
		if err := h.fail(ev); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, key, payload) VALUES ($1, $2, $3)`, ev.ID, ev.Key, string(ev.Payload))
	return err
}

// batchingHandler is fakeHandler as a Batcher: a batch's inserts go out in
// one pipeline. A record whose payload is "late-poison" fails in its
// statement's result callback, after the pipeline was sent.
type batchingHandler struct{ fakeHandler }

func (h batchingHandler) Apply(ctx context.Context, tx pgx.Tx, ev Event) error {
	if string(ev.Payload) == "late-poison" {
		return fmt.Errorf("%w: rejected by its statement", ErrInvalid)
	}
	return h.fakeHandler.Apply(ctx, tx, ev)
}

func (h batchingHandler) Queue(b *pgx.Batch, ev Event) error {
	if string(ev.Payload) == "poison" {
		return fmt.Errorf("%w: payload is not JSON", ErrMalformed)
	}
	b.Queue(`INSERT INTO test_effects (event_id, key, payload) VALUES ($1, $2, $3)`, ev.ID, ev.Key, string(ev.Payload)).
		Exec(func(pgconn.CommandTag) error {
			if string(ev.Payload) == "late-poison" {
				return fmt.Errorf("%w: rejected by its statement", ErrInvalid)
			}
			return nil
		})
	return nil
}

type record struct {
	partition int32
	key       string
	id        uuid.UUID
	payload   string
}

func produce(t *testing.T, bootstrap, topic string, recs []record) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "enable.idempotence": true, "acks": "all", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	delivery := make(chan kafka.Event, len(recs))
	for _, r := range recs {
		err := p.Produce(&kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: r.partition},
			Key:            []byte(r.key),
			Value:          []byte(r.payload),
			Headers:        []kafka.Header{{Key: contract.HeaderID, Value: []byte(r.id.String())}, {Key: contract.HeaderType, Value: []byte("TestEvent")}},
		}, delivery)
		if err != nil {
			t.Fatal(err)
		}
	}
	for range recs {
		if m := (<-delivery).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
}

type harness struct {
	env  *testenv.Env
	name string
	rt   *Runtime
	stop func()
}

// start runs a runtime named after the test on env's topic and group.
func start(t *testing.T, env *testenv.Env, s Settings, h Handler) *harness {
	t.Helper()
	return startOn(t, env, PoolDB{env.Pool}, s, h)
}

// startOn is start with the runtime's transactions and probes on db.
func startOn(t *testing.T, env *testenv.Env, db DB, s Settings, h Handler) *harness {
	t.Helper()
	opts := Options{Settings: s}
	if _, err := env.Pool.Exec(context.Background(), effectsDDL); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	opts.Name = strings.ToLower(strings.NewReplacer("/", "_").Replace(t.Name()))
	opts.Group, opts.Topics, opts.Bootstrap = env.Group, []string{env.Topic}, env.Endpoints.KafkaBootstrap
	opts.CommitInterval = 200 * time.Millisecond
	opts.InitialBackoff, opts.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	rt := New(opts, db, h, logger)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = rt.Run(ctx) })
	stop := sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("runtime: %v", runErr)
		}
	})
	t.Cleanup(stop)
	t.Cleanup(func() { deleteTopic(t, env.Endpoints.KafkaBootstrap, dlq.Topic(env.Topic, "")) })
	return &harness{env: env, name: opts.Name, rt: rt, stop: stop}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func deleteTopic(t *testing.T, bootstrap, topic string) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		t.Error(err)
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = a.DeleteTopics(ctx, []string{topic})
}

func (h *harness) waitCommitted(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, h.env.Endpoints.KafkaBootstrap, h.env.Group, h.env.Topic); err != nil {
		t.Fatalf("offsets never committed at the end: %v", err)
	}
}

func (h *harness) effects(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := h.env.Pool.Query(context.Background(), `SELECT key, payload FROM test_effects ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for rows.Next() {
		var k, p string
		if err := rows.Scan(&k, &p); err != nil {
			t.Fatal(err)
		}
		out[k] = append(out[k], p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantAppliedOnce checks that every record of recs was applied once, with
// its payload, and has its mark.
func (h *harness) wantAppliedOnce(t *testing.T, recs []record) {
	t.Helper()
	effects := h.effects(t)
	for _, r := range recs {
		if got := effects[r.key]; len(got) != 1 || got[0] != r.payload {
			t.Errorf("record %s applied as %v, want once", r.key, got)
		}
	}
	if n := h.marks(t); n != len(recs) {
		t.Errorf("%d marks, want %d", n, len(recs))
	}
}

func (h *harness) marks(t *testing.T) int {
	t.Helper()
	var n int
	if err := h.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_events WHERE consumer = $1`, h.name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *harness) count(result string) float64 {
	return counterValue(eventsTotal.WithLabelValues(h.name, result))
}

func readDLQ(t *testing.T, env *testenv.Env) []dlq.Entry {
	t.Helper()
	c, err := dlq.NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	es, err := dlq.Read(context.Background(), c, dlq.Topic(env.Topic, ""))
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestBatchIsolatesPoison: a record that cannot be applied sits in the
// middle of a batch. The batch fails, is retried record by record, the
// poison record goes to the DLQ at its first attempt, every other record is
// applied once, and the partition's offset reaches its end. With a Batcher
// the poison is refused once before anything is sent, and once by its
// statement's result inside the sent pipeline.
func TestBatchIsolatesPoison(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler Handler
		poison  string
	}{
		{"apply", fakeHandler{}, "poison"},
		{"batcher refuses before sending", batchingHandler{}, "poison"},
		{"batcher statement fails", batchingHandler{}, "late-poison"},
	} {
		t.Run(tc.name, func(t *testing.T) { testBatchIsolatesPoison(t, tc.handler, tc.poison) })
	}
}

func testBatchIsolatesPoison(t *testing.T, handler Handler, poison string) {
	env := testenv.New(t)
	var recs []record
	for i := range 61 {
		r := record{partition: 0, key: fmt.Sprintf("k%d", i), id: uuid.New(), payload: fmt.Sprintf("p%d", i)}
		if i == 30 {
			r.payload = poison
		}
		recs = append(recs, r)
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)
	h := start(t, env, Settings{BatchSize: 25, Workers: 2}, handler)
	h.waitCommitted(t)

	effects := h.effects(t)
	for i, r := range recs {
		want := 1
		if i == 30 {
			want = 0
		}
		if got := len(effects[r.key]); got != want {
			t.Errorf("record %d: applied %d times, want %d", i, got, want)
		}
	}
	if n := h.marks(t); n != 60 {
		t.Errorf("%d marks, want 60", n)
	}
	es := readDLQ(t, env)
	if len(es) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(es))
	}
	e := es[0]
	if e.EventID != recs[30].id.String() || e.Class != string(ClassPermanent) || e.Attempts != 1 || e.OriginalOffset != 30 ||
		e.OriginalTopic != env.Topic || e.Consumer != h.name || string(e.Value) != poison {
		t.Errorf("DLQ record %+v", e)
	}
	if a, d := h.count(ResultApplied), h.count(ResultDeadLettered); a != 60 || d != 1 {
		t.Errorf("events_total applied %v dead_lettered %v, want 60 and 1", a, d)
	}
}

// TestOrderUnderRetries: 40 keys with 5 events each over 6 partitions;
// about a third of first attempts fail with a serialization failure, inside
// batches and alone. Every key's events are applied exactly once, in order.
func TestOrderUnderRetries(t *testing.T) {
	env := testenv.New(t)
	var recs []record
	for i := range 5 {
		for k := range 40 {
			recs = append(recs, record{partition: int32(k % 6), key: fmt.Sprintf("k%02d", k), id: uuid.New(), payload: fmt.Sprint(i)})
		}
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)
	var mu sync.Mutex
	failed := map[uuid.UUID]bool{}
	fail := func(ev Event) error {
		mu.Lock()
		defer mu.Unlock()
		f := fnv.New32a()
		_, _ = f.Write(ev.ID[:])
		if f.Sum32()%3 == 0 && !failed[ev.ID] {
			failed[ev.ID] = true
			return fmt.Errorf("injected: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})
		}
		return nil
	}
	h := start(t, env, Settings{BatchSize: 4, Workers: 3, MaxAttempts: 3}, fakeHandler{fail: fail})
	h.waitCommitted(t)

	effects := h.effects(t)
	for k := range 40 {
		key := fmt.Sprintf("k%02d", k)
		if got := strings.Join(effects[key], ","); got != "0,1,2,3,4" {
			t.Errorf("key %s applied as %q, want 0,1,2,3,4", key, got)
		}
	}
	if n := h.marks(t); n != len(recs) {
		t.Errorf("%d marks, want %d", n, len(recs))
	}
	if len(failed) == 0 {
		t.Fatal("no failure was injected")
	}
	if r := counterValue(retriesTotal.WithLabelValues(h.name)); r == 0 {
		t.Error("retries_total stayed 0")
	}
	if got := h.count(ResultApplied) + h.count(ResultRetried); got != float64(len(recs)) {
		t.Errorf("applied+retried = %v, want %d", got, len(recs))
	}
	if es := readDLQ(t, env); len(es) != 0 {
		t.Errorf("DLQ holds %d records, want none; first: %s %s", len(es), es[0].Class, es[0].Message)
	}
}

// TestExhaustedAttempts: an event whose subject never appears is retried
// --max-attempts times, then dead-lettered with every dlq header, and the
// events behind it in its partition are applied.
func TestExhaustedAttempts(t *testing.T) {
	env := testenv.New(t)
	missing := uuid.New()
	recs := []record{
		{partition: 2, key: "a", id: uuid.New(), payload: "before"},
		{partition: 2, key: "b", id: missing, payload: "missing"},
		{partition: 2, key: "c", id: uuid.New(), payload: "after"},
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)
	fail := func(ev Event) error {
		if ev.ID == missing {
			return fmt.Errorf("order b: %w", ErrNotFound)
		}
		return nil
	}
	h := start(t, env, Settings{BatchSize: 10, MaxAttempts: 3}, fakeHandler{fail: fail})
	h.waitCommitted(t)

	effects := h.effects(t)
	if len(effects["a"]) != 1 || len(effects["b"]) != 0 || len(effects["c"]) != 1 {
		t.Errorf("effects %v, want a and c once, b never", effects)
	}
	es := readDLQ(t, env)
	if len(es) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(es))
	}
	e := es[0]
	for _, k := range []string{dlq.HeaderOriginalTopic, dlq.HeaderOriginalPartition, dlq.HeaderOriginalOffset, dlq.HeaderConsumer,
		dlq.HeaderErrorClass, dlq.HeaderErrorMessage, dlq.HeaderAttempts, dlq.HeaderFirstFailedAt, dlq.HeaderLastFailedAt, contract.HeaderID, contract.HeaderType} {
		if e.Header(k) == "" {
			t.Errorf("DLQ record lacks header %s", k)
		}
	}
	if e.Class != string(ClassNotFound) || e.Attempts != 3 || e.OriginalPartition != 2 || e.OriginalOffset != 1 || string(e.Key) != "b" ||
		!e.LastFailedAt.After(e.FirstFailedAt) || !strings.Contains(e.Message, "order b") {
		t.Errorf("DLQ record %+v", e)
	}
	if r := counterValue(retriesTotal.WithLabelValues(h.name)); r != 2 {
		t.Errorf("retries_total %v, want 2", r)
	}
}

// TestConcurrentDuplicateIsConflict: two transactions apply the same event
// at once. One applies it; the other waits for the first's mark, then counts
// a duplicate and an idempotency conflict, without an error.
func TestConcurrentDuplicateIsConflict(t *testing.T) {
	env := testenv.New(t)
	if _, err := env.Pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	r := New(Options{Name: "conflict"}, PoolDB{env.Pool}, fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ev := Event{ID: uuid.New(), Key: "k", Payload: []byte("x")}

	ctx := context.Background()
	if out, err := applyBehindHeldMark(t, env, r, "conflict", ev); err != nil || out != (outcome{duplicates: 1, conflicts: 1}) {
		t.Fatalf("second transaction: %+v, %v; want one duplicate that is a conflict", out, err)
	}
	// A later redelivery is a plain duplicate.
	out, err := r.apply(ctx, []Event{ev, ev})
	if err != nil || out != (outcome{duplicates: 2}) {
		t.Fatalf("redelivery: %+v, %v", out, err)
	}
	var effects int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM test_effects`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 0 {
		t.Fatalf("%d effects; the first transaction applied nothing but its mark, the others must not apply", effects)
	}
}

// counterValue reads a counter of the default registry.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
