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
// EVENTFORGE_MARKS_EVENTS events (a million by default) three times over
// (EVENTFORGE_MARKS_ROUNDS), on a topic and a PostgreSQL of its own for
// each mode, while the topic's records below the group's committed offsets
// are deleted every two seconds, as retention deletes old segments: once
// with the marks kept, once pruned every two seconds. Between the rounds
// the consumer stops and, with pruning, the test waits for autovacuum to
// visit the marks table, as it would in production. Each round prints the
// apply rate, the most marks held while it applied (sampled every second)
// and, once the last records are deleted from the topic, the marks held
// and their bytes (table and indexes) when pruning caught up. A run with
// pruning fails if its marks do not fall to a hundredth of a round's
// events within a minute of the last deletion, or if a round grows the
// table by as much as the round before it did: the space of pruned marks
// must be used again, so that the table levels off.
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
			// A PostgreSQL of its own: another user's idle logical slot
			// would hold the catalog horizon that recycling index pages
			// waits for on 15 (noteIdleSlots). Nothing decodes here, so
			// the environment's slot goes too.
			env := testenv.NewPrivate(t, testenv.WithoutKafka()).EnvOnSharedKafka(t)
			if _, err := env.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, env.Slot); err != nil {
				t.Fatal(err)
			}
			noteIdleSlots(t, env)
			rounds := 3
			if v := os.Getenv("EVENTFORGE_MARKS_ROUNDS"); v != "" {
				var err error
				if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
					t.Fatalf("EVENTFORGE_MARKS_ROUNDS=%q: want a positive integer", v)
				}
			}
			grown := make([]int64, rounds) // the table's growth in bytes, per round
			var size int64
			for round := range rounds {
				if round > 0 && mode.prune > 0 {
					waitAutovacuum(t, env)
				}
				fill(t, env, n)
				r := applyRound(t, env, n, mode.prune)
				grown[round], size = r.bytes-size, r.bytes
				t.Logf("%s, round %d: %d events applied in %s (%.0f events/s); marks held: at most %d while applying, %d (%.1f MiB with their indexes, %+.1f MiB in this round; table %.1f MiB, indexes %.1f MiB) %s after the last records were deleted",
					mode.name, round+1, n, r.took.Round(time.Second), float64(n)/r.took.Seconds(), r.peak, r.rows,
					float64(r.bytes)/(1<<20), float64(grown[round])/(1<<20), float64(r.heap)/(1<<20), float64(r.bytes-r.heap)/(1<<20), r.settled.Round(time.Second))
				if mode.prune > 0 && r.rows > int64(n)/100 {
					t.Errorf("round %d: %d marks held a minute after the last records were deleted, want at most %d", round+1, r.rows, n/100)
				}
			}
			for r := 1; mode.prune > 0 && r < rounds; r++ {
				if grown[r] >= grown[r-1] {
					t.Errorf("round %d grew the marks table by %.1f MiB, round %d by %.1f MiB: pruned marks' space is not used again",
						r+1, float64(grown[r])/(1<<20), r, float64(grown[r-1])/(1<<20))
				}
			}
		})
	}
}

// round is what one round of TestMarksBoundedOverManyEvents measured.
type round struct {
	took    time.Duration // from the consumer's start to its offsets at the end
	peak    int64         // the most marks held while applying
	rows    int64         // marks held once pruning caught up (or at once, when kept)
	bytes   int64         // the marks table and its indexes then
	heap    int64         // the marks table alone then
	settled time.Duration // from the last deletion to that count
}

// applyRound starts a consumer on env, waits until it has applied every
// record of the topic, deletes the records below its offsets every two
// seconds meanwhile and once at the end, and counts the marks held: with
// pruning, until they fall to a hundredth of n or a minute has passed.
func applyRound(t *testing.T, env *testenv.Env, n int, prune time.Duration) round {
	h := start(t, env, Settings{Workers: 4, BatchSize: 100, MarksPruneInterval: prune}, marksOnly{})
	defer h.stop()
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
	r := round{took: time.Since(began)}
	close(stop)
	wg.Wait()
	deleteBelow(t, env)
	deleted := time.Now()
	count := func() {
		err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM processed_events), pg_total_relation_size('processed_events'), pg_relation_size('processed_events')`).Scan(&r.rows, &r.bytes, &r.heap)
		if err != nil {
			t.Fatal(err)
		}
	}
	count()
	if prune > 0 {
		for r.rows > int64(n)/100 && time.Since(deleted) < time.Minute {
			time.Sleep(time.Second)
			count()
		}
	}
	r.peak, r.settled = max(peak.Load(), r.rows), time.Since(deleted)
	return r
}

// noteIdleSlots says which inactive logical slots of the cluster hold a
// catalog_xmin on PostgreSQL 15 and older: there no index page deleted
// after that horizon is recycled, in any table (16 passes the table to
// the check), so the marks' indexes would grow however many are pruned.
func noteIdleSlots(t *testing.T, env *testenv.Env) {
	var slots []string
	err := env.Pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(slot_name::text), '{}') FROM pg_replication_slots
		WHERE NOT active AND catalog_xmin IS NOT NULL AND current_setting('server_version_num')::int < 160000`).Scan(&slots)
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) > 0 {
		t.Logf("inactive logical slots %v hold the cluster's catalog horizon: on PostgreSQL 15 the index pages of pruned marks are not recycled while they do", slots)
	}
}

// waitAutovacuum waits, up to three minutes, for autovacuum to visit the
// marks table once more; if it does not, the test runs VACUUM itself and
// says so.
func waitAutovacuum(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	visits := func() (n int64) {
		err := env.Pool.QueryRow(ctx, `SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'processed_events'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before, began := visits(), time.Now()
	for time.Since(began) < 3*time.Minute {
		time.Sleep(2 * time.Second)
		if visits() > before {
			t.Logf("autovacuum visited the marks table %s after the round", time.Since(began).Round(time.Second))
			return
		}
	}
	t.Logf("autovacuum did not visit the marks table within 3m: running VACUUM")
	if _, err := env.Pool.Exec(ctx, `VACUUM processed_events`); err != nil {
		t.Fatal(err)
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
