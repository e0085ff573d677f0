package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
)

// outage is how long the database refuses every write in
// TestConsumerDatabaseRefusesWrites: many times what --max-attempts (5)
// with the default backoffs lasts (about 1.5 s).
const outage = 30 * time.Second

// TestConsumerDatabaseRefusesWrites: while events arrive at a steady rate,
// the test's own database refuses every write for 30 s — it is made
// read-only (a standby, a provider's disk-pressure mode), or INSERT on
// processed_events is revoked (a migration that forgot a grant) — under
// the fulfillment and ledger consumers, with their default attempts and
// backoffs. Each failure carries a SQLSTATE (25006, 42501), and the probe
// (a mark of its own in a transaction that must commit) fails the same
// way: both consumers report partitions unavailable, neither dead-letters
// anything, and once the database accepts writes again every event is
// applied exactly once by each (one mark, one shipment, the ledger's
// counters).
func TestConsumerDatabaseRefusesWrites(t *testing.T) {
	for _, tt := range []struct {
		name         string
		refuse, heal func(t *testing.T, pl *pipeline)
	}{
		{"database read-only", func(t *testing.T, pl *pipeline) { setReadOnly(t, pl, true) }, func(t *testing.T, pl *pipeline) { setReadOnly(t, pl, false) }},
		{"insert on processed_events revoked",
			func(t *testing.T, pl *pipeline) {
				execAdmin(t, pl, `REVOKE INSERT ON processed_events FROM eventforge`)
			},
			func(t *testing.T, pl *pipeline) { execAdmin(t, pl, `GRANT INSERT ON processed_events TO eventforge`) }},
	} {
		t.Run(tt.name, func(t *testing.T) { testConsumerDatabaseRefusesWrites(t, tt.refuse, tt.heal) })
	}
}

func testConsumerDatabaseRefusesWrites(t *testing.T, refuse, heal func(t *testing.T, pl *pipeline)) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	const n = 600
	orders := seedOrders(t, pl, n, 12)
	ep := newEventProducer(t, pl)
	lgroup := ledgerGroup(t, pl)
	_, faddr := consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil)
	_, laddr := consumerProc(t, pl, "ledger", "ledger", lgroup, nil)

	// The load: 20 events a second, one per order, every partition, sent
	// by the main goroutine before and after the outage and by the loader
	// during it (never both at once).
	var sent sync.WaitGroup
	next := 0
	send := func(k int) {
		var evs []orderEvent
		for ; k > 0 && next < n; k-- {
			ev := createdEvent(orders[next])
			ev.partition = int32(next % 6)
			evs = append(evs, ev)
			next++
		}
		ep.send(t, evs...)
	}
	send(60)
	waitGroupAtEnd(t, pl, pl.env.Group, 90*time.Second)
	waitGroupAtEnd(t, pl, lgroup, 90*time.Second)
	stop := make(chan struct{})
	sent.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for next < n {
			select {
			case <-stop:
				return
			case <-tick.C:
				send(2)
			}
		}
	})
	// A failed test stops the loader before its producer closes.
	t.Cleanup(func() {
		close(stop)
		sent.Wait()
	})

	refuse(t, pl)
	refused := time.Now()
	unavailable := func(addr, consumer string) float64 {
		m, err := scrapeMetrics(addr)
		if err != nil {
			return 0
		}
		return m.value("eventforge_consumer_unavailable_partitions", "consumer", consumer)
	}
	testenv.Eventually(t, outage, "both consumers reporting partitions unavailable", func() error {
		for _, c := range []struct{ addr, name string }{{faddr, "fulfillment"}, {laddr, "ledger"}} {
			if d := events(mustMetrics(t, c.addr), c.name, "dead_lettered"); d != 0 {
				t.Fatalf("%s dead-lettered %v events while the database refused writes", c.name, d)
			}
			if u := unavailable(c.addr, c.name); u == 0 {
				return fmt.Errorf("%s reports no partition unavailable", c.name)
			}
		}
		return nil
	})
	time.Sleep(time.Until(refused.Add(outage)))
	fu, lu := unavailable(faddr, "fulfillment"), unavailable(laddr, "ledger")
	t.Logf("after %s: unavailable partitions: fulfillment %v, ledger %v", outage, fu, lu)
	if fu == 0 || lu == 0 {
		t.Errorf("unavailable partitions at the end of the outage: fulfillment %v, ledger %v; want both > 0", fu, lu)
	}
	heal(t, pl)
	sent.Wait()
	waitGroupAtEnd(t, pl, pl.env.Group, 2*time.Minute)
	waitGroupAtEnd(t, pl, lgroup, 2*time.Minute)

	c := checker{t: t}
	states := fulfillmentStates(t, pl)
	for _, o := range orders {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: status %q, %d shipments; want processed with one shipment", o.id, s.status, s.shipments)
		}
	}
	for _, name := range []string{"fulfillment", "ledger"} {
		if m := marks(t, pl, name); m != n {
			c.errorf("%s: %d marks, want %d", name, m, n)
		}
	}
	var counted int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(order_count), 0) FROM ledger`).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != n {
		c.errorf("ledger counts %d orders, want %d", counted, n)
	}
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		c.errorf("DLQ holds %d records, want none; first: class %s, %s", len(es), es[0].Class, es[0].Message)
	}
	for _, cn := range []struct{ addr, name string }{{faddr, "fulfillment"}, {laddr, "ledger"}} {
		m := mustMetrics(t, cn.addr)
		if d := events(m, cn.name, "dead_lettered"); d != 0 {
			c.errorf("%s dead-lettered %v events", cn.name, d)
		}
		if u := m.value("eventforge_consumer_unavailable_partitions", "consumer", cn.name); u != 0 {
			c.errorf("%s still reports %v partitions unavailable", cn.name, u)
		}
	}
	c.report()
	t.Logf("dead letters: fulfillment %v, ledger %v; DLQ records %d",
		events(mustMetrics(t, faddr), "fulfillment", "dead_lettered"), events(mustMetrics(t, laddr), "ledger", "dead_lettered"),
		len(readDLQEntries(t, pl, topic)))
}

// execAdmin runs q on the test's database as the superuser.
func execAdmin(t *testing.T, pl *pipeline, q string) {
	t.Helper()
	execAdminOn(t, pl, pl.env.Database, q)
}

// execAdminOn runs q on database as the superuser.
func execAdminOn(t *testing.T, pl *pipeline, database, q string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pl.env.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// setReadOnly makes the test's database read-only for every new session
// (or writable again) and ends its sessions, so none keeps the former
// setting. Only that database is touched (from the database postgres: a
// session on the read-only database could not alter it back).
func setReadOnly(t *testing.T, pl *pipeline, on bool) {
	t.Helper()
	db := pgx.Identifier{pl.env.Database}.Sanitize()
	q := `ALTER DATABASE ` + db + ` SET default_transaction_read_only = on`
	if !on {
		q = `ALTER DATABASE ` + db + ` RESET default_transaction_read_only`
	}
	execAdminOn(t, pl, "postgres", q)
	execAdminOn(t, pl, "postgres", fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'`, pl.env.Database))
	pl.env.Pool.Reset()
}
