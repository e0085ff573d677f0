package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestClosed: a statement the server refuses leaves the control connection,
// and an advisory lock on it, in place; a statement that times out closes
// it.
func TestClosed(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl, err := control.Open(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close(context.Background()) })
	err = ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_advisory_lock(1, 2)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = ctl.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT 1 / 0`)
		return err
	})
	if err == nil || ctl.Closed() {
		t.Fatalf("after a refused statement: err %v, closed %v; want an error on an open connection", err, ctl.Closed())
	}
	var held bool
	if err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted)`,
		ctl.PID()).Scan(&held); err != nil || !held {
		t.Fatalf("lock held after a refused statement: %v (%v)", held, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	err = ctl.Do(short, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_sleep(5)`)
		return err
	})
	if err == nil || !ctl.Closed() {
		t.Fatalf("after a timed-out statement: err %v, closed %v; want the connection closed", err, ctl.Closed())
	}
}

// TestSlotConnRedials: the connection to the slot's server (a standby the
// relay decodes on) holds no lock, so after it broke — the server
// terminated it, as a restart does — the next statement dials again.
func TestSlotConnRedials(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slots, err := control.OpenSlotConn(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slots.Close(context.Background()) })
	backend := func() (pid int32, err error) {
		err = slots.Do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
		})
		return pid, err
	}
	first, err := backend()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, first); err != nil {
		t.Fatal(err)
	}
	// The statement that meets the terminated backend fails; the next one
	// runs on a new connection.
	_, _ = backend()
	second, err := backend()
	if err != nil || second == first {
		t.Fatalf("after the backend was terminated: pid %d (was %d), err %v; want a new connection", second, first, err)
	}
	if got := slots.Database(); got != env.Database {
		t.Fatalf("Database() = %q, want %q", got, env.Database)
	}
}
