package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// dlqRow is one DLQ record in the console's table: held (pending or
// replayed) or purged.
type dlqRow struct {
	Position          string     `json:"position"` // <dlq topic>/<partition>/<offset>
	Partition         int32      `json:"partition"`
	Offset            int64      `json:"offset"`
	State             dlq.State  `json:"state"` // pending, replayed, purged
	ReplayedAt        *time.Time `json:"replayed_at,omitempty"`
	PurgedAt          *time.Time `json:"purged_at,omitempty"`
	EventID           string     `json:"event_id"`
	Type              string     `json:"type"`
	OrderID           string     `json:"order_id"`
	Consumer          string     `json:"consumer"`
	Class             string     `json:"error_class"`
	Message           string     `json:"error_message"`
	Attempts          int        `json:"attempts"`
	OriginalTopic     string     `json:"original_topic"`
	OriginalPartition int32      `json:"original_partition"`
	OriginalOffset    int64      `json:"original_offset"`
	FirstFailedAt     time.Time  `json:"first_failed_at"`
	LastFailedAt      time.Time  `json:"last_failed_at"`
	AgeSeconds        float64    `json:"age_seconds"`
	WasReplay         bool       `json:"was_replay"`
}

// dlqRows bounds the held rows the console's DLQ table shows: the newest,
// by their last failure; purgedRows bounds the purged ones.
const (
	dlqRows    = 500
	purgedRows = 100
)

// dlqEntries returns the held dead letters with their state (dlqTracker),
// newest failure first.
func (c *Console) dlqEntries(ctx context.Context) ([]dlqRecord, error) {
	rs, err := c.dlqs.refresh(ctx)
	sort.SliceStable(rs, func(i, j int) bool {
		if !rs[i].LastFailedAt.Equal(rs[j].LastFailedAt) {
			return rs[i].LastFailedAt.After(rs[j].LastFailedAt)
		}
		return rs[i].Position() > rs[j].Position()
	})
	return rs, err
}

// dlqAnswer is GET /api/ops/dlq.
type dlqAnswer struct {
	Topic    string   `json:"topic"`
	Count    int      `json:"count"` // records held
	Pending  int      `json:"pending"`
	Replayed int      `json:"replayed"`
	Purged   int      `json:"purged"` // rows of dlq_purged for the topic
	Entries  []dlqRow `json:"entries"`
	// PurgedEntries are the newest purged records; nil when dlq_purged
	// cannot be read (the api's role may not).
	PurgedEntries []dlqRow `json:"purged_entries"`
}

func (c *Console) handleDLQ(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	rs, err := c.dlqEntries(ctx)
	if err != nil {
		c.logger.Warn("reading dlq", "topic", c.cfg.dlqTopic(), "err", err)
		writeError(w, http.StatusServiceUnavailable, "reading the DLQ failed; see the server log")
		return
	}
	now := time.Now()
	a := dlqAnswer{Topic: c.cfg.dlqTopic(), Count: len(rs), Entries: make([]dlqRow, 0, min(len(rs), dlqRows))}
	for _, rec := range rs {
		if rec.State == dlq.StateReplayed {
			a.Replayed++
		} else {
			a.Pending++
		}
		if len(a.Entries) == dlqRows {
			continue
		}
		e := rec.Entry
		row := dlqRow{
			Position: e.Position(), Partition: e.Partition, Offset: e.Offset, State: rec.State, EventID: e.EventID, Type: e.Type, OrderID: string(e.Key),
			Consumer: e.Consumer, Class: e.Class, Message: e.Message, Attempts: e.Attempts,
			OriginalTopic: e.OriginalTopic, OriginalPartition: e.OriginalPartition, OriginalOffset: e.OriginalOffset,
			FirstFailedAt: e.FirstFailedAt, LastFailedAt: e.LastFailedAt, AgeSeconds: now.Sub(e.Timestamp).Seconds(),
			WasReplay: e.ReplaySource != "",
		}
		if rec.State == dlq.StateReplayed {
			row.ReplayedAt = &rec.ReplayedAt
		}
		a.Entries = append(a.Entries, row)
	}
	a.Purged, a.PurgedEntries = c.purgedRows(ctx, now)
	writeJSON(w, http.StatusOK, a)
}

// purgedRows reads the newest purged records of the DLQ topic and how many
// there are; the api's role may not read dlq_purged (an operator's table),
// and then there are none to show.
func (c *Console) purgedRows(ctx context.Context, now time.Time) (int, []dlqRow) {
	topic := c.cfg.dlqTopic()
	var n int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM dlq_purged WHERE dlq_topic = $1`, topic).Scan(&n); err != nil {
		c.logger.Debug("reading dlq_purged", "topic", topic, "err", err)
		return 0, nil
	}
	ps, err := dlq.ReadPurged(ctx, c.pool, topic, purgedRows)
	if err != nil {
		c.logger.Debug("reading dlq_purged", "topic", topic, "err", err)
		return n, nil
	}
	rows := make([]dlqRow, 0, len(ps))
	for _, p := range ps {
		row := dlqRow{Position: p.Position(topic), Partition: p.Partition, Offset: p.Offset, State: dlq.StatePurged, PurgedAt: &p.PurgedAt,
			EventID: p.EventID, Type: p.Type, OrderID: p.OrderID, Consumer: p.Consumer, Class: p.Class, LastFailedAt: p.DeadLetteredAt}
		if !p.DeadLetteredAt.IsZero() {
			row.AgeSeconds = now.Sub(p.DeadLetteredAt).Seconds()
		}
		rows = append(rows, row)
	}
	return n, rows
}

type replayRequest struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

func (c *Console) handleReplay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body must be {\"partition\": n, \"offset\": n}")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	pos, err := c.replay(ctx, req.Partition, req.Offset)
	switch {
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no DLQ record at partition %d offset %d", req.Partition, req.Offset))
	case err != nil:
		c.logger.Warn("replaying dlq record", "partition", req.Partition, "offset", req.Offset, "err", err)
		writeError(w, http.StatusServiceUnavailable, "the replay failed; see the server log")
	default:
		writeJSON(w, http.StatusOK, map[string]any{"replayed": pos})
	}
}

// replay republishes the DLQ record at partition/offset to its original
// topic with its key, value and event ID (consumer/dlq.Replayer).
func (c *Console) replay(ctx context.Context, partition int32, offset int64) (string, error) {
	r, err := dlq.NewReader(c.cfg.KafkaBrokers)
	if err != nil {
		return "", err
	}
	defer r.Close()
	e, err := dlq.ReadAt(ctx, r, c.cfg.dlqTopic(), partition, offset)
	if errors.Is(err, dlq.ErrNoRecord) || errors.Is(err, dlq.ErrNoTopic) {
		return "", errNotFound
	}
	if err != nil {
		return "", err
	}
	p, err := c.replayProducer()
	if err != nil {
		return "", err
	}
	var res dlq.Result
	rp := dlq.NewReplayer(p, time.Now(), func(r dlq.Result) { res = r })
	if err := rp.Add(ctx, e); err != nil {
		return "", err
	}
	if err := rp.Wait(ctx); err != nil {
		return "", err
	}
	if res.Err != nil {
		return "", res.Err
	}
	c.logger.Info("dlq record replayed", "topic", e.Topic, "partition", e.Partition, "offset", e.Offset,
		"event_id", e.EventID, "order_id", string(e.Key))
	return e.Position(), nil
}
