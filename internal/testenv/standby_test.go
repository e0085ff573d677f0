package testenv_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
)

const (
	failoverRows  = 200
	failoverSlot  = "failover_check"
	failoverTable = "failover_rows"
)

// TestFailoverSlotSurvivesPromotion17 builds a PostgreSQL 17 primary with a
// synchronous standby that synchronises failover slots, creates a failover
// logical slot, writes rows, waits until the slot is synced (and not
// temporary) on the standby, SIGKILLs the primary and promotes the standby:
// every row and the slot are there, the slot decodes a change made after the
// promotion, and a multi-host DSN reaches the writable server before and
// after the failover.
func TestFailoverSlotSurvivesPromotion17(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	begin := time.Now()
	p := testenv.NewPrivate(t, testenv.WithPGVersion(17), testenv.WithoutKafka())
	sb := p.AddStandby(t, testenv.Synchronous(), testenv.FailoverSlotSync())
	t.Logf("primary (port %d) and standby (port %d) up in %v", p.Config.PGPort, sb.Port, time.Since(begin).Round(time.Millisecond))

	primary := connect(ctx, t, p.Endpoints.PostgresDSN)
	mustExec(ctx, t, primary, `CREATE TABLE `+failoverTable+` (id int PRIMARY KEY)`)
	mustExec(ctx, t, primary, `CREATE PUBLICATION failover_pub FOR TABLE `+failoverTable)
	mustExec(ctx, t, primary, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, failoverSlot)
	insertRows(ctx, t, primary, 1, failoverRows)
	// The slot's reader confirms what it read: advance it to the end.
	mustExec(ctx, t, primary, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, failoverSlot)

	// Before the failover a multi-host DSN that lists the standby first
	// still lands on the primary.
	reversed := testenv.MultiHostDSN(t, p.Endpoints.PostgresDSN, sb.Port, p.Config.PGPort)
	checkLandsOn(ctx, t, reversed, p.Config.PGPort)

	// A reader keeps confirming while the standby catches up: the slot's
	// restart point and catalog xmin move only to a running-transactions
	// record the slot has decoded past, which the helper logs and this
	// reader then confirms past.
	stopReading := confirmContinuously(ctx, t, p.Endpoints.AdminDSN, failoverSlot)
	syncBegin := time.Now()
	sb.WaitSlotSynced(t, failoverSlot, 2*time.Minute)
	stopReading()
	t.Logf("slot synced and persistent on the standby after %v", time.Since(syncBegin).Round(time.Millisecond))
	primary.Close(ctx)

	p.KillPrimary(t)
	promoteBegin := time.Now()
	sb.Promote(t)
	t.Logf("standby promoted in %v", time.Since(promoteBegin).Round(time.Millisecond))

	dsn := sb.MultiHostDSN(t, p.Endpoints.PostgresDSN)
	checkLandsOn(ctx, t, dsn, sb.Port)
	promoted := connect(ctx, t, dsn)
	checkRows(ctx, t, promoted, failoverRows)
	var slotType string
	var failover bool
	err := promoted.QueryRow(ctx, `SELECT slot_type, failover FROM pg_replication_slots WHERE slot_name = $1`, failoverSlot).Scan(&slotType, &failover)
	if err != nil {
		t.Fatalf("slot %s on the promoted standby: %v", failoverSlot, err)
	}
	if slotType != "logical" || !failover {
		t.Errorf("slot %s on the promoted standby: type %s failover %v, want a logical failover slot", failoverSlot, slotType, failover)
	}
	// The slot streams from where the old primary left it: the next insert
	// is the only one it decodes.
	insertRows(ctx, t, promoted, failoverRows+1, failoverRows+1)
	var inserts int
	err = promoted.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'failover_pub') WHERE get_byte(data, 0) = ascii('I')`, failoverSlot).Scan(&inserts)
	if err != nil {
		t.Fatalf("reading slot %s on the promoted standby: %v", failoverSlot, err)
	}
	if inserts != 1 {
		t.Errorf("slot %s decoded %d inserts after the promotion, want 1", failoverSlot, inserts)
	}
	t.Logf("whole failover test took %v", time.Since(begin).Round(time.Millisecond))
}

// TestPromotionWithoutSlotSync15 is the same failover on PostgreSQL 15 with a
// synchronous standby: every acknowledged row is on the promoted standby,
// and the logical slot is not (15 does not synchronise slots).
func TestPromotionWithoutSlotSync15(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	begin := time.Now()
	p := testenv.NewPrivate(t, testenv.WithPGVersion(15), testenv.WithoutKafka())
	sb := p.AddStandby(t, testenv.Synchronous())

	primary := connect(ctx, t, p.Endpoints.PostgresDSN)
	mustExec(ctx, t, primary, `CREATE TABLE `+failoverTable+` (id int PRIMARY KEY)`)
	mustExec(ctx, t, primary, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, failoverSlot)
	insertRows(ctx, t, primary, 1, failoverRows)
	var slots int
	if err := primary.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, failoverSlot).Scan(&slots); err != nil || slots != 1 {
		t.Fatalf("slot %s on the primary: count %d, %v", failoverSlot, slots, err)
	}
	primary.Close(ctx)

	p.KillPrimary(t)
	sb.Promote(t)

	dsn := sb.MultiHostDSN(t, p.Endpoints.PostgresDSN)
	checkLandsOn(ctx, t, dsn, sb.Port)
	promoted := connect(ctx, t, dsn)
	checkRows(ctx, t, promoted, failoverRows)
	if err := promoted.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("the promoted PostgreSQL 15 standby has %d logical slots, want 0", slots)
	}
	t.Logf("whole failover test took %v", time.Since(begin).Round(time.Millisecond))
}

// confirmContinuously advances slot to the primary's current WAL position
// every 200 ms, as a reader confirming everything it read would, until the
// returned function is called or the test ends.
func confirmContinuously(ctx context.Context, t *testing.T, dsn, slot string) (stop func()) {
	t.Helper()
	conn := connect(ctx, t, dsn)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, slot); err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				done <- err
				return
			}
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("advancing slot %s: %v", slot, err)
			}
		})
	}
	// Before the connection's own cleanup, should the test end early.
	t.Cleanup(stop)
	return stop
}

func connect(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertRows commits one transaction per id from first to last.
func insertRows(ctx context.Context, t *testing.T, conn *pgx.Conn, first, last int) {
	t.Helper()
	for id := first; id <= last; id++ {
		mustExec(ctx, t, conn, `INSERT INTO `+failoverTable+` (id) VALUES ($1)`, id)
	}
}

// checkRows checks that the table holds exactly the ids 1..n.
func checkRows(ctx context.Context, t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	var count, lo, hi int
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0) FROM `+failoverTable).Scan(&count, &lo, &hi)
	if err != nil {
		t.Fatalf("counting rows: %v", err)
	}
	if count != n || lo != 1 || hi != n {
		t.Errorf("rows after the failover: %d (ids %d..%d), want %d (ids 1..%d)", count, lo, hi, n, n)
	}
}

// checkLandsOn connects with dsn and checks it reached the writable server
// on port.
func checkLandsOn(ctx context.Context, t *testing.T, dsn string, port int) {
	t.Helper()
	conn := connect(ctx, t, dsn)
	var got int
	var recovery bool
	if err := conn.QueryRow(ctx, `SELECT inet_server_port(), pg_is_in_recovery()`).Scan(&got, &recovery); err != nil {
		t.Fatal(err)
	}
	if got != port || recovery {
		t.Errorf("%s reached port %d (in recovery: %v), want the writable server on %d", dsn, got, recovery, port)
	}
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE landed (x int)`); err != nil {
		t.Errorf("writing through %s: %v", dsn, err)
	}
	conn.Close(ctx)
}
