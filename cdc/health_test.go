package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

func TestLeaderHealth(t *testing.T) {
	const after = time.Minute
	start := time.Now()
	t.Run("no session yet, within the grace", func(t *testing.T) {
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after-time.Second), &progress{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no session streamed for the whole period", func(t *testing.T) {
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after), &progress{}); !errors.Is(err, errUnhealthy) {
			t.Fatalf("check = %v, want unhealthy", err)
		}
	})
	t.Run("a streaming session resets the period", func(t *testing.T) {
		p := &progress{}
		p.attach(checkpoint.New(100))
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after), p); err != nil {
			t.Fatal(err)
		}
		p.detach()
		if err := lh.check(start.Add(after+time.Second), p); err != nil {
			t.Fatalf("a session ended a second ago: %v", err)
		}
	})
	t.Run("events waiting without an acknowledgement for the period", func(t *testing.T) {
		p := &progress{}
		tr := checkpoint.New(100)
		p.attach(tr)
		tr.Add(tr.Begin(start), 10)
		lh := leaderHealth{after: after, streaming: start}
		now := time.Now()
		if err := lh.check(now, p); err != nil {
			t.Fatalf("an event just produced: %v", err)
		}
		if err := lh.check(now.Add(after+time.Second), p); !errors.Is(err, errUnhealthy) {
			t.Fatalf("check = %v, want unhealthy", err)
		}
	})
	t.Run("a zero Health is not ready", func(t *testing.T) {
		var h Health
		if h.Ready() == nil {
			t.Fatal("ready before any report")
		}
		h.report(nil)
		if err := h.Ready(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestControlClosed: a statement the server refuses leaves the control
// connection, and the leadership lock on it, in place; a statement that
// times out closes it.
func TestControlClosed(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := testControl(ctx, t, env)
	if ok, err := tryLock(ctx, ctl, env.Slot); err != nil || !ok {
		t.Fatalf("tryLock = %v, %v", ok, err)
	}
	err := ctl.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT 1 / 0`)
		return err
	})
	if err == nil || ctl.closed() {
		t.Fatalf("after a refused statement: err %v, closed %v; want an error on an open connection", err, ctl.closed())
	}
	var held bool
	if err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $1 AND granted)`,
		ctl.conn.PgConn().PID()).Scan(&held); err != nil || !held {
		t.Fatalf("leadership lock held after a refused statement: %v (%v)", held, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	err = ctl.do(short, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_sleep(5)`)
		return err
	})
	if err == nil || !ctl.closed() {
		t.Fatalf("after a timed-out statement: err %v, closed %v; want the connection closed", err, ctl.closed())
	}
}

// testControl opens a control connection to the test's database, closed
// when the test ends.
func testControl(ctx context.Context, t *testing.T, env *testenv.Env) *control {
	t.Helper()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &control{conn: conn}
}
