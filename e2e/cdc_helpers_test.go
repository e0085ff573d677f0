package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	"github.com/eventforge/eventforge/schema"
)

// cdcReader starts `eventforge cdc` on env's slot and topic with a metrics
// endpoint; it returns the process and the metrics address.
func cdcReader(t testing.TB, env *testenv.Env, name string, procEnv []string, extra ...string) (*proc, string) {
	t.Helper()
	addr := testkit.FreeAddr(t)
	args := append([]string{"cdc",
		"--database-url", env.DatabaseURL, "--kafka-brokers", env.Endpoints.KafkaBootstrap,
		"--slot", env.Slot, "--topic", "order=" + env.Topic, "--status-interval", "500ms",
		"--heartbeat-interval", "1s", "--standby-retry", "250ms", "--metrics-addr", addr}, extra...)
	if env.ReplicationURL != "" {
		args = append(args, "--replication-url", env.ReplicationURL)
	}
	return start(t, name, procEnv, args...), addr
}

// insertEvents commits one transaction holding n outbox events, spread over
// orders orders (event i belongs to order i mod orders, with sequence number
// i / orders), and returns the event IDs in insertion order.
func insertEvents(ctx context.Context, t testing.TB, pool *pgxpool.Pool, n, orders int) []string {
	t.Helper()
	var ids []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		orderIDs := make([]string, orders)
		for i := range orderIDs {
			orderIDs[i] = uuid.NewString()
		}
		rows := make([][]any, n)
		for i := range rows {
			id := uuid.NewString()
			ids = append(ids, id)
			rows[i] = []any{id, contract.AggregateOrder, orderIDs[i%orders], contract.TypeOrderCreated,
				fmt.Sprintf(`{"seq": %d, "pad": "%s"}`, i/orders, strings.Repeat("x", 150)), `{}`}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, []string{"id", "aggregatetype", "aggregateid", "type", "payload", "headers"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		t.Fatalf("inserting %d outbox events: %v", n, err)
	}
	return ids
}

// load commits small transactions against a fixed set of orders, each
// transaction adding the next event (seq 0, 1, 2, …) of one random order,
// until stopped. Commit errors (PostgreSQL restarting) are tolerated: the
// outbox table, read at the end, is the truth of what committed.
type load struct {
	pool    *pgxpool.Pool
	orders  []string
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	commits int
	errs    int
}

func startLoad(pool *pgxpool.Pool, orders int, pause time.Duration) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{pool: pool, cancel: cancel, done: make(chan struct{})}
	for range orders {
		l.orders = append(l.orders, uuid.NewString())
	}
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			k := rand.IntN(orders)
			// The sequence is read from the table, so an ambiguous commit
			// during a restart cannot leave a gap or a repeat.
			_, err := pool.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
				SELECT $1, 'order', $2::text, 'OrderCreated',
				jsonb_build_object('seq', (SELECT count(*) FROM outbox WHERE aggregateid = $2::text))`,
				uuid.NewString(), l.orders[k])
			l.mu.Lock()
			if err != nil {
				l.errs++
			} else {
				l.commits++
			}
			l.mu.Unlock()
			if err != nil {
				time.Sleep(100 * time.Millisecond)
			} else if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	return l
}

func (l *load) stop() (commits, errs int) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commits, l.errs
}

// storedEvent is an outbox row as committed.
type storedEvent struct {
	id, order string
	seq       int
}

// storedEvents reads every outbox row.
func storedEvents(t testing.TB, pool *pgxpool.Pool) []storedEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return collectStored(ctx, t, pool, `SELECT id::text, aggregateid, (payload->>'seq')::int FROM outbox`)
}

// collectStored reads the stored events a query returns as (id, order, seq).
func collectStored(ctx context.Context, t testing.TB, pool *pgxpool.Pool, query string) []storedEvent {
	t.Helper()
	rows, _ := pool.Query(ctx, query)
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedEvent, error) {
		var e storedEvent
		err := r.Scan(&e.id, &e.order, &e.seq)
		return e, err
	})
	if err != nil {
		t.Fatalf("reading outbox: %v", err)
	}
	return evs
}

// deliveryCheck compares the topic with the outbox and accumulates every
// violation: an event missing from Kafka, a record that is not in the outbox,
// an order whose records span partitions, an order whose events first arrive
// out of commit (seq) order.
type deliveryCheck struct {
	Events, Records, Duplicates int
	Failures                    []string
}

func checkDelivery(stored []storedEvent, recs []testenv.Record) deliveryCheck {
	var c deliveryCheck
	c.Events, c.Records = len(stored), len(recs)
	byID := map[string]storedEvent{}
	for _, e := range stored {
		byID[e.id] = e
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	seen := map[string]bool{}
	partOf := map[string]int32{}
	nextSeq := map[string]int{}
	for _, r := range recs {
		id := r.Headers[contract.HeaderID]
		e, ok := byID[id]
		if !ok {
			c.Failures = append(c.Failures, fmt.Sprintf("record %d@%d with id %q is not in the outbox", r.Partition, r.Offset, id))
			continue
		}
		if r.Key != e.order {
			c.Failures = append(c.Failures, fmt.Sprintf("event %s keyed %q, want order %s", id, r.Key, e.order))
		}
		if p, ok := partOf[e.order]; ok && p != r.Partition {
			c.Failures = append(c.Failures, fmt.Sprintf("order %s in partitions %d and %d", e.order, p, r.Partition))
		}
		partOf[e.order] = r.Partition
		if seen[id] {
			c.Duplicates++
			continue
		}
		seen[id] = true
		if want := nextSeq[e.order]; e.seq != want {
			c.Failures = append(c.Failures, fmt.Sprintf("order %s: first delivery of seq %d at %d@%d, want seq %d next (commit order)", e.order, e.seq, r.Partition, r.Offset, want))
		}
		nextSeq[e.order] = e.seq + 1
	}
	missing := 0
	for _, e := range stored {
		if !seen[e.id] {
			missing++
			if missing <= 10 {
				c.Failures = append(c.Failures, fmt.Sprintf("event %s (order %s seq %d) missing from Kafka", e.id, e.order, e.seq))
			}
		}
	}
	if missing > 10 {
		c.Failures = append(c.Failures, fmt.Sprintf("… %d events missing in all", missing))
	}
	return c
}

// waitDelivered waits until every outbox event is in the topic, then checks
// the whole delivery and fails the test with every violation.
func waitDelivered(t testing.TB, env *testenv.Env, timeout time.Duration) deliveryCheck {
	t.Helper()
	stored := storedEvents(t, env.Pool)
	want := map[string]bool{}
	for _, e := range stored {
		want[e.id] = true
	}
	var recs []testenv.Record
	testenv.Eventually(t, timeout, "every outbox event in Kafka", func() error {
		var err error
		recs, err = testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, r := range recs {
			if want[r.Headers[contract.HeaderID]] {
				got[r.Headers[contract.HeaderID]] = true
			}
		}
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d events in Kafka", len(got), len(want))
		}
		return nil
	})
	c := checkDelivery(stored, recs)
	for _, f := range c.Failures {
		t.Error(f)
	}
	t.Logf("delivery: %d events, %d records, %d duplicates", c.Events, c.Records, c.Duplicates)
	return c
}

// slotPool is a pool on the server that holds env's slot: the standby the
// relay decodes on (testenv.Env.DecodeOnStandby), else env.Pool.
func slotPool(env *testenv.Env) *pgxpool.Pool {
	if env.SlotPool != nil {
		return env.SlotPool
	}
	return env.Pool
}

// slotConfirmed returns the slot's confirmed_flush_lsn.
func slotConfirmed(env *testenv.Env) (pglogrepl.LSN, error) {
	st, err := schema.ReadSlotStatus(context.Background(), slotPool(env), env.Slot)
	if err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(st.ConfirmedFlushLSN)
}

// waitConfirmedPast waits up to timeout until env's slot has confirmed
// everything before lsn (confirmed_flush_lsn at or past it); what names lsn
// in the failure, e.g. "the last commit".
func waitConfirmedPast(t testing.TB, env *testenv.Env, lsn pglogrepl.LSN, timeout time.Duration, what string) {
	t.Helper()
	testenv.Eventually(t, timeout, "slot confirmed past "+what, func() error {
		got, err := slotConfirmed(env)
		if err != nil {
			return err
		}
		if got < lsn {
			return fmt.Errorf("confirmed_flush_lsn %s < %s %s", got, what, lsn)
		}
		return nil
	})
}

// currentLSN returns the server's current WAL position.
func currentLSN(t testing.TB, env *testenv.Env) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := env.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}
