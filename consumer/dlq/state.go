package dlq

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
)

// State is where a dead letter stands in the triage of docs/dlq.md.
type State string

const (
	// StatePending: held by the DLQ topic and not replayed since it was
	// dead-lettered.
	StatePending State = "pending"
	// StateReplayed: held by the DLQ topic, and a replay of its event was
	// published to the original topic after it was dead-lettered (its own
	// replay, or that of a newer dead letter of the same event, see
	// Newest). Whether the replay was applied is the consumers' matter: a
	// replay that fails again is a new, pending dead letter.
	StateReplayed State = "replayed"
	// StatePurged: deleted from the DLQ topic by `eventforge dlq purge`,
	// which recorded it in dlq_purged first.
	StatePurged State = "purged"
)

// ParseState parses a --state value: pending, replayed, purged, or all
// (returned as "").
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case StatePending, StateReplayed, StatePurged:
		return st, nil
	case "all", "":
		return "", nil
	}
	return "", fmt.Errorf("state %q: want pending, replayed, purged or all", s)
}

// Replays indexes the replays found in original topics (records carrying
// HeaderReplaySource), so that a dead letter's State can be told. It holds
// one time per replayed event, not the records. The zero value is empty
// and ready to use.
type Replays struct {
	byEvent  map[string]time.Time // replayKey → latest replay
	bySource map[string]time.Time // DLQ position → latest replay of it
}

// Add records that the record with headers in topic, produced at ts, is a
// replay (it is ignored when it is not one). The replay's time is its
// HeaderReplayedAt, or ts when that is missing or unparsable.
func (r *Replays) Add(topic string, headers map[string]string, ts time.Time) {
	src := headers[HeaderReplaySource]
	if src == "" {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, headers[HeaderReplayedAt])
	if err != nil {
		at = ts
	}
	if r.byEvent == nil {
		r.byEvent, r.bySource = map[string]time.Time{}, map[string]time.Time{}
	}
	later := func(m map[string]time.Time, k string) {
		if cur, ok := m[k]; !ok || at.After(cur) {
			m[k] = at
		}
	}
	later(r.bySource, src)
	if k := (Entry{OriginalTopic: topic, EventID: headers[contract.HeaderID]}).replayKey(); k != "" {
		later(r.byEvent, k)
	}
}

// ReplayedAt returns when e was replayed: the replay of e itself, or the
// latest replay of its event published at or after e was dead-lettered;
// false when there is none (e is pending).
func (r *Replays) ReplayedAt(e Entry) (time.Time, bool) {
	if at, ok := r.bySource[e.Position()]; ok {
		return at, true
	}
	if k := e.replayKey(); k != "" {
		if at, ok := r.byEvent[k]; ok && !at.Before(e.Timestamp) {
			return at, true
		}
	}
	return time.Time{}, false
}

// StateOf returns e's state: replayed or pending (e is held).
func (r *Replays) StateOf(e Entry) State {
	if _, ok := r.ReplayedAt(e); ok {
		return StateReplayed
	}
	return StatePending
}

// ReplayOffsets returns, per partition of topic, the first offset of a
// record produced at or after since: where the replays of dead letters
// written since then can start. A partition without such a record starts
// at its end.
func ReplayOffsets(c *kafka.Consumer, topic string, since time.Time) (map[int32]int64, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return nil, err
	}
	query := make([]kafka.TopicPartition, 0, len(wm))
	for p := range wm {
		query = append(query, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(since.UnixMilli())})
	}
	offs, err := c.OffsetsForTimes(query, 10000)
	if err != nil {
		return nil, fmt.Errorf("offsets for times of %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(wm))
	for p, w := range wm {
		out[p] = w[1]
	}
	for _, o := range offs {
		if o.Offset >= 0 {
			out[o.Partition] = max(int64(o.Offset), wm[o.Partition][0])
		}
	}
	return out, nil
}

// ScanReplays reads topic from the given offset of each partition up to
// the high watermark read at its start, adds every replay it holds to r
// (one record at a time, Scan's bounded memory) and returns where a later
// call goes on. A partition missing from from is read from its first held
// record.
func ScanReplays(ctx context.Context, c *kafka.Consumer, topic string, from map[int32]int64, r *Replays) (map[int32]int64, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return nil, err
	}
	next := make(map[int32]int64, len(wm))
	for _, p := range slices.Sorted(maps.Keys(wm)) {
		w := wm[p]
		start, ok := from[p]
		if !ok || start < w[0] {
			start = w[0]
		}
		err := scanMessages(ctx, c, topic, p, start, w[1], func(m *kafka.Message) {
			if len(m.Headers) == 0 {
				return
			}
			h := make(map[string]string, len(m.Headers))
			for _, x := range m.Headers {
				h[x.Key] = string(x.Value)
			}
			r.Add(topic, h, m.Timestamp)
		})
		if err != nil {
			return nil, err
		}
		next[p] = max(start, w[1])
	}
	return next, nil
}

// scanMessages calls fn with the records of topic's partition from offset
// from up to (not including) to.
func scanMessages(ctx context.Context, c *kafka.Consumer, topic string, partition int32, from, to int64, fn func(*kafka.Message)) error {
	if to <= from {
		return nil
	}
	return scan(ctx, c, []kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(from)}},
		map[int32][2]int64{partition: {from, to}}, func(m *kafka.Message) bool {
			if int64(m.TopicPartition.Offset) >= to {
				return false
			}
			fn(m)
			return true
		})
}

// Purged is a dead letter `eventforge dlq purge` deleted (a dlq_purged
// row).
type Purged struct {
	Partition      int32
	Offset         int64
	Consumer       string
	EventID        string
	OrderID        string
	Type           string
	Class          string
	DeadLetteredAt time.Time // zero when unknown
	PurgedAt       time.Time
}

// Position names the purged record as "<topic>/<partition>/<offset>".
func (p Purged) Position(topic string) string {
	return Entry{Topic: topic, Partition: p.Partition, Offset: p.Offset}.Position()
}

// Querier runs one query: *pgx.Conn, *pgxpool.Pool and pgx.Tx are
// Queriers.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadPurged returns the newest limit records purged from topic (0: all),
// newest purge first.
func ReadPurged(ctx context.Context, db Querier, topic string, limit int) ([]Purged, error) {
	q := `SELECT dlq_partition, dlq_offset, consumer, event_id, order_id, event_type, error_class,
		coalesce(dead_lettered_at, 'epoch'::timestamptz), purged_at
		FROM dlq_purged WHERE dlq_topic = $1 ORDER BY purged_at DESC, dlq_partition, dlq_offset`
	args := []any{topic}
	if limit > 0 {
		q += " LIMIT $2"
		args = append(args, limit)
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reading dlq_purged of %s: %w", topic, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Purged, error) {
		var p Purged
		err := row.Scan(&p.Partition, &p.Offset, &p.Consumer, &p.EventID, &p.OrderID, &p.Type, &p.Class, &p.DeadLetteredAt, &p.PurgedAt)
		if p.DeadLetteredAt.Equal(time.Unix(0, 0)) {
			p.DeadLetteredAt = time.Time{}
		}
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading dlq_purged of %s: %w", topic, err)
	}
	return out, nil
}
