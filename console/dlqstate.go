package console

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// dlqTracker follows the DLQ topic and the replays in its original topics
// (records with dlq.replay.source): each refresh reads only what was
// appended since the one before, so the sampler and the DLQ table tell a
// pending dead letter from a replayed one every few seconds without
// rereading the topics. It holds the held dead letters without payload and
// a time per replayed event.
type dlqTracker struct {
	brokers, topic string

	mu      sync.Mutex
	c       *kafka.Consumer
	next    map[int32]int64 // per DLQ partition, the next offset to read
	held    map[string]dlq.Entry
	replays dlq.Replays
	sources map[string]map[int32]int64 // original topic → next offset per partition
}

func newDLQTracker(brokers, topic string) *dlqTracker {
	return &dlqTracker{brokers: brokers, topic: topic, next: map[int32]int64{}, held: map[string]dlq.Entry{}, sources: map[string]map[int32]int64{}}
}

// dlqRecord is a held dead letter and its state.
type dlqRecord struct {
	dlq.Entry
	State      dlq.State
	ReplayedAt time.Time // zero while pending
}

// refresh reads what the DLQ topic and the original topics gained since
// the last call and returns every held dead letter with its state. A DLQ
// topic that does not exist holds none.
func (t *dlqTracker) refresh(ctx context.Context) ([]dlqRecord, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.c == nil {
		c, err := dlq.NewReader(t.brokers)
		if err != nil {
			return nil, err
		}
		t.c = c
	}
	wm, err := dlq.Watermarks(t.c, t.topic)
	if errors.Is(err, dlq.ErrNoTopic) {
		t.next, t.held = map[int32]int64{}, map[string]dlq.Entry{}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.readDLQ(ctx, wm); err != nil {
		return nil, err
	}
	if err := t.readReplays(ctx); err != nil {
		return nil, err
	}
	out := make([]dlqRecord, 0, len(t.held))
	for _, e := range t.held {
		r := dlqRecord{Entry: e, State: dlq.StatePending}
		if at, ok := t.replays.ReplayedAt(e); ok {
			r.State, r.ReplayedAt = dlq.StateReplayed, at
		}
		out = append(out, r)
	}
	return out, nil
}

// readDLQ forgets the dead letters below each partition's low watermark
// (purged) and reads the ones appended since the last call.
func (t *dlqTracker) readDLQ(ctx context.Context, wm map[int32][2]int64) error {
	for pos, e := range t.held {
		if w, ok := wm[e.Partition]; !ok || e.Offset < w[0] || e.Offset >= w[1] {
			delete(t.held, pos)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(wm)) {
		w := wm[p]
		from := max(t.next[p], w[0])
		if w[1] < t.next[p] { // the topic was recreated
			from = w[0]
		}
		err := dlq.ScanRange(ctx, t.c, t.topic, p, from, w[1], func(e dlq.Entry) error {
			e.Value, e.Headers = nil, nil
			t.held[e.Position()] = e
			return nil
		})
		if err != nil {
			return err
		}
		t.next[p] = w[1]
	}
	return nil
}

// readReplays reads the replays each original topic gained; a topic seen
// for the first time is read from the time of the oldest held dead letter.
func (t *dlqTracker) readReplays(ctx context.Context) error {
	var oldest time.Time
	for _, e := range t.held {
		if oldest.IsZero() || e.Timestamp.Before(oldest) {
			oldest = e.Timestamp
		}
	}
	for _, e := range t.held {
		src := e.OriginalTopic
		if src == "" {
			continue
		}
		if _, ok := t.sources[src]; ok {
			continue
		}
		from, err := dlq.ReplayOffsets(t.c, src, oldest)
		if errors.Is(err, dlq.ErrNoTopic) {
			continue
		}
		if err != nil {
			return err
		}
		t.sources[src] = from
	}
	for _, src := range slices.Sorted(maps.Keys(t.sources)) {
		next, err := dlq.ScanReplays(ctx, t.c, src, t.sources[src], &t.replays)
		if errors.Is(err, dlq.ErrNoTopic) {
			continue
		}
		if err != nil {
			return err
		}
		t.sources[src] = next
	}
	return nil
}

func (t *dlqTracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.c != nil {
		t.c.Close()
		t.c = nil
	}
}
