package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventforge/eventforge/contract"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// The nemesis's writers. The api creates orders, cancels some right after
// their creation and bursts on others (several cancels at once). Other
// writers write orders and their OrderCreated events straight to the
// tables, the way other services of a real deployment do: the row deleted
// again in the same transaction (the outbox kept empty), orders in
// savepoints of which some are rolled back, large transactions, two-phase
// commit (some prepared transactions held for a while, some rolled back),
// headers that are not a JSON object of strings, payloads over a lowered
// topic limit, and long transactions that hold a transaction ID.
//
// Nothing here decides what committed: the checks read PostgreSQL for that.
// The ledger only keeps what the tables cannot tell afterwards.

// nemesisLedger is what the checks need beyond the tables.
type nemesisLedger struct {
	mu sync.Mutex
	// deleted maps the event ID of each outbox row deleted in its own
	// transaction to its order ID: the table no longer holds it, the order
	// row tells whether it committed.
	deleted map[string]string
	// rolledBack holds order IDs whose transaction (or savepoint) was
	// rolled back for sure: none of their events may reach Kafka.
	rolledBack map[string]bool
	// acknowledged holds the order IDs the api answered as created.
	acknowledged map[string]bool
	// prepared maps the gid of each prepared transaction not yet resolved
	// to whether it is to be committed.
	prepared map[string]bool
	// writes counts committed transactions per writer.
	writes map[string]int
}

func newNemesisLedger() *nemesisLedger {
	return &nemesisLedger{deleted: map[string]string{}, rolledBack: map[string]bool{}, acknowledged: map[string]bool{},
		prepared: map[string]bool{}, writes: map[string]int{}}
}

func (l *nemesisLedger) do(f func(l *nemesisLedger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// workload runs the writers of one schedule.
type workload struct {
	t      testing.TB
	pl     *pipeline
	pool   *pgxpool.Pool
	dsn    string
	rng    *rand.Rand // the writers' own; the fault plan has another
	rngMu  sync.Mutex
	ledger *nemesisLedger
	wg     sync.WaitGroup
	failed atomic.Int64 // attempts that failed (a component or server down)
}

func (w *workload) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

func (w *workload) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.intn(int(hi-lo)/int(time.Millisecond)+1))*time.Millisecond
}

// start runs the writers until ctx ends; wait returns when they stopped.
func (w *workload) start(ctx context.Context) {
	loop := func(pause func() time.Duration, f func(ctx context.Context)) {
		w.wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause()):
				}
				f(ctx)
			}
		})
	}
	client := grpcClient(w.t, w.pl.grpcAddr)
	loop(func() time.Duration { return w.between(30*time.Millisecond, 90*time.Millisecond) }, func(ctx context.Context) {
		w.apiOrder(ctx, client)
	})
	loop(func() time.Duration { return w.between(150*time.Millisecond, 500*time.Millisecond) }, w.sqlWrite)
	loop(func() time.Duration { return w.between(10*time.Second, 25*time.Second) }, w.longTransaction)
}

func (w *workload) wait() { w.wg.Wait() }

// apiOrder creates an order over gRPC; a fifth is cancelled right away, one
// in twenty gets three cancels at once.
func (w *workload) apiOrder(ctx context.Context, client eventforgev1.OrderServiceClient) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.CreateOrder(rctx, &eventforgev1.CreateOrderRequest{CustomerId: fmt.Sprintf("api-%d", w.intn(20)), Currency: "EUR",
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}}})
	if err != nil {
		w.failed.Add(1)
		return
	}
	id := resp.GetOrder().GetOrderId()
	w.ledger.do(func(l *nemesisLedger) { l.acknowledged[id] = true; l.writes["api create"]++ })
	cancels := 0
	switch n := w.intn(20); {
	case n < 1:
		cancels = 3
	case n < 5:
		cancels = 1
	}
	var wg sync.WaitGroup
	for range cancels {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := client.CancelOrder(cctx, &eventforgev1.CancelOrderRequest{OrderId: id, Reason: "nemesis"}); err != nil {
				w.failed.Add(1)
				return
			}
			w.ledger.do(func(l *nemesisLedger) { l.writes["api cancel"]++ })
		})
	}
	wg.Wait()
}

// sqlOrder is one order written straight to the tables.
type sqlOrder struct {
	id, eventID, customer string
	items                 []*eventforgev1.OrderItem
	headers               string
}

// newSQLOrder makes an order of n items whose SKUs have skuLen characters.
func (w *workload) newSQLOrder(writer string, n, skuLen int) sqlOrder {
	o := sqlOrder{id: uuid.NewString(), eventID: uuid.NewString(), customer: writer + "-" + fmt.Sprint(w.intn(10)), headers: "{}"}
	for i := range n {
		sku := fmt.Sprintf("SKU-%d-", i)
		if skuLen > len(sku) {
			var b strings.Builder
			b.WriteString(sku)
			for b.Len() < skuLen {
				b.WriteByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[w.intn(62)])
			}
			sku = b.String()
		}
		o.items = append(o.items, &eventforgev1.OrderItem{Sku: sku, Quantity: 1, UnitPriceCents: 100})
	}
	return o
}

func (o sqlOrder) total() int64 { return int64(len(o.items)) * 100 }

func (o sqlOrder) payload() string {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(&eventforgev1.OrderCreated{
		OrderId: o.id, CustomerId: o.customer, Currency: "EUR", Items: o.items, TotalCents: o.total(), CreateTime: timestamppb.Now()})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// insert writes the order, its items and its OrderCreated outbox row.
func (o sqlOrder) insert(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, currency, total_cents, status) VALUES ($1, $2, 'EUR', $3, 'created')`,
		o.id, o.customer, o.total()); err != nil {
		return err
	}
	rows := make([][]any, len(o.items))
	for i, it := range o.items {
		rows[i] = []any{o.id, i + 1, it.GetSku(), it.GetQuantity(), it.GetUnitPriceCents()}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"order_items"}, []string{"order_id", "line_no", "sku", "quantity", "unit_price_cents"}, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`,
		o.eventID, contract.AggregateOrder, o.id, contract.TypeOrderCreated, o.payload(), o.headers)
	return err
}

// sqlWrite runs one transaction of a randomly chosen other writer.
func (w *workload) sqlWrite(ctx context.Context) {
	kinds := []struct {
		name   string
		weight int
		run    func(ctx context.Context) error
	}{
		{"plain", 15, w.plain},
		{"insert and delete", 25, w.insertDelete},
		{"savepoints", 20, w.savepoints},
		{"large transaction", 4, w.large},
		{"two-phase commit", 15, w.twoPhase},
		{"malformed headers", 5, w.malformed},
		{"large payload", 15, w.largePayload},
		{"refused neighbour", 8, w.refusedNeighbour},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := w.intn(total)
	for _, k := range kinds {
		if n -= k.weight; n >= 0 {
			continue
		}
		if err := k.run(ctx); err != nil {
			w.failed.Add(1)
			return
		}
		w.ledger.do(func(l *nemesisLedger) { l.writes[k.name]++ })
		return
	}
}

func (w *workload) inTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return pgx.BeginFunc(tctx, w.pool, f)
}

func (w *workload) plain(ctx context.Context) error {
	o := w.newSQLOrder("plain", 1, 0)
	return w.inTx(ctx, func(tx pgx.Tx) error { return o.insert(ctx, tx) })
}

// insertDelete writes the outbox row and deletes it in the same
// transaction: the table stays empty, only the WAL holds the event.
func (w *workload) insertDelete(ctx context.Context) error {
	o := w.newSQLOrder("deleting", 1, 0)
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		if err := o.insert(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, o.eventID)
		return err
	})
	// Recorded whatever the outcome: the order row says whether it
	// committed.
	w.ledger.do(func(l *nemesisLedger) { l.deleted[o.eventID] = o.id })
	return err
}

// savepoints writes up to four orders in savepoints and rolls some back.
func (w *workload) savepoints(ctx context.Context) error {
	var rolled []string
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		rolled = rolled[:0]
		for i := range 1 + w.intn(4) {
			o := w.newSQLOrder("savepoint", 1, 0)
			sp := fmt.Sprintf("s%d", i)
			if _, err := tx.Exec(ctx, "SAVEPOINT "+sp); err != nil {
				return err
			}
			if err := o.insert(ctx, tx); err != nil {
				return err
			}
			stmt := "RELEASE SAVEPOINT " + sp
			if w.intn(10) < 4 {
				stmt = "ROLLBACK TO SAVEPOINT " + sp
				rolled = append(rolled, o.id)
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	// A rolled-back savepoint never commits, whatever its transaction did.
	w.ledger.do(func(l *nemesisLedger) {
		for _, id := range rolled {
			l.rolledBack[id] = true
		}
	})
	return err
}

// large writes hundreds of orders in one transaction.
func (w *workload) large(ctx context.Context) error {
	n := 200 + w.intn(400)
	return w.inTx(ctx, func(tx pgx.Tx) error {
		for range n {
			if err := w.newSQLOrder("large", 1, 0).insert(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	})
}

// twoPhase prepares a transaction, holds it for up to 15 s (its
// transaction ID with it), then commits it, or rolls a quarter back. A
// prepared transaction survives a server restart; whatever this cannot
// resolve, the heal resolves.
func (w *workload) twoPhase(ctx context.Context) error {
	o := w.newSQLOrder("two-phase", 1, 0)
	gid := "nemesis-" + o.id
	commit := w.intn(4) > 0
	hold := w.between(0, 15*time.Second)
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tx, err := conn.Begin(tctx)
	if err != nil {
		return err
	}
	if err := o.insert(tctx, tx); err != nil {
		_ = tx.Rollback(context.Background())
		return err
	}
	w.ledger.do(func(l *nemesisLedger) { l.prepared[gid] = commit })
	if _, err := tx.Exec(tctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
		_ = tx.Rollback(context.Background())
		return err
	}
	// The session no longer holds a transaction; pgx's Tx is done with.
	_ = tx.Rollback(context.Background())
	select {
	case <-ctx.Done():
		return nil // the heal resolves it
	case <-time.After(hold):
	}
	return w.resolvePrepared(ctx, gid, commit)
}

// resolvePrepared commits or rolls back a prepared transaction and records
// it.
func (w *workload) resolvePrepared(ctx context.Context, gid string, commit bool) error {
	stmt := "ROLLBACK PREPARED '" + gid + "'"
	if commit {
		stmt = "COMMIT PREPARED '" + gid + "'"
	}
	if _, err := w.pool.Exec(ctx, stmt); err != nil {
		return err
	}
	w.ledger.do(func(l *nemesisLedger) {
		delete(l.prepared, gid)
		if !commit {
			l.rolledBack[strings.TrimPrefix(gid, "nemesis-")] = true
		}
	})
	return nil
}

// malformed writes an order whose outbox headers are a JSON array: no
// record can be built from it, so the relay dead-letters it (the heal
// repairs and replays it).
func (w *workload) malformed(ctx context.Context) error {
	o := w.newSQLOrder("malformed", 1, 0)
	o.headers = `["not", "an", "object"]`
	return w.inTx(ctx, func(tx pgx.Tx) error { return o.insert(ctx, tx) })
}

// largePayload writes an order of about 12 kB, over the topic's limit
// while a fault lowers it.
func (w *workload) largePayload(ctx context.Context) error {
	o := w.newSQLOrder("large-payload", 120, 80)
	return w.inTx(ctx, func(tx pgx.Tx) error { return o.insert(ctx, tx) })
}

// refusedNeighbour writes, in one transaction, a small order and a large
// one whose records land in the same partition (back to back, so in one
// batch: refused whole while the topic's limit is lowered), then, a moment
// later, cancels the small one in a transaction of its own, whose record
// goes into a later produce request. The small order's events must reach
// Kafka Created before Cancelled whatever happens to the batch.
func (w *workload) refusedNeighbour(ctx context.Context) error {
	small := w.newSQLOrder("neighbour", 1, 0)
	large := w.newSQLOrder("neighbour-large", 120, 80)
	large.id = keyOnPartitionOf(small.id, 6)
	large.eventID = uuid.NewString()
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		if err := small.insert(ctx, tx); err != nil {
			return err
		}
		return large.insert(ctx, tx)
	})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(w.between(200*time.Millisecond, time.Second)):
	}
	cancelled, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(&eventforgev1.OrderCancelled{
		OrderId: small.id, CustomerId: small.customer, Reason: "neighbour", CancelTime: timestamppb.Now()})
	if err != nil {
		panic(err)
	}
	return w.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'cancelled', updated_at = now() WHERE id = $1`, small.id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)`,
			uuid.NewString(), contract.AggregateOrder, small.id, contract.TypeOrderCancelled, string(cancelled))
		return err
	})
}

// longTransaction takes a transaction ID, holds it 10–40 s, then writes an
// order and commits: the snapshot xmin of every mark stays behind it
// meanwhile, and creating a slot waits for it.
func (w *workload) longTransaction(ctx context.Context) {
	o := w.newSQLOrder("long", 1, 0)
	hold := w.between(10*time.Second, 40*time.Second)
	cfg, err := pgx.ParseConfig(w.dsn)
	if err != nil {
		panic(err)
	}
	cfg.RuntimeParams["application_name"] = nemesisLongApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		w.failed.Add(1)
		return
	}
	defer conn.Close(context.Background())
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT txid_current()`); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hold):
		}
		return o.insert(ctx, tx)
	})
	if err != nil {
		w.failed.Add(1)
		return
	}
	w.ledger.do(func(l *nemesisLedger) { l.writes["long transaction"]++ })
}

// nemesisLongApp is the application_name of the long transactions, which
// the heal ends.
const nemesisLongApp = "eventforge-nemesis-long"
