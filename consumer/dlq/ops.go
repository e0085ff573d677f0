package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Filter selects DLQ entries; a zero field matches everything.
type Filter struct {
	Consumer  string        // dlq.consumer
	Class     string        // dlq.error.class
	Type      string        // event type header
	EventID   string        // header id
	Key       string        // record key (the order ID)
	Contains  string        // substring of dlq.error.message
	OlderThan time.Duration // dead-lettered at least this long ago
	NewerThan time.Duration // dead-lettered at most this long ago
}

// Match reports whether e passes f at time now.
func (f Filter) Match(e Entry, now time.Time) bool {
	switch {
	case f.Consumer != "" && e.Consumer != f.Consumer,
		f.Class != "" && e.Class != f.Class,
		f.Type != "" && e.Type != f.Type,
		f.EventID != "" && !strings.EqualFold(e.EventID, f.EventID),
		f.Key != "" && string(e.Key) != f.Key,
		f.Contains != "" && !strings.Contains(e.Message, f.Contains),
		f.OlderThan > 0 && now.Sub(e.Timestamp) < f.OlderThan,
		f.NewerThan > 0 && now.Sub(e.Timestamp) > f.NewerThan:
		return false
	}
	return true
}

// IsZero reports whether f matches everything.
func (f Filter) IsZero() bool { return f == Filter{} }

// Select returns the entries of es that pass f.
func Select(es []Entry, f Filter, now time.Time) []Entry {
	var out []Entry
	for _, e := range es {
		if f.Match(e, now) {
			out = append(out, e)
		}
	}
	return out
}

// Summary counts entries.
type Summary struct {
	Total      int
	ByConsumer map[string]int
	ByClass    map[string]int
	ByType     map[string]int
	Oldest     time.Time // timestamp of the oldest entry
	Newest     time.Time // timestamp of the newest entry
}

// NewSummary returns an empty summary, for Add.
func NewSummary() Summary {
	return Summary{ByConsumer: map[string]int{}, ByClass: map[string]int{}, ByType: map[string]int{}}
}

// Add counts e.
func (s *Summary) Add(e Entry) {
	s.Total++
	s.ByConsumer[e.Consumer]++
	s.ByClass[e.Class]++
	s.ByType[e.Type]++
	if s.Oldest.IsZero() || e.Timestamp.Before(s.Oldest) {
		s.Oldest = e.Timestamp
	}
	if e.Timestamp.After(s.Newest) {
		s.Newest = e.Timestamp
	}
}

// Summarize counts es by consumer, class and type.
func Summarize(es []Entry) Summary {
	s := NewSummary()
	for _, e := range es {
		s.Add(e)
	}
	return s
}

// replayKey is what entries that replay as one record share: the original
// topic and the event ID; "" for an entry without an event ID.
func (e Entry) replayKey() string {
	if e.EventID == "" {
		return ""
	}
	return e.OriginalTopic + "\x00" + strings.ToLower(e.EventID)
}

// Newest tracks, per replayable event, which of its entries replays it:
// entries with the same original topic and event ID (one event
// dead-lettered by two consumers, or twice by one) replay as one record,
// because every consumer of the original topic receives the replay, and
// the newest entry is the one replayed (the later of equal timestamps).
// It holds a position per event, not the entries, so it can be filled by a
// first Scan and asked during a second.
type Newest struct {
	m map[string]newestEntry
}

type newestEntry struct {
	at        time.Time
	partition int32
	offset    int64
}

// Add considers e.
func (n *Newest) Add(e Entry) {
	k := e.replayKey()
	if k == "" {
		return
	}
	if n.m == nil {
		n.m = map[string]newestEntry{}
	}
	if cur, ok := n.m[k]; !ok || !e.Timestamp.Before(cur.at) {
		n.m[k] = newestEntry{at: e.Timestamp, partition: e.Partition, offset: e.Offset}
	}
}

// Events returns the number of events added (entries without an event ID
// not counted).
func (n *Newest) Events() int { return len(n.m) }

// Replays reports whether e is the entry that replays its event (always
// for an entry without an event ID).
func (n *Newest) Replays(e Entry) bool {
	k := e.replayKey()
	if k == "" {
		return true
	}
	cur, ok := n.m[k]
	return ok && cur.partition == e.Partition && cur.offset == e.Offset
}

// ReplayedBy returns the position of the entry that replays e's event
// (e's own position for an entry without an event ID), and false when no
// entry of it was added.
func (n *Newest) ReplayedBy(e Entry) (partition int32, offset int64, ok bool) {
	k := e.replayKey()
	if k == "" {
		return e.Partition, e.Offset, true
	}
	cur, ok := n.m[k]
	return cur.partition, cur.offset, ok
}

// Dedupe keeps, of es, the entries that replay their event (Newest), in
// their order.
func Dedupe(es []Entry) []Entry {
	var n Newest
	for _, e := range es {
		n.Add(e)
	}
	var out []Entry
	for _, e := range es {
		if n.Replays(e) {
			out = append(out, e)
		}
	}
	return out
}

// Ref names a DLQ entry in a replay's result.
type Ref struct {
	Topic         string // the DLQ topic
	Partition     int32
	Offset        int64
	EventID       string
	Key           []byte
	OriginalTopic string
}

// Position names the entry as "<topic>/<partition>/<offset>".
func (r Ref) Position() string {
	return Entry{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}.Position()
}

// RefOf returns e's Ref.
func RefOf(e Entry) Ref {
	return Ref{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, EventID: e.EventID, Key: e.Key, OriginalTopic: e.OriginalTopic}
}

// Result is the outcome of one entry's replay: Err is nil once the
// original topic acknowledged the replayed record.
type Result struct {
	Ref
	Err error
}

// replayWindow bounds the replays produced and not yet acknowledged, and
// so the records a Replayer holds.
const replayWindow = 1000

// Replayer republishes DLQ entries to their original topics with their
// original key, value and headers (so the event ID is unchanged) plus the
// replay headers, with at most replayWindow of them unacknowledged, and
// reports each entry's outcome: the broker's acknowledgement, or why it
// was not replayed (no original topic, a refused produce, a failed
// delivery). An entry's failure does not stop the others.
type Replayer struct {
	p        *Producer
	at       time.Time
	onResult func(Result)
	delivery chan kafka.Event
	inflight int
}

// NewReplayer returns a Replayer producing with p, stamping replays with
// at and calling onResult once per entry added, from Add or Wait.
func NewReplayer(p *Producer, at time.Time, onResult func(Result)) *Replayer {
	return &Replayer{p: p, at: at, onResult: onResult, delivery: make(chan kafka.Event, replayWindow)}
}

// Add replays e, first waiting for an acknowledgement while replayWindow
// replays are outstanding. It returns an error only when ctx ends.
func (r *Replayer) Add(ctx context.Context, e Entry) error {
	for r.inflight >= replayWindow {
		if err := r.await(ctx); err != nil {
			return err
		}
	}
	ref := RefOf(e)
	if e.OriginalTopic == "" {
		r.onResult(Result{Ref: ref, Err: fmt.Errorf("no %s header: cannot replay", HeaderOriginalTopic)})
		return nil
	}
	m := ReplayRecord(e, r.at)
	m.Opaque = ref
	if err := r.p.producer.Produce(m, r.delivery); err != nil {
		r.onResult(Result{Ref: ref, Err: fmt.Errorf("producing the replay to %s: %w", e.OriginalTopic, err)})
		return nil
	}
	r.inflight++
	return nil
}

// Wait waits for the outcome of every replay added. It returns an error
// only when ctx ends first.
func (r *Replayer) Wait(ctx context.Context) error {
	for r.inflight > 0 {
		if err := r.await(ctx); err != nil {
			return err
		}
	}
	return nil
}

// await reports one delivery.
func (r *Replayer) await(ctx context.Context) error {
	select {
	case ev := <-r.delivery:
		r.inflight--
		m, ok := ev.(*kafka.Message)
		if !ok {
			return fmt.Errorf("unexpected delivery event %v", ev)
		}
		ref, _ := m.Opaque.(Ref)
		var err error
		if m.TopicPartition.Error != nil {
			err = fmt.Errorf("replaying to %s: %w", ref.OriginalTopic, m.TopicPartition.Error)
		}
		r.onResult(Result{Ref: ref, Err: err})
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %d replay acknowledgements: %w", r.inflight, ctx.Err())
	}
}

// PurgePlan is what Purge deletes per partition: records from Low up to
// (not including) To.
type PurgePlan struct {
	Partition int32
	Low, To   int64
}

// PlanPurge computes, per partition of topic, the records to delete: all of
// them, or with olderThan > 0 those whose timestamp is before now-olderThan
// (Kafka deletes prefixes only, so a partition's records are deleted up to
// its first newer record).
func PlanPurge(c *kafka.Consumer, topic string, olderThan time.Duration, now time.Time) ([]PurgePlan, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return nil, err
	}
	var plans []PurgePlan
	var query []kafka.TopicPartition
	for p, w := range wm {
		if w[1] <= w[0] {
			continue
		}
		plans = append(plans, PurgePlan{Partition: p, Low: w[0], To: w[1]})
		query = append(query, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(now.Add(-olderThan).UnixMilli())})
	}
	if olderThan > 0 && len(query) > 0 {
		offs, err := c.OffsetsForTimes(query, 10000)
		if err != nil {
			return nil, fmt.Errorf("offsets for times of %s: %w", topic, err)
		}
		for _, o := range offs {
			for i := range plans {
				if plans[i].Partition == o.Partition && o.Offset >= 0 {
					plans[i].To = min(plans[i].To, int64(o.Offset))
				}
			}
		}
	}
	var out []PurgePlan
	for _, pl := range plans {
		if pl.To > pl.Low {
			out = append(out, pl)
		}
	}
	return out, nil
}

// PlanThrough computes, per partition of topic named in through, the
// records from the partition's first held offset up to and including
// through[partition]: what an operator named, or what a replay covered.
func PlanThrough(c *kafka.Consumer, topic string, through map[int32]int64) ([]PurgePlan, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return nil, err
	}
	var out []PurgePlan
	for _, p := range slices.Sorted(maps.Keys(through)) {
		w, ok := wm[p]
		if !ok {
			return nil, fmt.Errorf("%s has no partition %d", topic, p)
		}
		if to := min(through[p]+1, w[1]); to > w[0] {
			out = append(out, PurgePlan{Partition: p, Low: w[0], To: to})
		}
	}
	return out, nil
}

// Purge deletes the planned records of topic.
func Purge(ctx context.Context, a *kafka.AdminClient, topic string, plans []PurgePlan) error {
	if len(plans) == 0 {
		return nil
	}
	tps := make([]kafka.TopicPartition, len(plans))
	for i, pl := range plans {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: pl.Partition, Offset: kafka.Offset(pl.To)}
	}
	res, err := a.DeleteRecords(ctx, tps)
	if err != nil {
		return fmt.Errorf("deleting records of %s: %w", topic, err)
	}
	var errs []error
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			errs = append(errs, fmt.Errorf("deleting records of %s[%d]: %w", topic, r.TopicPartition.Partition, r.TopicPartition.Error))
		}
	}
	return errors.Join(errs...)
}
