package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Group commit of creates without an idempotency key.
//
// Creates that arrive while the writers (WithCreateWriters, one by default)
// are all writing wait, and the next writer commits all of them (up to
// maxGroup) in ONE transaction: one pipeline, one Sync, one commit. Each order still has
// its outbox event in the same transaction as itself; what the orders of a
// group share is the commit, so the CDC reader sees them as one transaction.
// A create that finds a writer free writes alone, at once: below the load
// that keeps every writer busy nothing waits and nothing is grouped.
//
// Why one writer by default: the cost of a create, in the api and in
// PostgreSQL, is mostly per transaction (round trip, wakeups, commit), and
// PostgreSQL flushes the WAL of concurrent commits one flush at a time
// anyway. With one writer, the creates of a burst share one commit instead
// of each paying for its own: on a 2-core machine at 2,000 orders/s this
// halved PostgreSQL's CPU per order and cut the api's by a sixth
// (docs/api.md). One writer's ceiling is what one PostgreSQL backend
// executes (about 5,000–6,000 orders/s there, sharing 2 cores with
// everything else); more writers raise it, for fewer orders per commit.
//
// Failure windows:
//   - PostgreSQL refuses a statement of a group (severity ERROR: the
//     implicit transaction rolled back, nothing of the group is committed):
//     every create of the group is written again alone, so one bad order
//     fails by itself and the others commit.
//   - The connection fails, or the commit's reply is lost: every create of
//     the group gets the error (ErrUnavailable). As for a create written
//     alone, the outcome is unknown to the caller; an idempotency key is how
//     a caller retries safely.
//   - A caller whose context ends while its create waits gets the context's
//     error and its create is not written. Once its group is being written,
//     the group's context (the latest deadline of its members) governs the
//     write; a caller that gives up then has the same unknown outcome as a
//     caller whose deadline passes during a write alone.
const (
	// DefaultCreateWriters is the default of WithCreateWriters.
	DefaultCreateWriters = 1
	// maxGroup bounds the creates of one transaction.
	maxGroup = 64
)

// groupSize counts the creates of each key-less create transaction. It is
// registered by the first New, so that only a process that writes orders
// exports it (the binary links this package into every component).
var (
	groupSize         prometheus.Histogram
	registerGroupSize sync.Once
)

func registerMetrics() {
	registerGroupSize.Do(func() {
		groupSize = promauto.NewHistogram(prometheus.HistogramOpts{
			Name:    "eventforge_api_create_group_size",
			Help:    "Orders committed per transaction of creates without an idempotency key (1: written alone).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		})
	})
}

// pendingCreate is one create waiting to be written.
type pendingCreate struct {
	ctx   context.Context
	stmts []statement
	// done receives the create's outcome, or lead: the receiver writes the
	// next group.
	done chan groupResult
}

type groupResult struct {
	err  error
	lead bool
	// alone: write this create by itself (its group was refused).
	alone bool
}

// groupCommitter gathers concurrent key-less creates into shared
// transactions; see the comment at the top of this file.
type groupCommitter struct {
	pool       *pgxpool.Pool
	maxWriters int // WithCreateWriters

	mu      sync.Mutex
	pending []*pendingCreate
	writers int // groups being written, at most maxWriters
}

// create writes stmts (one order's statements) in a transaction, shared
// with the creates waiting beside it when all writers are busy.
func (g *groupCommitter) create(ctx context.Context, stmts []statement) error {
	p := &pendingCreate{ctx: ctx, stmts: stmts, done: make(chan groupResult, 1)}
	g.mu.Lock()
	if g.writers < g.maxWriters && len(g.pending) == 0 {
		// A writer is free and nothing waits: write alone, now.
		g.writers++
		g.mu.Unlock()
		err := execPipeline(ctx, g.pool, stmts, false, beforeCommit)
		groupSize.Observe(1)
		g.handOff()
		return err
	}
	g.pending = append(g.pending, p)
	g.mu.Unlock()

	for {
		var r groupResult
		select {
		case r = <-p.done:
		case <-ctx.Done():
			if g.withdraw(p) {
				return ctx.Err()
			}
			r = <-p.done // taken into a group: its outcome comes
		}
		switch {
		case r.lead:
			g.lead(p)
			continue // p was in the group just written: its outcome is in done
		case r.alone:
			err := execPipeline(ctx, g.pool, stmts, false, beforeCommit)
			groupSize.Observe(1)
			return err
		}
		return r.err
	}
}

// withdraw removes p from the waiting creates; false when a writer has
// already taken it.
func (g *groupCommitter) withdraw(p *pendingCreate) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.pending {
		if q == p {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// handOff ends a write: the first waiting create, if any, is told to write
// the next group (it keeps the writer's slot); otherwise the slot is freed.
func (g *groupCommitter) handOff() {
	g.mu.Lock()
	if len(g.pending) == 0 {
		g.writers--
		g.mu.Unlock()
		return
	}
	// next leaves pending here, so it can no longer withdraw: it will read
	// the lead, and write itself in the group it leads.
	next := g.pending[0]
	g.pending = g.pending[1:]
	g.mu.Unlock()
	next.done <- groupResult{lead: true}
}

// lead writes the next group: self (the create just handed the lead) and
// the waiting creates, oldest first, up to maxGroup in all. It holds a
// writer's slot, which handOff passes on.
func (g *groupCommitter) lead(self *pendingCreate) {
	g.mu.Lock()
	n := min(len(g.pending), maxGroup-1)
	group := make([]*pendingCreate, 0, n+1)
	group = append(group, self)
	group = append(group, g.pending[:n]...)
	g.pending = g.pending[n:]
	g.mu.Unlock()
	g.write(group)
	g.handOff()
}

// write commits group in one transaction and tells each member its outcome.
func (g *groupCommitter) write(group []*pendingCreate) {
	live := group[:0]
	var deadline time.Time
	unbounded := false // a member without a deadline: the group has none
	for _, p := range group {
		if err := p.ctx.Err(); err != nil {
			p.done <- groupResult{err: err}
			continue
		}
		d, ok := p.ctx.Deadline()
		unbounded = unbounded || !ok
		if d.After(deadline) {
			deadline = d
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.WithoutCancel(live[0].ctx)
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var stmts []statement
	for _, p := range live {
		stmts = append(stmts, p.stmts...)
	}
	err := execPipeline(ctx, g.pool, stmts, false, beforeCommit)
	groupSize.Observe(float64(len(live)))
	refused := len(live) > 1 && rolledBack(err)
	for _, p := range live {
		p.done <- groupResult{err: err, alone: refused}
	}
}

// rolledBack reports whether err is PostgreSQL refusing a statement or the
// commit of an implicit transaction, which it then rolled back: nothing of
// it was committed.
func rolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
}
