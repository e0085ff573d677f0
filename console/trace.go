package console

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
	"github.com/eventforge/eventforge/verify"
)

// trace is everything durable state says about one order on its way through
// the delivery path. Absent facts are null.
type trace struct {
	OrderID string `json:"order_id"`
	EventID string `json:"event_id,omitempty"`
	Order   *struct {
		Status    string    `json:"status"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	} `json:"order"`
	Outbox *struct {
		EventID   string    `json:"event_id"`
		Type      string    `json:"type"`
		CreatedAt time.Time `json:"created_at"`
	} `json:"outbox"`
	// CommitLSN is the server's WAL position when the console first saw the
	// committed outbox row: the commit ends at or before it.
	CommitLSN string `json:"commit_lsn,omitempty"`
	Slot      struct {
		Name         string `json:"name"`
		ConfirmedLSN string `json:"confirmed_lsn,omitempty"`
		ActivePID    *int32 `json:"active_pid"`
		// Confirmed: the slot's confirmed_flush_lsn reached CommitLSN.
		Confirmed bool `json:"confirmed"`
	} `json:"slot"`
	Records   []traceRecord   `json:"records"`
	Consumers []traceConsumer `json:"consumers"`
	State     traceState      `json:"state"`
}

type traceRecord struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Replay    bool      `json:"replay,omitempty"`
}

type traceConsumer struct {
	Name            string     `json:"name"`
	Group           string     `json:"group"`
	Member          *member    `json:"member"`
	ProcessedAt     *time.Time `json:"processed_at"`
	Changes         *int       `json:"changes"`
	CommittedOffset *int64     `json:"committed_offset"`
	// Committed: the group's committed offset passed every record of the
	// order.
	Committed bool `json:"committed"`
}

// traceState is the state panel of the design: order, outbox, business
// effect, Kafka offset.
type traceState struct {
	Order   string `json:"order"`   // not_created, created, processed, cancelled
	Outbox  string `json:"outbox"`  // not_written, written
	Changes int    `json:"changes"` // business changes of the order, all consumers
	Offset  string `json:"offset"`  // not_committed, committed
}

// commitIndex remembers, per order, the WAL position at which the console
// first saw its committed outbox row, and the time to search Kafka from.
type commitIndex struct {
	mu    sync.Mutex
	max   int
	order []string
	seen  map[string]pglogrepl.LSN
}

func newCommitIndex(maxOrders int) *commitIndex {
	return &commitIndex{max: maxOrders, seen: map[string]pglogrepl.LSN{}}
}

// lookup returns the remembered position, calling first to get one the first
// time an order is seen.
func (ci *commitIndex) lookup(orderID string, first func() (pglogrepl.LSN, error)) (pglogrepl.LSN, error) {
	ci.mu.Lock()
	lsn, ok := ci.seen[orderID]
	ci.mu.Unlock()
	if ok {
		return lsn, nil
	}
	lsn, err := first()
	if err != nil {
		return 0, err
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if prev, ok := ci.seen[orderID]; ok {
		return prev, nil
	}
	ci.seen[orderID] = lsn
	ci.order = append(ci.order, orderID)
	if len(ci.order) > ci.max {
		delete(ci.seen, ci.order[0])
		ci.order = ci.order[1:]
	}
	return lsn, nil
}

func (c *Console) handleTrace(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err != nil {
		writeError(w, http.StatusBadRequest, "order id must be a UUID")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	t, err := c.trace(ctx, id)
	if err != nil {
		c.logger.Warn("tracing order", "order_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "reading the delivery path failed; see the server log")
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// trace collects the facts about one order. Missing rows are not errors:
// the order may not have reached that step yet.
func (c *Console) trace(ctx context.Context, orderID string) (*trace, error) {
	t := &trace{OrderID: orderID, Records: []traceRecord{}, Consumers: []traceConsumer{}}
	t.Slot.Name = c.cfg.Slot
	t.State = traceState{Order: "not_created", Outbox: "not_written", Offset: "not_committed"}

	var o struct {
		Status    string    `json:"status"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	err := c.pool.QueryRow(ctx, `SELECT status, created_at, updated_at FROM orders WHERE id = $1`, orderID).Scan(&o.Status, &o.CreatedAt, &o.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return t, nil
	case err != nil:
		return nil, err
	}
	t.Order = &o
	t.State.Order = o.Status

	var ob struct {
		EventID   string    `json:"event_id"`
		Type      string    `json:"type"`
		CreatedAt time.Time `json:"created_at"`
	}
	err = c.pool.QueryRow(ctx, `SELECT id::text, type, created_at FROM outbox WHERE aggregateid = $1 ORDER BY created_at, id LIMIT 1`, orderID).
		Scan(&ob.EventID, &ob.Type, &ob.CreatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return t, nil
	case err != nil:
		return nil, err
	}
	t.Outbox, t.EventID, t.State.Outbox = &ob, ob.EventID, "written"

	commit, err := c.commits.lookup(orderID, func() (pglogrepl.LSN, error) { return c.currentWAL(ctx) })
	if err != nil {
		return nil, err
	}
	t.CommitLSN = commit.String()
	if err := c.traceSlot(ctx, t, commit); err != nil {
		return nil, err
	}

	recs, err := c.readSince(ctx, c.cfg.Topic, ob.CreatedAt.Add(-5*time.Second), 50000, func(r kafkaread.Record) bool { return r.Key == orderID })
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Timestamp.Before(recs[j].Timestamp) })
	partitions := map[int32]bool{}
	for _, r := range recs {
		replay := isReplay(r.Headers)
		t.Records = append(t.Records, traceRecord{Topic: c.cfg.Topic, Partition: r.Partition, Offset: r.Offset, EventID: r.Headers[contract.HeaderID],
			Type: r.Headers[contract.HeaderType], Timestamp: r.Timestamp, Replay: replay})
		partitions[r.Partition] = true
	}

	allCommitted := len(t.Records) > 0
	for _, name := range sortedKeys(c.cfg.Consumers) {
		group := c.cfg.Consumers[name]
		tc, err := c.traceConsumer(ctx, name, group, orderID, ob.EventID, t.Records, partitions)
		if err != nil {
			return nil, err
		}
		if tc.Changes != nil {
			t.State.Changes += *tc.Changes
		}
		allCommitted = allCommitted && tc.Committed
		t.Consumers = append(t.Consumers, tc)
	}
	if allCommitted {
		t.State.Offset = "committed"
	}
	return t, nil
}

// traceSlot records the slot's holder and confirmed position in t, and
// whether the slot confirmed the order's commit.
func (c *Console) traceSlot(ctx context.Context, t *trace, commit pglogrepl.LSN) error {
	st, err := schema.ReadSlotStatus(ctx, c.pool, c.cfg.Slot)
	if err != nil && !errors.Is(err, schema.ErrSlotNotFound) {
		return err
	}
	t.Slot.ActivePID = st.ActivePID
	if st.ConfirmedFlushLSN != "" {
		t.Slot.ConfirmedLSN = st.ConfirmedFlushLSN
		if lsn, err := pglogrepl.ParseLSN(st.ConfirmedFlushLSN); err == nil {
			t.Slot.Confirmed = lsn >= commit
		}
	}
	return nil
}

// traceConsumer collects what consumer name, in group, did with the order's
// event: its mark, its changes and, once the event has records, the
// committed offsets and the member that owns the first record's partition.
func (c *Console) traceConsumer(ctx context.Context, name, group, orderID, eventID string, records []traceRecord, partitions map[int32]bool) (traceConsumer, error) {
	tc := traceConsumer{Name: name, Group: group}
	var at time.Time
	err := c.pool.QueryRow(ctx, `SELECT processed_at FROM processed_events WHERE consumer = $1 AND event_id = $2`, name, eventID).Scan(&at)
	if err == nil {
		tc.ProcessedAt = &at
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return tc, err
	}
	if n, known, err := verify.OrderChanges(ctx, c.pool, name, orderID); err != nil {
		return tc, err
	} else if known {
		tc.Changes = &n
	}
	if len(records) > 0 {
		parts := make([]int32, 0, len(partitions))
		for p := range partitions {
			parts = append(parts, p)
		}
		committed, err := c.committed(ctx, group, c.cfg.Topic, parts)
		if err != nil {
			return tc, err
		}
		first := records[0]
		if off, ok := committed[first.Partition]; ok {
			tc.CommittedOffset = &off
		}
		tc.Committed = true
		for _, r := range records {
			if committed[r.Partition] <= r.Offset {
				tc.Committed = false
			}
		}
		members, err := c.members(ctx, group, c.cfg.Topic)
		if err != nil {
			return tc, err
		}
		for i := range members {
			for _, p := range members[i].Partitions {
				if p == first.Partition {
					tc.Member = &members[i]
				}
			}
		}
	}
	return tc, nil
}

func (c *Console) currentWAL(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := c.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// isReplay reports whether a record was republished from the DLQ: replays
// carry a header naming the replay.
func isReplay(headers map[string]string) bool {
	for k := range headers {
		if strings.Contains(strings.ToLower(k), "replay") {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
