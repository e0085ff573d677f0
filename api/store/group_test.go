package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventforge/eventforge/internal/testenv"
)

// groupFixture is a store with ONE writer for key-less creates, and a way
// to hold that writer inside PostgreSQL (a lock on the outbox that its
// insert waits for) while later creates queue behind it.
type groupFixture struct {
	t     *testing.T
	env   *testenv.Env
	store *Store
}

func newGroupFixture(t *testing.T) *groupFixture {
	env := testenv.New(t)
	s := New(env.Pool, WithCreateWriters(1))
	return &groupFixture{t: t, env: env, store: s}
}

// holdOutbox locks the outbox table until the returned release is called.
func (f *groupFixture) holdOutbox() (release func()) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.env.Pool.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox IN EXCLUSIVE MODE`); err != nil {
		f.t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// holdWriter holds the outbox and starts a first create, which takes the
// writer and waits for the lock inside PostgreSQL; creates started after it
// wait for the writer until release is called.
func (f *groupFixture) holdWriter(ctx context.Context) (release func(), first *Order, firstDone <-chan error) {
	f.t.Helper()
	release = f.holdOutbox()
	first, firstEv := newOrder(f.t)
	firstDone = f.create(ctx, first, firstEv)
	waitLocked(f.t, f.env, "outbox")
	return release, first, firstDone
}

// waitPending waits until n creates wait for the writer.
func (f *groupFixture) waitPending(n int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.store.group.mu.Lock()
		got := len(f.store.group.pending)
		f.store.group.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d creates waiting, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// create starts a key-less create of o; its error arrives on the channel.
func (f *groupFixture) create(ctx context.Context, o *Order, ev OutboxEvent) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.store.CreateOrder(ctx, o, ev, nil)
		done <- err
	}()
	return done
}

// transactionsOf returns the number of distinct transactions that wrote the
// outbox rows of orders, and how many of those rows exist.
func (f *groupFixture) transactionsOf(orders ...*Order) (txs, rows int) {
	f.t.Helper()
	ids := make([]string, len(orders))
	for i, o := range orders {
		ids[i] = o.ID.String()
	}
	err := f.env.Pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT xmin::text), count(*) FROM outbox WHERE aggregateid = ANY($1)`, ids).Scan(&txs, &rows)
	if err != nil {
		f.t.Fatal(err)
	}
	return txs, rows
}

// TestCreatesWaitingForTheWriterShareOneTransaction: while the only writer
// is held, the creates that arrive wait; released, they commit together in
// one transaction, each order with its items and its event.
func TestCreatesWaitingForTheWriterShareOneTransaction(t *testing.T) {
	f := newGroupFixture(t)
	ctx := context.Background()
	release, first, firstDone := f.holdWriter(ctx)

	const waiting = 5
	var group []*Order
	var dones []<-chan error
	for range waiting {
		o, ev := newOrder(t)
		group = append(group, o)
		dones = append(dones, f.create(ctx, o, ev))
	}
	f.waitPending(waiting)
	release()

	if err := <-firstDone; err != nil {
		t.Fatalf("first create: %v", err)
	}
	for i, done := range dones {
		if err := <-done; err != nil {
			t.Fatalf("waiting create %d: %v", i, err)
		}
	}
	if txs, rows := f.transactionsOf(group...); txs != 1 || rows != waiting {
		t.Fatalf("the %d waiting creates: %d events in %d transactions, want %d in 1", waiting, rows, txs, waiting)
	}
	if txs, _ := f.transactionsOf(append(group, first)...); txs != 2 {
		t.Fatalf("first create and group: %d transactions, want 2 (the first was written alone)", txs)
	}
	var items int
	ids := []uuid.UUID{first.ID}
	for _, o := range group {
		ids = append(ids, o.ID)
	}
	if err := f.env.Pool.QueryRow(ctx, `SELECT count(*) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.id = ANY($1)`, ids).Scan(&items); err != nil || items != waiting+1 {
		t.Fatalf("orders with their item: %d, %v; want %d", items, err, waiting+1)
	}
}

// TestRefusedGroupIsWrittenAgainOneByOne: when PostgreSQL refuses one
// create of a group, the group rolls back and each create is written alone:
// the bad one fails with PostgreSQL's error, the others commit. The refusal
// is told by the unlocalized severity, so it holds whatever language the
// server writes its messages in (lc_messages).
func TestRefusedGroupIsWrittenAgainOneByOne(t *testing.T) {
	tests := []struct {
		name, lcMessages string
		wantSeverity     string // the localized severity PostgreSQL reports
	}{
		{name: "english", lcMessages: "C", wantSeverity: "ERROR"},
		{name: "german", lcMessages: germanLocale, wantSeverity: "FEHLER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newGroupFixture(t)
			f.env.SetDatabase(t, "lc_messages", tt.lcMessages)
			ctx := context.Background()
			release, _, firstDone := f.holdWriter(ctx)

			good1, ev1 := newOrder(t)
			bad, badEv := newOrder(t)
			bad.Status = "bogus" // orders.status CHECK refuses it
			good2, ev2 := newOrder(t)
			done1 := f.create(ctx, good1, ev1)
			f.waitPending(1)
			badDone := f.create(ctx, bad, badEv)
			f.waitPending(2)
			done2 := f.create(ctx, good2, ev2)
			f.waitPending(3)
			release()

			if err := <-firstDone; err != nil {
				t.Fatalf("first create: %v", err)
			}
			var pgErr *pgconn.PgError
			if err := <-badDone; !errors.As(err, &pgErr) || pgErr.Code != "23514" {
				t.Fatalf("bad create: %v, want a check violation (23514)", err)
			}
			if pgErr.Severity != tt.wantSeverity {
				t.Fatalf("PostgreSQL reported severity %q, want %q: lc_messages %s is not in effect", pgErr.Severity, tt.wantSeverity, tt.lcMessages)
			}
			for name, done := range map[string]<-chan error{"good1": done1, "good2": done2} {
				if err := <-done; err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if txs, rows := f.transactionsOf(good1, good2); txs != 2 || rows != 2 {
				t.Fatalf("good creates: %d events in %d transactions, want 2 in 2 (written alone)", rows, txs)
			}
			if _, rows := f.transactionsOf(bad); rows != 0 {
				t.Fatalf("refused create left %d events", rows)
			}
		})
	}
}

// germanLocale is a locale with PostgreSQL's German message catalog. The
// database server's machine must have it (Debian: `localedef -i de_DE -f
// UTF-8 de_DE.UTF-8`, with `--no-archive` for a server that is already
// running, whose processes keep the locale archive they opened); without it
// ALTER DATABASE … SET lc_messages fails and says so.
const germanLocale = "de_DE.UTF-8"

// TestWaitingCreateWithdrawsWhenItsContextEnds: a create whose caller gives
// up while it waits is not written; the others still are.
func TestWaitingCreateWithdrawsWhenItsContextEnds(t *testing.T) {
	f := newGroupFixture(t)
	ctx := context.Background()
	release, first, firstDone := f.holdWriter(ctx)

	gone, goneEv := newOrder(t)
	kept, keptEv := newOrder(t)
	goneCtx, cancel := context.WithCancel(ctx)
	goneDone := f.create(goneCtx, gone, goneEv)
	f.waitPending(1)
	keptDone := f.create(ctx, kept, keptEv)
	f.waitPending(2)
	cancel()
	if err := <-goneDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn create: %v, want context.Canceled", err)
	}
	f.waitPending(1)
	release()

	for name, done := range map[string]<-chan error{"first": firstDone, "kept": keptDone} {
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, rows := f.transactionsOf(gone); rows != 0 {
		t.Fatalf("withdrawn create wrote %d events", rows)
	}
	if _, rows := f.transactionsOf(first, kept); rows != 2 {
		t.Fatalf("%d events of the other creates, want 2", rows)
	}
}

// TestManyConcurrentCreatesAllCommit: creates from many callers at once,
// with several writers, all commit, each order exactly once with its
// event, and the writers end idle.
func TestManyConcurrentCreatesAllCommit(t *testing.T) {
	env := testenv.New(t)
	s := New(env.Pool, WithCreateWriters(3))
	ctx := context.Background()
	const callers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for range callers {
		wg.Go(func() {
			for range each {
				o, ev := newOrder(t)
				if _, err := s.CreateOrder(ctx, o, ev, nil); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	var orders, events int
	if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox o JOIN orders r ON o.aggregateid = r.id::text)`).Scan(&orders, &events); err != nil {
		t.Fatal(err)
	}
	if orders != callers*each || events != callers*each {
		t.Fatalf("%d orders, %d with their event; want %d", orders, events, callers*each)
	}
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	if s.group.writers != 0 || len(s.group.pending) != 0 {
		t.Fatalf("after the creates: %d writers, %d waiting; want 0, 0", s.group.writers, len(s.group.pending))
	}
}

// waitLocked waits until a backend of env's database waits for a lock on
// table.
func waitLocked(t *testing.T, env *testenv.Env, table string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = $1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no create waits for the lock on %s", table)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
