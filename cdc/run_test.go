package cdc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/cdc/sink/sinktest"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestRunWithAnotherSink runs the relay on real PostgreSQL with a second
// sink, the in-memory one, in place of Kafka: streaming publishes every
// committed outbox row through it, and after the slot is dropped the gap
// recovery republishes through it too. Nothing in the stream or the
// recovery knows which sink it has.
func TestRunWithAnotherSink(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := cdc.DefaultConfig()
	cfg.DatabaseURL, cfg.Slot, cfg.Kafka.Brokers = env.DatabaseURL, env.Slot, "unused:9092"
	cfg.Topics = map[string]string{"order": env.Topic}
	cfg.StatusInterval, cfg.ConfirmInterval, cfg.StandbyRetry = 200*time.Millisecond, 20*time.Millisecond, 100*time.Millisecond
	mem := &sinktest.Memory{}
	health := &cdc.Health{}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cdc.Run(rctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), cdc.WithSink(mem), cdc.WithHealth(health))
	}()

	insert := func(n int) []string {
		var ids []string
		err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
			for range n {
				id := uuid.NewString()
				ids = append(ids, id)
				if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1::uuid, 'order', $1::text, 'OrderCreated', '{}')`, id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	stored := func() []string {
		var ids []string
		for _, ev := range mem.Stored(env.Topic) {
			ids = append(ids, ev.ID)
		}
		return ids
	}
	waitStored := func(what string, want []string) {
		testenv.Eventually(t, time.Minute, what, func() error {
			got := stored()
			for _, id := range want {
				if !slices.Contains(got, id) {
					return fmt.Errorf("%d of %d stored; %s missing", len(got), len(want), id)
				}
			}
			return nil
		})
	}

	streamed := insert(20)
	waitStored("the streamed rows in the memory sink", streamed)
	if err := health.Ready(); err != nil {
		t.Fatalf("relay not ready while streaming: %v", err)
	}

	// Drop the slot under the relay: the gap is recovered through the sink.
	_, err := env.Pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, env.Slot)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the slot dropped", func() error {
		_, err := env.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, env.Slot)
		return err
	})
	before := len(stored())
	later := insert(5)
	waitStored("the rows after the gap", later)
	if n := len(stored()) - before; n <= len(later) {
		t.Errorf("%d records stored after the slot was dropped, want the gap's republished rows besides the %d new ones", n, len(later))
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
