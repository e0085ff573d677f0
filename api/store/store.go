// Package store persists orders. Its one invariant: an order and its outbox
// event are written in ONE PostgreSQL transaction, so the CDC reader sees
// both or neither.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/internal/failpoint"
)

// FailpointBeforeCommit fires inside the order transaction after every row
// was written and before COMMIT.
const FailpointBeforeCommit = "api.before_commit"

// Errors callers branch on.
var (
	// ErrOrderNotFound: no order has the given ID.
	ErrOrderNotFound = errors.New("order not found")
	// ErrUnavailable: the database could not be reached or the transaction
	// was cut off; nothing was committed (or, for a lost COMMIT reply, the
	// caller cannot know — idempotency keys cover that case).
	ErrUnavailable = errors.New("database unavailable")
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

// Store reads and writes orders through a pgx pool.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store using pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// CreateOrder inserts the order, its items and its outbox event in one
// transaction. The order's CreatedAt and UpdatedAt are stored as given.
func (s *Store) CreateOrder(ctx context.Context, o *Order, ev OutboxEvent) error {
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	headerJSON, err := json.Marshal(headers)
	if err != nil {
		return fmt.Errorf("encoding outbox headers: %w", err)
	}
	skus := make([]string, len(o.Items))
	qtys := make([]int32, len(o.Items))
	prices := make([]int64, len(o.Items))
	for i, it := range o.Items {
		skus[i], qtys[i], prices[i] = it.SKU, it.Quantity, it.UnitPriceCents
	}

	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO orders (id, customer_id, currency, total_cents, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			o.ID, o.CustomerID, o.Currency, o.TotalCents, o.Status, o.CreatedAt, o.UpdatedAt)
		b.Queue(`INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents)
			SELECT $1, t.n, t.sku, t.qty, t.price
			FROM unnest($2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY AS t(sku, qty, price, n)`,
			o.ID, skus, qtys, prices)
		b.Queue(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, string(ev.Payload), headerJSON)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return failpoint.Eval(ctx, FailpointBeforeCommit)
	})
	if err != nil {
		return classify(fmt.Errorf("creating order %s: %w", o.ID, err))
	}
	return nil
}

// GetOrder returns the order with its items.
func (s *Store) GetOrder(ctx context.Context, id uuid.UUID) (Order, error) {
	o := Order{ID: id}
	err := s.pool.QueryRow(ctx, `SELECT customer_id, currency, total_cents, status, created_at, updated_at
		FROM orders WHERE id = $1`, id).Scan(&o.CustomerID, &o.Currency, &o.TotalCents, &o.Status, &o.CreatedAt, &o.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrOrderNotFound
	}
	if err != nil {
		return Order{}, classify(fmt.Errorf("reading order %s: %w", id, err))
	}
	rows, err := s.pool.Query(ctx, `SELECT sku, quantity, unit_price_cents FROM order_items WHERE order_id = $1 ORDER BY line_no`, id)
	if err != nil {
		return Order{}, classify(fmt.Errorf("reading items of order %s: %w", id, err))
	}
	o.Items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Item, error) {
		var it Item
		err := row.Scan(&it.SKU, &it.Quantity, &it.UnitPriceCents)
		return it, err
	})
	if err != nil {
		return Order{}, classify(fmt.Errorf("reading items of order %s: %w", id, err))
	}
	return o, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify(fmt.Errorf("pinging database: %w", err))
	}
	return nil
}

// classify wraps connection-level failures with ErrUnavailable so the rpc
// layer can answer UNAVAILABLE; everything else stays an internal error.
func classify(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &pgErr):
		// Class 08 (connection exception), 57P01..03 (admin shutdown, crash
		// shutdown, cannot connect now), 53300 (too many connections).
		if pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code == "53300" {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	case pgconn.SafeToRetry(err), isConnectError(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func isConnectError(err error) bool {
	var (
		ce     *pgconn.ConnectError
		netErr net.Error
	)
	return errors.As(err, &ce) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
