//go:build marksbench

package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
)

// marksOnly is a Batcher that applies nothing beyond the marks: the run
// below measures what the marks and their pruning cost.
type marksOnly struct{}

func (marksOnly) Apply(context.Context, pgx.Tx, Event) error { return nil }
func (marksOnly) Queue(*pgx.Batch, Event) error              { return nil }

// TestMarksBoundedOverManyEvents (`make bench-marks`) applies
// EVENTFORGE_MARKS_EVENTS events (a million by default) twice, each on a
// topic and database of its own, while the topic's records below the
// group's committed offsets are deleted every two seconds, as retention
// deletes old segments: once with the marks kept, once pruned every two
// seconds. It prints the apply rate of each run, the most marks held while
// it applied (sampled every second) and, once the last records are deleted
// from the topic, the marks held and their bytes (table and indexes) when
// pruning caught up: a run with pruning fails if its marks do not fall to
// a hundredth of the events within a minute of the last deletion.
func TestMarksBoundedOverManyEvents(t *testing.T) {
	n := 1_000_000
	if v := os.Getenv("EVENTFORGE_MARKS_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("EVENTFORGE_MARKS_EVENTS=%q: want a positive integer", v)
		}
	}
	for _, mode := range []struct {
		name  string
		prune time.Duration
	}{{"marks kept", 0}, {"marks pruned", 2 * time.Second}} {
		t.Run(mode.name, func(t *testing.T) {
			env := testenv.New(t)
			fill(t, env, n)
			h := start(t, env, Settings{Workers: 4, BatchSize: 100, MarksPruneInterval: mode.prune}, marksOnly{})
			began := time.Now()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { deleteBelowCommitted(t, env, stop) })
			var peak atomic.Int64
			wg.Go(func() { samplePeakMarks(env, stop, &peak) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			if err := testenv.WaitCommittedAtEnd(ctx, env.Endpoints.KafkaBootstrap, env.Group, env.Topic); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			close(stop)
			wg.Wait()
			deleteBelow(t, env)
			deleted := time.Now()
			var rows, bytes int64
			count := func() {
				err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM processed_events), pg_total_relation_size('processed_events')`).Scan(&rows, &bytes)
				if err != nil {
					t.Fatal(err)
				}
			}
			count()
			if mode.prune > 0 {
				for rows > int64(n)/100 && time.Since(deleted) < time.Minute {
					time.Sleep(time.Second)
					count()
				}
			}
			h.stop()
			t.Logf("%s: %d events applied in %s (%.0f events/s); marks held: at most %d while applying, %d (%.1f MiB with their indexes) %s after the last records were deleted",
				mode.name, n, took.Round(time.Second), float64(n)/took.Seconds(), peak.Load(), rows, float64(bytes)/(1<<20), time.Since(deleted).Round(time.Second))
			if mode.prune > 0 && rows > int64(n)/100 {
				t.Errorf("%d marks held a minute after the last records were deleted, want at most %d", rows, n/100)
			}
		})
	}
}

// fill produces n records with distinct event IDs over 60,000 keys.
func fill(t *testing.T, env *testenv.Env, n int) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "enable.idempotence": true,
		"acks": "all", "linger.ms": 20, "compression.type": "lz4", "log_level": 3, "queue.buffering.max.messages": 500000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() {
		failed := 0
		for i := 0; i < n; i++ {
			if m := (<-p.Events()).(*kafka.Message); m.TopicPartition.Error != nil {
				failed++
			}
		}
		if failed > 0 {
			done <- fmt.Errorf("%d records not delivered", failed)
		}
		close(done)
	}()
	topic := env.Topic
	for i := range n {
		id := uuid.New()
		msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key: []byte("order-" + strconv.Itoa(i%60000)), Value: []byte(`{}`),
			Headers: []kafka.Header{{Key: "id", Value: []byte(id.String())}, {Key: "type", Value: []byte("TestEvent")}}}
		for {
			err := p.Produce(msg, nil)
			if err == nil {
				break
			}
			if e, ok := err.(kafka.Error); !ok || e.Code() != kafka.ErrQueueFull {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// samplePeakMarks stores in peak, every second until stop, the most marks
// held.
func samplePeakMarks(env *testenv.Env, stop chan struct{}, peak *atomic.Int64) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		var rows int64
		if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_events`).Scan(&rows); err == nil && rows > peak.Load() {
			peak.Store(rows)
		}
	}
}

// deleteBelowCommitted deletes, every two seconds until stop, the records
// below the group's committed offsets.
func deleteBelowCommitted(t *testing.T, env *testenv.Env, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Second):
		}
		deleteBelow(t, env)
	}
}

// deleteBelow deletes the records below the group's committed offsets.
func deleteBelow(t *testing.T, env *testenv.Env) {
	committed, _, err := testenv.CommittedOffsets(env.Endpoints.KafkaBootstrap, env.Group, env.Topic)
	if err != nil || len(committed) == 0 {
		return
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Error(err)
		return
	}
	defer a.Close()
	topic := env.Topic
	var tps []kafka.TopicPartition
	for p, off := range committed {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.DeleteRecords(ctx, tps); err != nil {
		t.Logf("deleting records below the committed offsets: %v", err)
	}
}
