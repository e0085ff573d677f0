// Package store persists orders. Its one invariant: an order and its outbox
// event are written in ONE PostgreSQL transaction, so the CDC reader sees
// both or neither.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/failpoint"
)

// Order statuses as stored.
const (
	StatusCreated   = "created"
	StatusProcessed = "processed"
	StatusCancelled = "cancelled"
)

// Item is one order line.
type Item struct {
	SKU            string
	Quantity       int32
	UnitPriceCents int64
}

// Order is an order as stored.
type Order struct {
	ID         uuid.UUID
	CustomerID string
	Currency   string
	Items      []Item
	TotalCents int64
	Status     string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// OutboxEvent is one outbox row.
type OutboxEvent struct {
	ID            uuid.UUID
	AggregateType string
	AggregateID   string
	Type          string
	Payload       []byte // JSON
	Headers       map[string]string
}

// IdempotencyKey identifies a create request: a retry carries the same Key and
// the same RequestHash (a digest of the request's content).
type IdempotencyKey struct {
	Key         string
	RequestHash []byte
}

// Created is the outcome of CreateOrder.
type Created struct {
	// Replayed is true when the idempotency key was already recorded for the
	// same request: nothing was written and OrderID and EventID are those of
	// the first call.
	Replayed bool
	OrderID  uuid.UUID
	EventID  uuid.UUID
	// Recovered is true when the commit's answer was lost and the store
	// found the transaction committed (resolve.go).
	Recovered bool
}

// Store reads and writes orders through a pgx pool.
type Store struct {
	pool     *pgxpool.Pool
	group    *groupCommitter
	resolver *resolver
}

// Option configures a Store.
type Option func(*Store)

// WithCreateWriters bounds the transactions of creates without an
// idempotency key being written at once (DefaultCreateWriters); creates
// that arrive while all are busy share the next one's commit (group.go).
// n below 1 is taken as 1.
func WithCreateWriters(n int) Option {
	return func(s *Store) { s.group.maxWriters = max(n, 1) }
}

// New returns a Store using pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	registerMetrics()
	r := &resolver{pool: pool, timeout: DefaultResolveTimeout}
	s := &Store{pool: pool, resolver: r, group: &groupCommitter{pool: pool, resolver: r, maxWriters: DefaultCreateWriters}}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// CreateOrder inserts the order, its items and its outbox event in one
// transaction. The order's CreatedAt and UpdatedAt are stored as given.
//
// With a key, the key's row is inserted first in the same transaction. When
// the key is already recorded (or being recorded by a concurrent transaction,
// which CreateOrder then waits for), nothing is written: for the same request
// hash the result is Replayed with the first call's IDs, for another hash the
// error is ErrKeyReused.
//
// The write runs under ctx's deadline but not its cancellation: once begun,
// it is not cut off because its caller went away. Any other failure is a
// *WriteError: ErrNotWritten, or, when the commit was sent, its answer lost
// and the store could not find out what became of it, ErrOutcomeUnknown.
// A write whose answer was lost but which the store found committed is a
// success (Recovered).
func (s *Store) CreateOrder(ctx context.Context, o *Order, ev OutboxEvent, key *IdempotencyKey) (Created, error) {
	headerJSON, err := encodeHeaders(ev.Headers)
	if err != nil {
		return Created{}, &WriteError{Outcome: ErrNotWritten, OrderID: o.ID, EventID: ev.ID, Err: err}
	}
	skus := make([]string, len(o.Items))
	qtys := make([]int32, len(o.Items))
	prices := make([]int64, len(o.Items))
	for i, it := range o.Items {
		skus[i], qtys[i], prices[i] = it.SKU, it.Quantity, it.UnitPriceCents
	}

	writes := append(orderStatements(o, skus, qtys, prices), outboxStatement(ev, headerJSON))
	created := Created{OrderID: o.ID, EventID: ev.ID}
	if key == nil {
		// One round trip: the writes go out in one pipeline, one implicit
		// transaction that its Sync commits. Only the idempotency key's
		// conditional read needs an explicit transaction.
		// An armed before-commit point holds statements PostgreSQL has
		// executed; otherwise they leave with the Sync, in one write.
		// Under load, concurrent creates share the transaction (group.go).
		if failpoint.IsArmed(failpoint.APIBeforeCommit) {
			created.Recovered, err = s.writeAlone(ctx, writes, o.ID, ev.ID)
		} else {
			created.Recovered, err = s.group.create(ctx, writes, o.ID, ev.ID)
		}
		if err != nil {
			return Created{}, err
		}
		return created, nil
	}
	wctx, cancel := detach(ctx)
	defer cancel()
	var recorded recordedKey
	a, err := inTx(wctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(wctx, `INSERT INTO idempotency_keys (key, request_hash, order_id, event_id)
			VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING`, key.Key, key.RequestHash, o.ID, ev.ID)
		if err != nil {
			return fmt.Errorf("recording idempotency key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A committed row holds the key (ON CONFLICT waited for any
			// transaction inserting it); this statement's snapshot sees it,
			// as every statement at READ COMMITTED takes a new one.
			err := tx.QueryRow(wctx, `SELECT request_hash, order_id, event_id FROM idempotency_keys WHERE key = $1`, key.Key).
				Scan(&recorded.hash, &recorded.orderID, &recorded.eventID)
			if errors.Is(err, pgx.ErrNoRows) {
				// Pruned between the two statements: let the caller retry.
				return fmt.Errorf("%w: idempotency key vanished while being read", ErrUnavailable)
			}
			if err != nil {
				return fmt.Errorf("reading idempotency key: %w", err)
			}
			recorded.found = true
			return errKeyRecorded // roll back: nothing to write
		}
		if err := tx.SendBatch(wctx, batch(writes)).Close(); err != nil {
			return err
		}
		return beforeCommit(wctx)
	})
	switch {
	case recorded.found:
		if !bytes.Equal(recorded.hash, key.RequestHash) {
			return Created{}, ErrKeyReused
		}
		return Created{Replayed: true, OrderID: recorded.orderID, EventID: recorded.eventID}, nil
	case err != nil:
		outcome, cause := s.resolver.settle(wctx, err, a, ordersExist(o.ID), 1)
		if outcome != nil {
			return Created{}, &WriteError{Outcome: outcome, OrderID: o.ID, EventID: ev.ID, Err: cause}
		}
		created.Recovered = true
	}
	return created, nil
}

// writeAlone writes one create's statements in a pipeline of their own
// with the statements sent ahead of the Sync (the armed before-commit
// point's shape), under ctx's deadline but not its cancellation.
func (s *Store) writeAlone(ctx context.Context, writes []statement, orderID, eventID uuid.UUID) (recovered bool, err error) {
	wctx, cancel := detach(ctx)
	defer cancel()
	a, err := execPipeline(wctx, s.pool, writes, true, beforeCommit)
	if err == nil {
		return false, nil
	}
	outcome, cause := s.resolver.settle(wctx, err, a, ordersExist(orderID), 1)
	if outcome == nil {
		return true, nil
	}
	return false, &WriteError{Outcome: outcome, OrderID: orderID, EventID: eventID, Err: cause}
}

// inTx runs fn in a READ COMMITTED transaction and commits it. The
// isolation is set, not left to the database's default: the reasoning of
// the idempotency key and of the cancel's row lock (a statement waits for
// a concurrent writer, then sees what it committed) holds only there. The
// attempt tells whether COMMIT was sent.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) (attempt, error) {
	var a attempt
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return a, fmt.Errorf("beginning a transaction: %w", err)
	}
	a.pid = tx.Conn().PgConn().PID()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx) // on a broken connection, closing it rolls back
		return a, err
	}
	a.commitSent = true
	return a, tx.Commit(ctx)
}

// errKeyRecorded rolls back a create whose idempotency key is already
// recorded; CreateOrder never returns it.
var errKeyRecorded = errors.New("idempotency key already recorded")

type recordedKey struct {
	found            bool
	hash             []byte
	orderID, eventID uuid.UUID
}

func encodeHeaders(h map[string]string) ([]byte, error) {
	if h == nil {
		h = map[string]string{}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding outbox headers: %w", err)
	}
	return b, nil
}

// pgUUID hands a UUID to pgx as its native type: a uuid.UUID would be
// encoded through its driver.Valuer, as text, at several times the cost.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// beforeCommit is the point of every order write between its last
// statement and its commit. It is the same call whether or not the failpoint
// is armed: an armed point only adds its action here (and, for a create
// without a key, has the statements sent ahead of the Sync so that they have
// run when it fires).
func beforeCommit(ctx context.Context) error {
	return failpoint.Eval(ctx, failpoint.APIBeforeCommit)
}

// SQL of the order writes.
const (
	insertOrderSQL = `INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`
	insertItemsSQL = `INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents)
			SELECT $1, t.n, t.sku, t.qty, t.price
			FROM unnest($2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY AS t(sku, qty, price, n)`
	insertOutboxSQL = `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers)
			VALUES ($1, $2, $3, $4, $5, $6)`
	cancelOrderSQL = `UPDATE orders SET status = $2, updated_at = $3 WHERE id = $1`
)

func orderStatements(o *Order, skus []string, qtys []int32, prices []int64) []statement {
	return []statement{
		{insertOrderSQL, []any{pgUUID(o.ID), o.CustomerID, o.Currency, o.TotalCents, o.Status, o.CreatedAt, o.UpdatedAt}},
		{insertItemsSQL, []any{pgUUID(o.ID), skus, qtys, prices}},
	}
}

func outboxStatement(ev OutboxEvent, headerJSON []byte) statement {
	return statement{insertOutboxSQL, []any{pgUUID(ev.ID), ev.AggregateType, ev.AggregateID, ev.Type, string(ev.Payload), headerJSON}}
}

// GetOrder returns the order with its items.
func (s *Store) GetOrder(ctx context.Context, id uuid.UUID) (Order, error) {
	o, err := readOrder(ctx, s.pool, id, false)
	if err != nil && !errors.Is(err, ErrOrderNotFound) {
		return Order{}, classify(err)
	}
	return o, err
}

// querier is what readOrder needs: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const orderColumns = `id, customer_id, currency, total_cents, status, created_at, updated_at`

func scanOrder(row pgx.Row, o *Order) error {
	return row.Scan(&o.ID, &o.CustomerID, &o.Currency, &o.TotalCents, &o.Status, &o.CreatedAt, &o.UpdatedAt)
}

// readOrder reads one order and its items; forUpdate locks the order row.
func readOrder(ctx context.Context, q querier, id uuid.UUID, forUpdate bool) (Order, error) {
	sql := `SELECT ` + orderColumns + ` FROM orders WHERE id = $1`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	var o Order
	err := scanOrder(q.QueryRow(ctx, sql, id), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrOrderNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("reading order %s: %w", id, err)
	}
	items, err := readItems(ctx, q, []uuid.UUID{id})
	if err != nil {
		return Order{}, err
	}
	o.Items = items[id]
	return o, nil
}

// readItems returns the items of the given orders, in line order.
func readItems(ctx context.Context, q querier, ids []uuid.UUID) (map[uuid.UUID][]Item, error) {
	rows, err := q.Query(ctx, `SELECT order_id, sku, quantity, unit_price_cents FROM order_items
		WHERE order_id = ANY($1) ORDER BY order_id, line_no`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading order items: %w", err)
	}
	items := make(map[uuid.UUID][]Item, len(ids))
	var (
		orderID uuid.UUID
		it      Item
	)
	_, err = pgx.ForEachRow(rows, []any{&orderID, &it.SKU, &it.Quantity, &it.UnitPriceCents}, func() error {
		items[orderID] = append(items[orderID], it)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading order items: %w", err)
	}
	return items, nil
}

// Cursor is a position in the newest-first order of ListOrders: the last
// order of the previous page.
type Cursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// ListQuery selects a page of ListOrders.
type ListQuery struct {
	// CustomerID and Status filter when not empty.
	CustomerID string
	Status     string
	// After, when not nil, starts the page after this position.
	After *Cursor
	// Limit is the number of orders to return at most; it must be positive.
	Limit int
}

// ListOrders returns orders matching q, newest first (created_at, then id,
// descending), with their items.
func (s *Store) ListOrders(ctx context.Context, q ListQuery) ([]Order, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("listing orders: limit %d is not positive", q.Limit)
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.CustomerID != "" {
		where = append(where, "customer_id = "+arg(q.CustomerID))
	}
	if q.Status != "" {
		where = append(where, "status = "+arg(q.Status))
	}
	if q.After != nil {
		where = append(where, "(created_at, id) < ("+arg(q.After.CreatedAt)+", "+arg(q.After.ID)+")")
	}
	sql := `SELECT ` + orderColumns + ` FROM orders`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	sql += ` ORDER BY created_at DESC, id DESC LIMIT ` + arg(q.Limit)

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, classify(fmt.Errorf("listing orders: %w", err))
	}
	orders, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Order, error) {
		var o Order
		err := scanOrder(row, &o)
		return o, err
	})
	if err != nil {
		return nil, classify(fmt.Errorf("listing orders: %w", err))
	}
	if len(orders) == 0 {
		return orders, nil
	}
	ids := make([]uuid.UUID, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	items, err := readItems(ctx, s.pool, ids)
	if err != nil {
		return nil, classify(err)
	}
	for i := range orders {
		orders[i].Items = items[orders[i].ID]
	}
	return orders, nil
}

// PruneIdempotencyKeys deletes idempotency keys recorded more than window
// ago, in batches of at most batch rows, and returns how many it deleted.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, window time.Duration, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE key IN (
			SELECT key FROM idempotency_keys WHERE created_at < now() - $1::interval LIMIT $2)`, window, batch)
		if err != nil {
			return total, classify(fmt.Errorf("pruning idempotency keys: %w", err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify(fmt.Errorf("pinging database: %w", err))
	}
	return nil
}
