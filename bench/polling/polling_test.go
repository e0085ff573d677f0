package polling_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/bench/polling"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// Two relay processes (as in a rolling deploy) with small batches relay 500
// events of 10 orders, each order's 50 events committed in separate
// transactions interleaved with the other orders': every event reaches
// Kafka, each order's events in the order they were committed, and every
// row is deleted.
func TestRelayKeepsEachOrdersEventsInOrder(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := polling.DefaultConfig()
	cfg.DatabaseURL, cfg.Brokers, cfg.Topic = env.DatabaseURL, env.Endpoints.KafkaBootstrap, env.Topic
	cfg.Workers, cfg.BatchSize, cfg.PollInterval = 3, 7, 20*time.Millisecond
	if err := polling.Prepare(ctx, env.Pool, cfg.Workers); err != nil {
		t.Fatal(err)
	}

	const orders, perOrder = 10, 50
	want := map[string][]string{} // order ID → its event IDs, in commit order
	ids := make([]string, orders)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	insert := func(order string) {
		ev := uuid.NewString()
		_, err := env.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)`,
			ev, contract.AggregateOrder, order, contract.TypeOrderCreated, fmt.Sprintf(`{"order_id":%q,"n":%d}`, order, len(want[order])))
		if err != nil {
			t.Fatalf("inserting event: %v", err)
		}
		want[order] = append(want[order], ev)
	}
	// Half the events before the relays start, half while they run.
	for range perOrder / 2 {
		for _, o := range ids {
			insert(o)
		}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	relayCtx, stopRelays := context.WithCancel(ctx)
	relayErrs := make(chan error, 2)
	for range 2 {
		go func() { relayErrs <- polling.Run(relayCtx, cfg, logger) }()
	}
	for range perOrder - perOrder/2 {
		for _, o := range ids {
			insert(o)
		}
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		select {
		case err := <-relayErrs:
			t.Fatalf("a relay stopped with %d rows left: %v", left, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows still in the outbox after 2 minutes", left)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	stopRelays()
	for range 2 {
		if err := <-relayErrs; err != nil {
			t.Fatalf("relay: %v", err)
		}
	}

	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{} // order ID → event IDs, first delivery of each, in offset order
	seen := map[string]bool{}
	partition := map[string]int32{}
	for _, r := range recs { // ReadAll returns each partition's records in offset order
		id := r.Headers[contract.HeaderID]
		if p, ok := partition[r.Key]; ok && p != r.Partition {
			t.Errorf("order %s in partitions %d and %d", r.Key, p, r.Partition)
		}
		partition[r.Key] = r.Partition
		if !seen[id] {
			seen[id] = true
			got[r.Key] = append(got[r.Key], id)
		}
	}
	var failures int
	for _, o := range ids {
		if fmt.Sprint(got[o]) != fmt.Sprint(want[o]) {
			failures++
			t.Errorf("order %s: events in Kafka %v, committed %v", o, got[o], want[o])
		}
	}
	if len(seen) != orders*perOrder {
		t.Errorf("%d distinct events in Kafka, %d committed", len(seen), orders*perOrder)
	}
	if failures > 0 {
		t.Errorf("%d of %d orders out of order or incomplete", failures, orders)
	}
}
