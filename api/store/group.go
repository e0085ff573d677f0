package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
// of each paying for its own, which lowers PostgreSQL's and the api's CPU
// per order (docs/bench.md, *Group commit of creates*). One writer's
// ceiling is what one PostgreSQL backend executes; more writers raise it,
// for fewer orders per commit.
//
// Failure windows:
//   - PostgreSQL refuses a statement of a group (its unlocalized severity is
//     ERROR: the implicit transaction rolled back, nothing of the group is
//     committed): every create of the group is written again alone, so one
//     bad order fails by itself and the others commit.
//   - The connection fails before the Sync left: nothing of the group was
//     committed; every create gets ErrNotWritten.
//   - The connection fails, or the deadline passes, after the Sync left:
//     the group's writer settles the transaction once for all its creates
//     (resolve.go). Committed: every create succeeds. Rolled back: every
//     create gets ErrNotWritten. Not found out: every create gets
//     ErrOutcomeUnknown with its own order and event IDs, never "not
//     written".
//   - A caller whose context ends while its create waits gets the context's
//     error, with ErrNotWritten: its create is withdrawn. Once its group is
//     being written, the group's context (the latest deadline of its
//     members, not their cancellation) governs the write, and a caller that
//     gives up then is told what the group's write came to, as a caller of
//     a create written alone is.
const (
	// DefaultCreateWriters is the default of WithCreateWriters.
	DefaultCreateWriters = 1
	// maxGroup bounds the creates of one transaction.
	maxGroup = 64
)

// pendingCreate is one create waiting to be written.
type pendingCreate struct {
	ctx              context.Context
	stmts            []statement
	orderID, eventID uuid.UUID
	// done receives the create's outcome, or lead: the receiver writes the
	// next group.
	done chan groupResult
}

type groupResult struct {
	err error
	// recovered: the commit's answer was lost, the group found committed.
	recovered bool
	lead      bool
	// alone: write this create by itself (its group was refused).
	alone bool
}

// groupCommitter gathers concurrent key-less creates into shared
// transactions; see the comment at the top of this file.
type groupCommitter struct {
	pool       *pgxpool.Pool
	resolver   *resolver
	maxWriters int // WithCreateWriters

	mu      sync.Mutex
	pending []*pendingCreate
	writers int // groups being written, at most maxWriters
}

// create writes stmts (one order's statements: order orderID, event
// eventID) in a transaction, shared with the creates waiting beside it when
// all writers are busy. Its error is a *WriteError; recovered is true when
// the commit's answer was lost and the transaction found committed.
func (g *groupCommitter) create(ctx context.Context, stmts []statement, orderID, eventID uuid.UUID) (recovered bool, err error) {
	p := &pendingCreate{ctx: ctx, stmts: stmts, orderID: orderID, eventID: eventID, done: make(chan groupResult, 1)}
	g.mu.Lock()
	if g.writers < g.maxWriters && len(g.pending) == 0 {
		// A writer is free and nothing waits: write alone, now.
		g.writers++
		g.mu.Unlock()
		recovered, err := g.alone(p)
		g.handOff()
		return recovered, err
	}
	g.pending = append(g.pending, p)
	g.mu.Unlock()

	for {
		var r groupResult
		select {
		case r = <-p.done:
		case <-ctx.Done():
			if g.withdraw(p) {
				return false, &WriteError{Outcome: ErrNotWritten, OrderID: orderID, EventID: eventID, Err: ctx.Err()}
			}
			r = <-p.done // taken into a group: its outcome comes
		}
		switch {
		case r.lead:
			g.lead(p)
			continue // p was in the group just written: its outcome is in done
		case r.alone:
			return g.alone(p)
		}
		return r.recovered, r.err
	}
}

// alone writes p in a transaction of its own, under its caller's deadline
// but not its cancellation.
func (g *groupCommitter) alone(p *pendingCreate) (recovered bool, err error) {
	ctx, cancel := detach(p.ctx)
	defer cancel()
	a, err := execPipeline(ctx, g.pool, p.stmts, false, beforeCommit)
	groupSize.Observe(1)
	if err == nil {
		return false, nil
	}
	outcome, cause := g.resolver.settle(ctx, err, a, ordersExist(p.orderID), 1)
	if outcome == nil {
		return true, nil
	}
	return false, &WriteError{Outcome: outcome, OrderID: p.orderID, EventID: p.eventID, Err: cause}
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
			p.done <- groupResult{err: &WriteError{Outcome: ErrNotWritten, OrderID: p.orderID, EventID: p.eventID, Err: err}}
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
	var (
		stmts []statement
		ids   []uuid.UUID
	)
	for _, p := range live {
		stmts = append(stmts, p.stmts...)
		ids = append(ids, p.orderID)
	}
	a, err := execPipeline(ctx, g.pool, stmts, false, beforeCommit)
	groupSize.Observe(float64(len(live)))
	if err != nil && len(live) > 1 && refused(err) {
		for _, p := range live {
			p.done <- groupResult{alone: true}
		}
		return
	}
	var outcome, cause error
	if err != nil {
		outcome, cause = g.resolver.settle(ctx, err, a, ordersExist(ids...), len(live))
	}
	for _, p := range live {
		r := groupResult{recovered: err != nil && outcome == nil}
		if outcome != nil {
			r.err = &WriteError{Outcome: outcome, OrderID: p.orderID, EventID: p.eventID, Err: cause}
		}
		p.done <- r
	}
}

// refused reports whether err is PostgreSQL refusing a statement or the
// commit of an implicit transaction, which it then rolled back: nothing of
// it was committed. The unlocalized severity is the one to read: the
// localized one follows lc_messages ("FEHLER" in German).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR"
}
