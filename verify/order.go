package verify

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// OrderReport is the audit of one order: the design's three counters —
// logical events, deliveries, business changes — restricted to the events of
// one order ID, plus where its records are and whether each consumer group
// committed past them. The console's drills show it.
type OrderReport struct {
	// OrderID is the audited order (the Kafka key of its events).
	OrderID string `json:"order_id"`
	// LogicalEvents is the number of outbox rows of the order.
	LogicalEvents int `json:"logical_events"`
	// Deliveries is the number of records keyed by the order in the topic.
	Deliveries int `json:"deliveries"`
	// DuplicateDeliveries is Deliveries minus the distinct event IDs.
	DuplicateDeliveries int `json:"duplicate_deliveries"`
	// Records lists the order's records in the topic.
	Records []OrderRecord `json:"records"`
	// BusinessChanges counts, per consumer with an OrderEffects in its
	// registry entry, the business effects on the order (fulfillment: its
	// shipments).
	BusinessChanges map[string]int `json:"business_changes"`
	// Marks counts, per consumer, processed_events rows for the order's
	// events.
	Marks map[string]int `json:"marks"`
	// DeadLettered counts, per consumer, the order's records in the DLQ.
	DeadLettered map[string]int `json:"dead_lettered"`
	// Committed reports, per consumer, whether its group's committed offset
	// passed every record of the order.
	Committed map[string]bool `json:"committed"`
}

// OrderRecord is one record of an order in the topic.
type OrderRecord struct {
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
}

// Querier is the part of pgx.Conn / pgxpool.Pool the per-order checks use
// (an audit.RowQuerier).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// OrderChanges counts consumer's business effects on one order with its
// registered OrderEffects (package consumer/registry). known is false for
// a consumer without one.
func OrderChanges(ctx context.Context, q Querier, consumer, orderID string) (n int, known bool, err error) {
	c, err := registry.Lookup(consumer)
	if err != nil || c.OrderEffects == nil {
		return 0, false, nil
	}
	n, err = c.OrderEffects(ctx, q, orderID)
	if err != nil {
		return 0, true, fmt.Errorf("counting effects of %s on order %s: %w", consumer, orderID, err)
	}
	return n, true, nil
}

// AuditOrder audits the events of one order from durable state, like Run
// but restricted to that order. It reads the whole topic and DLQ (see the
// limits in docs/verify.md). Config.Wait is ignored.
func AuditOrder(ctx context.Context, cfg Config, orderID string) (*OrderReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid verify config: %w", err)
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	defer pool.Close()
	kr, err := kafkaread.New(cfg.KafkaBrokers)
	if err != nil {
		return nil, err
	}
	defer kr.Close()
	return auditOrder(ctx, cfg, pool, kr, orderID)
}

func auditOrder(ctx context.Context, cfg Config, pool *pgxpool.Pool, kr *kafkaread.Reader, orderID string) (*OrderReport, error) {
	rows, err := pool.Query(ctx, `SELECT id::text FROM outbox WHERE aggregateid = $1`, orderID)
	if err != nil {
		return nil, fmt.Errorf("reading outbox of order %s: %w", orderID, err)
	}
	outboxIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading outbox of order %s: %w", orderID, err)
	}
	// Committed offsets before marks and records (see docs/verify.md).
	committed := map[string]map[int32]int64{}
	for name, group := range cfg.Consumers {
		c, err := kr.Committed(group, cfg.Topic)
		if err != nil {
			return nil, err
		}
		committed[name] = c
	}
	records, err := kr.ReadAll(ctx, cfg.Topic)
	if err != nil {
		return nil, err
	}
	var dead []kafkaread.Record
	if ok, err := kr.Exists(cfg.dlqTopic()); err != nil {
		return nil, err
	} else if ok {
		if dead, err = kr.ReadAll(ctx, cfg.dlqTopic()); err != nil {
			return nil, err
		}
	}
	rep := orderCounts(orderID, len(outboxIDs), records, dead, committed)
	// The order's events: its outbox rows (while not pruned), its records
	// and its dead letters.
	var ids []string
	add := func(id string) {
		if u, err := uuid.Parse(id); err == nil {
			ids = append(ids, u.String())
		}
	}
	for _, id := range outboxIDs {
		add(id)
	}
	for _, rs := range [][]kafkaread.Record{records, dead} {
		for _, r := range rs {
			if r.Key == orderID {
				add(r.Headers[contract.HeaderID])
			}
		}
	}
	for name := range cfg.Consumers {
		var marks int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = $1 AND event_id = ANY($2::text[]::uuid[])`, name, ids).Scan(&marks)
		if err != nil {
			return nil, fmt.Errorf("reading marks of %s for order %s: %w", name, orderID, err)
		}
		rep.Marks[name] = marks
		n, known, err := OrderChanges(ctx, pool, name, orderID)
		if err != nil {
			return nil, err
		}
		if known {
			rep.BusinessChanges[name] = n
		}
	}
	return rep, nil
}

// orderCounts derives the Kafka side of an order's report: its records, the
// DLQ records per consumer, and whether each group committed past them.
func orderCounts(orderID string, logical int, records, dead []kafkaread.Record, committed map[string]map[int32]int64) *OrderReport {
	rep := &OrderReport{
		OrderID:         orderID,
		LogicalEvents:   logical,
		Records:         []OrderRecord{},
		BusinessChanges: map[string]int{},
		Marks:           map[string]int{},
		DeadLettered:    map[string]int{},
		Committed:       map[string]bool{},
	}
	ids := map[string]bool{}
	for _, r := range records {
		if r.Key != orderID {
			continue
		}
		rep.Records = append(rep.Records, OrderRecord{EventID: r.Headers[contract.HeaderID], Type: r.Headers[contract.HeaderType], Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp})
		ids[r.Headers[contract.HeaderID]] = true
	}
	sort.Slice(rep.Records, func(i, j int) bool {
		a, b := rep.Records[i], rep.Records[j]
		return a.Partition < b.Partition || (a.Partition == b.Partition && a.Offset < b.Offset)
	})
	rep.Deliveries = len(rep.Records)
	rep.DuplicateDeliveries = len(rep.Records) - len(ids)
	for _, r := range dead {
		if r.Key == orderID {
			rep.DeadLettered[r.Headers["dlq.consumer"]]++
		}
	}
	for name, offsets := range committed {
		passed := len(rep.Records) > 0
		for _, r := range rep.Records {
			if offsets[r.Partition] <= r.Offset {
				passed = false
			}
		}
		rep.Committed[name] = passed
	}
	return rep
}
