package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestUnavailableDatabaseWaits: the runtime's route to PostgreSQL is
// blackholed (bytes held, new connections never answered) in the middle of
// a transaction, for longer than MaxAttempts × AttemptTimeout, while
// records arrive in every partition. The transaction in flight times out,
// the probe fails, every partition waits (the unavailable gauge shows
// them), nothing is dead-lettered, and once the route heals every record
// is applied exactly once.
func TestUnavailableDatabaseWaits(t *testing.T) {
	env := testenv.New(t)
	u, err := url.Parse(env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	bh := testenv.NewBlackhole(t, u.Host)
	pool, err := pgxpool.New(context.Background(), bh.URL(t, env.DatabaseURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := PoolDB{pool}
	probe := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return db.Probe(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		})
	}
	if err := probe(); err != nil {
		t.Fatalf("probe through the open route: %v", err)
	}

	// The handler blackholes the route when it applies the record "block":
	// its own INSERT is the first statement that gets no answer.
	blocked := make(chan time.Time, 1)
	var blockOnce sync.Once
	blockInFlight := func(ev Event) error {
		if string(ev.Payload) == "block" {
			blockOnce.Do(func() {
				bh.Block()
				blocked <- time.Now()
			})
		}
		return nil
	}
	const maxAttempts, attemptTimeout = 2, 500 * time.Millisecond
	// One record per transaction: the blocked transaction is an attempt of
	// its own, so its timeout goes through the probe.
	h := startOn(t, env, db, Settings{Workers: 4, BatchSize: 1, MaxAttempts: maxAttempts, AttemptTimeout: attemptTimeout,
		ProbeTimeout: 300 * time.Millisecond}, fakeHandler{fail: blockInFlight})
	var recs []record
	wave := func(n int, first string) {
		var w []record
		for range n {
			i := len(recs) + len(w)
			w = append(w, record{partition: int32(i % 6), key: fmt.Sprintf("k%03d", i), id: uuid.New(), payload: fmt.Sprint(i)})
		}
		if first != "" {
			w[0].payload = first
		}
		produce(t, env.Endpoints.KafkaBootstrap, env.Topic, w)
		recs = append(recs, w...)
	}
	wave(12, "")
	h.waitCommitted(t)

	retries := counterValue(retriesTotal.WithLabelValues(h.name))
	wave(12, "block")
	var blockedAt time.Time
	select {
	case blockedAt = <-blocked:
	case <-time.After(60 * time.Second):
		t.Fatal("the record that blackholes the route was never applied")
	}
	if err := probe(); err == nil {
		t.Fatal("probe through the blackholed route succeeded")
	}
	wave(12, "") // records keep arriving during the outage
	testenv.Eventually(t, 60*time.Second, "every partition waiting on the unavailable database", func() error {
		if g := gaugeValue(unavailablePartitions.WithLabelValues(h.name)); g != 6 {
			return fmt.Errorf("%v partitions waiting, want 6", g)
		}
		return nil
	})
	wave(12, "")
	outage := 3 * maxAttempts * attemptTimeout
	testenv.Eventually(t, 2*time.Minute, "an outage longer than max attempts × attempt timeout", func() error {
		r := counterValue(retriesTotal.WithLabelValues(h.name)) - retries
		if r < 6*(maxAttempts+1) || time.Since(blockedAt) < outage {
			return fmt.Errorf("%v failed attempts after %s", r, time.Since(blockedAt).Round(time.Millisecond))
		}
		return nil
	})
	if d := h.count(ResultDeadLettered); d != 0 {
		t.Fatalf("%v records dead-lettered during the outage", d)
	}
	bh.Unblock()
	h.waitCommitted(t)

	h.wantAppliedOnce(t, recs)
	if es := readDLQ(t, env); len(es) != 0 {
		t.Errorf("DLQ holds %d records, want none; first: %s %s", len(es), es[0].Class, es[0].Message)
	}
	if g := gaugeValue(unavailablePartitions.WithLabelValues(h.name)); g != 0 {
		t.Errorf("%v partitions still shown waiting after the database answered", g)
	}
}

// TestRetriesHoldNoWorkerSlot: with one worker slot, a partition whose
// record keeps failing (its subject is missing and the not-found grace is
// long) waits between attempts without the slot, so another partition's
// records are applied meanwhile. Once the subject exists, the waiting
// record is applied too, and nothing is dead-lettered.
func TestRetriesHoldNoWorkerSlot(t *testing.T) {
	env := testenv.New(t)
	waiting := uuid.New()
	var present atomic.Bool
	recs := []record{{partition: 0, key: "waiting", id: waiting, payload: "w"}}
	for i := range 20 {
		recs = append(recs, record{partition: 1, key: fmt.Sprintf("k%02d", i), id: uuid.New(), payload: fmt.Sprint(i)})
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)
	fail := func(ev Event) error {
		if ev.ID == waiting && !present.Load() {
			return fmt.Errorf("order waiting: %w", ErrNotFound)
		}
		return nil
	}
	h := start(t, env, Settings{Workers: 1, BatchSize: 1, MaxAttempts: 2, NotFoundGrace: time.Hour}, fakeHandler{fail: fail})

	testenv.Eventually(t, 60*time.Second, "partition 1 applied while partition 0 retries", func() error {
		effects := h.effects(t)
		if len(effects["waiting"]) != 0 {
			return errors.New("the waiting record was applied before its subject existed")
		}
		n := 0
		for _, r := range recs[1:] {
			n += len(effects[r.key])
		}
		if n != 20 {
			return fmt.Errorf("%d of 20 records of partition 1 applied", n)
		}
		return nil
	})
	retries := counterValue(retriesTotal.WithLabelValues(h.name))
	testenv.Eventually(t, 30*time.Second, "partition 0 still retrying", func() error {
		if r := counterValue(retriesTotal.WithLabelValues(h.name)); r <= retries {
			return fmt.Errorf("retries_total stays %v", r)
		}
		return nil
	})
	if got := h.effects(t)["waiting"]; len(got) != 0 {
		t.Fatalf("the waiting record was applied %d times before its subject existed", len(got))
	}
	present.Store(true)
	h.waitCommitted(t)

	effects := h.effects(t)
	for _, r := range recs {
		if len(effects[r.key]) != 1 {
			t.Errorf("record %s applied %d times, want once", r.key, len(effects[r.key]))
		}
	}
	if es := readDLQ(t, env); len(es) != 0 {
		t.Errorf("DLQ holds %d records, want none", len(es))
	}
}

// TestFatalDLQProducerErrorEndsRun: the DLQ producer fails fatally while a
// record is being dead-lettered. Run ends with the fatal error (so the
// process exits non-zero and its supervisor starts a new one), the record
// is neither applied nor dead-lettered nor committed past, and the records
// behind it wait for the next process.
func TestFatalDLQProducerErrorEndsRun(t *testing.T) {
	env := testenv.New(t)
	if _, err := env.Pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTopic(t, env.Endpoints.KafkaBootstrap, dlq.Topic(env.Topic, "")) })
	recs := []record{
		{partition: 3, key: "a", id: uuid.New(), payload: "before"},
		{partition: 3, key: "b", id: uuid.New(), payload: "fatal"},
		{partition: 3, key: "c", id: uuid.New(), payload: "after"},
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)

	var rtp atomic.Pointer[Runtime]
	injected := make(chan kafka.ErrorCode, 1)
	fail := func(ev Event) error {
		if string(ev.Payload) != "fatal" {
			return nil
		}
		select {
		case injected <- rtp.Load().dlq.Kafka().TestFatalError(kafka.ErrOutOfOrderSequenceNumber, "injected by the test"):
		default:
		}
		return fmt.Errorf("%w: rejected so that it is dead-lettered", ErrInvalid)
	}
	opts := Options{Name: "fatal_dlq", Group: env.Group, Topics: []string{env.Topic}, Bootstrap: env.Endpoints.KafkaBootstrap,
		Settings: Settings{BatchSize: 1, CommitInterval: 200 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}}
	rt := New(opts, PoolDB{env.Pool}, fakeHandler{fail: fail}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rtp.Store(rt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()

	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatalf("Run still running 90 s after the DLQ producer failed fatally (after cancel it returned %v)", <-done)
	}
	if code := <-injected; code != kafka.ErrNoError {
		t.Fatalf("injecting the fatal error: %v", code)
	}
	var kerr kafka.Error
	if !errors.As(runErr, &kerr) || !kerr.IsFatal() {
		t.Fatalf("Run returned %v, want the DLQ producer's fatal error", runErr)
	}

	h := &harness{env: env, name: opts.Name}
	effects := h.effects(t)
	if len(effects["a"]) != 1 || len(effects["b"]) != 0 || len(effects["c"]) != 0 {
		t.Errorf("effects %v, want a once, b and c never", effects)
	}
	if es := readDLQ(t, env); len(es) != 0 {
		t.Errorf("DLQ holds %d records after the fatal error, want none", len(es))
	}
	committed, _, err := testenv.CommittedOffsets(env.Endpoints.KafkaBootstrap, env.Group, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	if committed[3] != 1 {
		t.Errorf("partition 3 committed at %d, want 1: after a, before the record that was not dead-lettered", committed[3])
	}
}

// gaugeValue reads a gauge of the default registry.
func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// TestAttemptTimeoutClassifiedByProbe: on the real server, an attempt that
// times out is told apart by the probe. A transaction waiting for a lock
// another session holds times out while the server answers the probe:
// transient, it counts towards MaxAttempts. A pool whose only connection is
// taken cannot begin the transaction at all: unavailable.
func TestAttemptTimeoutClassifiedByProbe(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r := New(Options{Name: "probe", Settings: Settings{AttemptTimeout: 300 * time.Millisecond, ProbeTimeout: 5 * time.Second}},
		PoolDB{pool}, fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ev := Event{ID: uuid.New(), Key: "k", Payload: []byte("x")}

	t.Run("lock wait on a live server", func(t *testing.T) {
		lock, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lock.Rollback(ctx) }()
		if _, err := lock.Exec(ctx, `LOCK TABLE test_effects IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		_, err = r.apply(ctx, []Event{ev})
		if err == nil {
			t.Fatal("the attempt succeeded while the table was locked")
		}
		if c, cerr := r.classify(ctx, err); c != ClassTransient || errors.Is(cerr, ErrUnavailable) {
			t.Fatalf("attempt error %v classified %s (%v), want transient", err, c, cerr)
		}
	})
	t.Run("pool exhausted", func(t *testing.T) {
		held, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		_, err = r.apply(ctx, []Event{ev})
		if c, _ := r.classify(ctx, err); c != ClassUnavailable || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("attempt error %v classified %s, want unavailable", err, c)
		}
	})
	var marks int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = 'probe'`).Scan(&marks); err != nil {
		t.Fatal(err)
	}
	if marks != 0 {
		t.Fatalf("%d marks left by failed attempts", marks)
	}
}
