package dlq

import (
	"context"
	"errors"
	"fmt"
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

// Summarize counts es by consumer, class and type.
func Summarize(es []Entry) Summary {
	s := Summary{ByConsumer: map[string]int{}, ByClass: map[string]int{}, ByType: map[string]int{}}
	for _, e := range es {
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
	return s
}

// Dedupe keeps one entry per replayable event: entries with the same
// original topic and event ID (one event dead-lettered by two consumers, or
// twice by one) replay as one record, because every consumer of the
// original topic receives the replay. The newest entry is kept. Entries
// without an event ID are kept as they are.
func Dedupe(es []Entry) []Entry {
	last := map[string]int{}
	for i, e := range es {
		if e.EventID != "" {
			k := e.OriginalTopic + "\x00" + strings.ToLower(e.EventID)
			if j, ok := last[k]; !ok || es[j].Timestamp.Before(e.Timestamp) || es[j].Timestamp.Equal(e.Timestamp) {
				last[k] = i
			}
		}
	}
	var out []Entry
	for i, e := range es {
		if e.EventID == "" || last[e.OriginalTopic+"\x00"+strings.ToLower(e.EventID)] == i {
			out = append(out, e)
		}
	}
	return out
}

// Replay republishes es to their original topics with their original key,
// value and headers (so the event ID is unchanged) plus the replay headers,
// and waits for every acknowledgement. progress, if not nil, is called once
// per acknowledged record. It returns the number acknowledged.
func Replay(ctx context.Context, p *kafka.Producer, es []Entry, now time.Time, progress func()) (int, error) {
	for _, e := range es {
		if e.OriginalTopic == "" {
			return 0, fmt.Errorf("entry %s has no %s header: cannot replay", e.Position(), HeaderOriginalTopic)
		}
	}
	delivery := make(chan kafka.Event, len(es))
	for _, e := range es {
		if err := p.Produce(ReplayRecord(e, now), delivery); err != nil {
			return 0, fmt.Errorf("producing replay of %s: %w", e.Position(), err)
		}
	}
	var acked int
	var errs []error
	for range es {
		select {
		case ev := <-delivery:
			m, ok := ev.(*kafka.Message)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("unexpected delivery event %v", ev))
			case m.TopicPartition.Error != nil:
				errs = append(errs, fmt.Errorf("replaying to %s: %w", *m.TopicPartition.Topic, m.TopicPartition.Error))
			default:
				acked++
				if progress != nil {
					progress()
				}
			}
		case <-ctx.Done():
			return acked, fmt.Errorf("waiting for replay acknowledgements: %w", ctx.Err())
		}
	}
	return acked, errors.Join(errs...)
}

// NewProducer returns the idempotent, acks=all producer replays use. Its
// events channel is drained until Close.
func NewProducer(bootstrap string) (*kafka.Producer, error) {
	cfg := producerConfig(bootstrap)
	p, err := kafka.NewProducer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating replay producer: %w", err)
	}
	go func() {
		for range p.Events() {
			// Drained so that the producer never stalls; delivery reports go
			// to per-call channels.
		}
	}()
	return p, nil
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
