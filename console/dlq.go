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

// dlqRow is one DLQ record in the console's table.
type dlqRow struct {
	Position          string    `json:"position"` // <dlq topic>/<partition>/<offset>
	Partition         int32     `json:"partition"`
	Offset            int64     `json:"offset"`
	EventID           string    `json:"event_id"`
	Type              string    `json:"type"`
	OrderID           string    `json:"order_id"`
	Consumer          string    `json:"consumer"`
	Class             string    `json:"error_class"`
	Message           string    `json:"error_message"`
	Attempts          int       `json:"attempts"`
	OriginalTopic     string    `json:"original_topic"`
	OriginalPartition int32     `json:"original_partition"`
	OriginalOffset    int64     `json:"original_offset"`
	FirstFailedAt     time.Time `json:"first_failed_at"`
	LastFailedAt      time.Time `json:"last_failed_at"`
	AgeSeconds        float64   `json:"age_seconds"`
	WasReplay         bool      `json:"was_replay"`
}

// dlqRows bounds the rows the console's DLQ table shows: the newest,
// by their last failure.
const dlqRows = 500

// dlqEntries scans the DLQ topic (dlq.Scan: one record at a time) and
// returns how many records it holds and the newest dlqRows of them,
// newest first, without payloads.
func (c *Console) dlqEntries(ctx context.Context) (int, []dlq.Entry, error) {
	topic := c.cfg.dlqTopic()
	exists, err := c.kafka.Exists(topic)
	if err != nil || !exists {
		return 0, nil, err
	}
	r, err := dlq.NewReader(c.cfg.KafkaBrokers)
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	held := 0
	var es []dlq.Entry
	newestFirst := func() {
		sort.SliceStable(es, func(i, j int) bool { return es[i].LastFailedAt.After(es[j].LastFailedAt) })
		es = es[:min(len(es), dlqRows)]
	}
	err = dlq.Scan(ctx, r, topic, func(e dlq.Entry) error {
		held++
		e.Value, e.Headers = nil, nil
		if es = append(es, e); len(es) >= 2*dlqRows {
			newestFirst()
		}
		return nil
	})
	newestFirst()
	return held, es, err
}

func (c *Console) handleDLQ(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	held, es, err := c.dlqEntries(ctx)
	if err != nil {
		c.logger.Warn("reading dlq", "topic", c.cfg.dlqTopic(), "err", err)
		writeError(w, http.StatusServiceUnavailable, "reading the DLQ failed; see the server log")
		return
	}
	now := time.Now()
	rows := make([]dlqRow, 0, len(es))
	for _, e := range es {
		rows = append(rows, dlqRow{
			Position: e.Position(), Partition: e.Partition, Offset: e.Offset, EventID: e.EventID, Type: e.Type, OrderID: string(e.Key),
			Consumer: e.Consumer, Class: e.Class, Message: e.Message, Attempts: e.Attempts,
			OriginalTopic: e.OriginalTopic, OriginalPartition: e.OriginalPartition, OriginalOffset: e.OriginalOffset,
			FirstFailedAt: e.FirstFailedAt, LastFailedAt: e.LastFailedAt, AgeSeconds: now.Sub(e.Timestamp).Seconds(),
			WasReplay: e.ReplaySource != "",
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"topic": c.cfg.dlqTopic(), "count": held, "entries": rows})
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
