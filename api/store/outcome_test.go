package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// cutFixture is a store whose connections run through a blackhole in front
// of the test's database, so that a test can hold every byte between the
// store and PostgreSQL (a network that drops packets), while it watches and
// steers PostgreSQL over the Env's own, direct pool.
type cutFixture struct {
	t     *testing.T
	env   *testenv.Env
	bh    *testenv.Blackhole
	store *Store
	// resolving receives once per resolution the store starts.
	resolving chan struct{}
}

func newCutFixture(t *testing.T, opts ...Option) *cutFixture {
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
	t.Cleanup(func() {
		bh.Unblock()
		pool.Close()
	})
	f := &cutFixture{t: t, env: env, bh: bh, resolving: make(chan struct{}, 16)}
	f.store = New(pool, append([]Option{WithCreateWriters(1), WithResolveTimeout(time.Second)}, opts...)...)
	f.store.resolver.started = func() { f.resolving <- struct{}{} }
	return f
}

// warm writes one order through the store, so that its connection has
// the create's statements prepared: preparing an insert locks its table
// too, and the tests hold the write, not its preparation.
func (f *cutFixture) warm() {
	f.t.Helper()
	o, ev := newOrder(f.t)
	if _, err := f.store.CreateOrder(context.Background(), o, ev, nil); err != nil {
		f.t.Fatalf("warming the store's connection: %v", err)
	}
}

// createResult is the outcome of one CreateOrder.
type createResult struct {
	c   Created
	err error
}

// createAsync runs CreateOrder in a goroutine; its outcome arrives on the
// channel.
func (f *cutFixture) createAsync(ctx context.Context, o *Order, ev OutboxEvent, key *IdempotencyKey) <-chan createResult {
	done := make(chan createResult, 1)
	go func() {
		c, err := f.store.CreateOrder(ctx, o, ev, key)
		done <- createResult{c, err}
	}()
	return done
}

// blockBeforeCommit arms the before-commit point of the next write to cut
// the network there: after its statements ran, before its COMMIT is sent.
// The channel receives once the network is cut.
func (f *cutFixture) blockBeforeCommit() <-chan struct{} {
	f.t.Helper()
	held := make(chan struct{}, 1)
	failpoint.OnFire = func(string, failpoint.Action) {
		f.bh.Block()
		held <- struct{}{}
	}
	if err := failpoint.Arm(failpoint.APIBeforeCommit + "=1*delay(1ms)"); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { failpoint.OnFire = nil; _ = failpoint.Arm("") })
	return held
}

// begin opens a transaction on the direct pool, rolled back by the returned
// function (and at the end of the test).
func (f *cutFixture) begin() (pgx.Tx, func()) {
	f.t.Helper()
	tx, err := f.env.Pool.Begin(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	rollback := func() { _ = tx.Rollback(context.Background()) }
	f.t.Cleanup(rollback)
	return tx, rollback
}

// lockOutbox locks the outbox table, on the direct pool, until the
// returned function is called: a create's outbox insert waits for it.
func (f *cutFixture) lockOutbox() (release func()) {
	f.t.Helper()
	tx, release := f.begin()
	if _, err := tx.Exec(context.Background(), `LOCK TABLE outbox IN EXCLUSIVE MODE`); err != nil {
		f.t.Fatal(err)
	}
	return release
}

// exists reports which of the orders are stored.
func (f *cutFixture) exists(orders ...*Order) map[uuid.UUID]bool {
	f.t.Helper()
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	rows, err := f.env.Pool.Query(context.Background(), `SELECT id FROM orders WHERE id = ANY($1)`, ids)
	if err != nil {
		f.t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[uuid.UUID]bool{}
	for _, id := range found {
		out[id] = true
	}
	return out
}

// waitBlocked waits until a backend of the database waits for a lock of
// the given type held by another transaction.
func (f *cutFixture) waitBlocked(locktype string) {
	f.t.Helper()
	testenv.Eventually(f.t, 10*time.Second, "a write waiting for a "+locktype+" lock", func() error {
		var n int
		err := f.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND locktype = $1
			AND (database IS NULL OR database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, locktype).Scan(&n)
		if err == nil && n == 0 {
			err = fmt.Errorf("none waits")
		}
		return err
	})
}

// TestGroupCutAfterSyncIsOutcomeUnknown: a group commit whose connection is
// cut after the Sync, with PostgreSQL out of reach until the store has
// given up finding out what became of it: every create of the group is
// answered ErrOutcomeUnknown with its own order and event IDs, never "not
// written" — and the group did commit.
func TestGroupCutAfterSyncIsOutcomeUnknown(t *testing.T) {
	f := newCutFixture(t)
	ctx := context.Background()

	// The first create takes the writer and waits inside PostgreSQL for a
	// lock on the outbox; the group queues behind it.
	releaseLock := f.lockOutbox()
	first, firstEv := newOrder(t)
	firstDone := make(chan error, 1)
	go func() { _, err := f.store.CreateOrder(ctx, first, firstEv, nil); firstDone <- err }()
	f.waitBlocked("relation")

	const members = 5
	type member struct {
		o    *Order
		ev   OutboxEvent
		done chan error
	}
	group := make([]member, members)
	for i := range group {
		o, ev := newOrder(t)
		group[i] = member{o: o, ev: ev, done: make(chan error, 1)}
	}
	// An uncommitted row with the first member's order ID holds the
	// group's first insert inside PostgreSQL, after its Sync was sent.
	rowTx, releaseRow := f.begin()
	o := group[0].o
	if _, err := rowTx.Exec(ctx, insertOrderSQL, o.ID, o.CustomerID, o.Currency, o.TotalCents, o.Status, o.CreatedAt, o.UpdatedAt); err != nil {
		t.Fatal(err)
	}
	for i, m := range group {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		t.Cleanup(cancel)
		go func() { _, err := f.store.CreateOrder(mctx, m.o, m.ev, nil); m.done <- err }()
		waitPending(t, f.store, i+1)
	}
	releaseLock()
	if err := <-firstDone; err != nil {
		t.Fatalf("first create: %v", err)
	}
	f.waitBlocked("transactionid")

	// Cut: PostgreSQL commits the group, its answer never arrives, and
	// the store cannot reach PostgreSQL to find out.
	f.bh.Block()
	releaseRow()
	var all []*Order
	for _, m := range group {
		all = append(all, m.o)
	}
	testenv.Eventually(t, 10*time.Second, "the group committed", func() error {
		if n := len(f.exists(all...)); n != members {
			return fmt.Errorf("%d of %d orders committed", n, members)
		}
		return nil
	})
	for i, m := range group {
		err := <-m.done
		var we *WriteError
		if !errors.As(err, &we) || !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotWritten) {
			t.Errorf("member %d: %v; want a *WriteError with ErrOutcomeUnknown", i, err)
			continue
		}
		if we.OrderID != m.o.ID || we.EventID != m.ev.ID {
			t.Errorf("member %d: answered with order %s, event %s; want its own %s, %s", i, we.OrderID, we.EventID, m.o.ID, m.ev.ID)
		}
	}
	f.bh.Unblock()
}

// TestLostCommitAnswerIsFoundOut: a write whose commit was sent and whose
// answer was lost, with PostgreSQL reachable again, is answered with what
// became of it — success when it committed, ErrNotWritten when it rolled
// back — and what is answered is what the database holds, for a create
// without a key (one pipeline), with a key (BEGIN … COMMIT), and a cancel.
func TestLostCommitAnswerIsFoundOut(t *testing.T) {
	t.Run("without key, committed", func(t *testing.T) {
		f := newCutFixture(t)
		f.warm()
		ctx := context.Background()
		releaseLock := f.lockOutbox()
		o, ev := newOrder(t)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		done := f.createAsync(cctx, o, ev, nil)
		f.waitBlocked("relation")
		f.bh.Block()
		releaseLock()
		testenv.Eventually(t, 10*time.Second, "the order committed", func() error {
			if !f.exists(o)[o.ID] {
				return errors.New("not yet")
			}
			return nil
		})
		<-f.resolving // the deadline passed; the answer is lost
		f.bh.Unblock()
		r := <-done
		if r.err != nil || !r.c.Recovered || r.c.OrderID != o.ID || r.c.EventID != ev.ID {
			t.Fatalf("got %+v, %v; want the order, recovered", r.c, r.err)
		}
	})

	t.Run("without key, rolled back", func(t *testing.T) {
		f := newCutFixture(t)
		f.warm()
		ctx := context.Background()
		releaseLock := f.lockOutbox()
		o, ev := newOrder(t)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		// The deadline passes while the create, its Sync sent, waits for
		// the lock inside PostgreSQL, which would commit it once the lock
		// is free: the store ends that backend and finds nothing.
		_, err := f.store.CreateOrder(cctx, o, ev, nil)
		var we *WriteError
		if !errors.As(err, &we) || !errors.Is(err, ErrNotWritten) || !errors.Is(err, context.DeadlineExceeded) || we.OrderID != o.ID {
			t.Fatalf("got %v; want ErrNotWritten for order %s after the deadline", err, o.ID)
		}
		select {
		case <-f.resolving:
		default:
			t.Fatal("the store answered without finding out: the Sync was not sent")
		}
		// Its backend has exited: nothing of it commits once the lock is
		// free.
		releaseLock()
		if f.exists(o)[o.ID] {
			t.Fatalf("order %s answered not written is stored", o.ID)
		}
	})

	t.Run("with key", func(t *testing.T) {
		// COMMIT is held by the cut network, delivered when it heals, and
		// the store finds out from then on: its answer is success exactly
		// when the order is stored.
		f := newCutFixture(t)
		ctx := context.Background()
		held := f.blockBeforeCommit()
		o, ev := newOrder(t)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		done := f.createAsync(cctx, o, ev, &IdempotencyKey{Key: "k-lost", RequestHash: []byte("h")})
		<-held
		<-f.resolving
		f.bh.Unblock()
		r := <-done
		stored := f.exists(o)[o.ID]
		switch {
		case r.err == nil && r.c.Recovered && stored:
		case errors.Is(r.err, ErrNotWritten) && !stored:
		default:
			t.Fatalf("answered %+v, %v with the order stored: %v; want success exactly when it is stored", r.c, r.err, stored)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		f := newCutFixture(t)
		ctx := context.Background()
		o, ev := newOrder(t)
		if _, err := f.store.CreateOrder(ctx, o, ev, nil); err != nil {
			t.Fatal(err)
		}
		held := f.blockBeforeCommit()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		at := time.Now().UTC().Truncate(time.Microsecond)
		done := make(chan struct {
			c   Cancelled
			err error
		}, 1)
		go func() {
			c, err := f.store.CancelOrder(cctx, o.ID, at, func(o Order) (OutboxEvent, error) {
				return OutboxEvent{ID: uuid.Must(uuid.NewV7()), AggregateID: o.ID.String(), Payload: []byte(`{}`)}, nil
			})
			done <- struct {
				c   Cancelled
				err error
			}{c, err}
		}()
		<-held
		<-f.resolving
		f.bh.Unblock()
		r := <-done
		var status string
		if err := f.env.Pool.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, o.ID).Scan(&status); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.err == nil && r.c.Changed && status == StatusCancelled:
		case errors.Is(r.err, ErrNotWritten) && status == StatusCreated:
		default:
			t.Fatalf("answered %+v, %v with the order in status %s; want success exactly when it is cancelled", r.c, r.err, status)
		}
	})
}

// waitPending waits until n creates wait for s's writer.
func waitPending(t *testing.T, s *Store, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d creates waiting", n), func() error {
		s.group.mu.Lock()
		got := len(s.group.pending)
		s.group.mu.Unlock()
		if got != n {
			return fmt.Errorf("%d waiting", got)
		}
		return nil
	})
}
