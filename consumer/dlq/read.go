package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// NewReader returns a consumer for reading DLQ topics by assignment: it
// joins no group and commits nothing.
func NewReader(bootstrap string) (*kafka.Consumer, error) {
	cfg := readerConfig(bootstrap)
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dlq reader: %w", err)
	}
	return c, nil
}

// ReaderSettings are the settings a consumer needs to be passed to Read and
// ReadStats: partition EOF events tell them that a partition has nothing
// more to give, e.g. when a purge deleted the records between reading the
// watermarks and fetching (librdkafka then resets the fetch position to
// the end and delivers no record).
//
// librdkafka's prefetch is bounded too (its defaults hold up to 64 MiB of
// records and fetch responses of up to 50 MiB), so that reading a large DLQ
// takes little memory: a 4 MiB prefetch, 1 MiB fetch responses and 256 KiB
// per partition (a larger record is still fetched whole). With so small
// a prefetch librdkafka reaches its bound often, and then waits
// fetch.queue.backoff.ms before fetching again: 10 ms instead of a second.
var ReaderSettings = kafka.ConfigMap{
	"enable.partition.eof":       true,
	"queued.max.messages.kbytes": 4 << 10,
	"fetch.max.bytes":            1 << 20,
	"max.partition.fetch.bytes":  256 << 10,
	"fetch.queue.backoff.ms":     10,
}

// ErrNoTopic means the DLQ topic does not exist: nothing was ever
// dead-lettered to it (the consumers create it at start).
var ErrNoTopic = errors.New("topic does not exist")

// Watermarks returns the low and high watermark of every partition of
// topic (ErrNoTopic wrapped when it does not exist): records below the low
// one were deleted, by a purge or otherwise.
func Watermarks(c *kafka.Consumer, topic string) (map[int32][2]int64, error) {
	return watermarks(c, topic)
}

// watermarks returns the low and high watermark of every partition of topic.
func watermarks(c *kafka.Consumer, topic string) (map[int32][2]int64, error) {
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || t.Error.Code() == kafka.ErrUnknownTopic {
		return nil, fmt.Errorf("%s: %w", topic, ErrNoTopic)
	}
	if t.Error.Code() != kafka.ErrNoError {
		return nil, fmt.Errorf("metadata of %s: %w", topic, t.Error)
	}
	out := make(map[int32][2]int64, len(t.Partitions))
	for _, p := range t.Partitions {
		low, high, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s[%d]: %w", topic, p.ID, err)
		}
		out[p.ID] = [2]int64{low, high}
	}
	return out, nil
}

// Stats summarises a DLQ topic.
type Stats struct {
	Count  int64     // records held (high minus low watermark over partitions)
	Oldest time.Time // timestamp of the oldest record held; zero when empty
}

// ReadStats counts the records held by topic and reads the timestamp of the
// first record of each non-empty partition.
func ReadStats(ctx context.Context, c *kafka.Consumer, topic string) (Stats, error) {
	var st Stats
	wm, err := watermarks(c, topic)
	if err != nil {
		return st, err
	}
	var assign []kafka.TopicPartition
	for p, w := range wm {
		if n := w[1] - w[0]; n > 0 {
			st.Count += n
			assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(w[0])})
		}
	}
	if len(assign) == 0 {
		return st, nil
	}
	err = scan(ctx, c, assign, wm, func(m *kafka.Message) bool {
		if st.Oldest.IsZero() || m.Timestamp.Before(st.Oldest) {
			st.Oldest = m.Timestamp
		}
		return false // one record per partition
	})
	return st, err
}

// Scan calls fn with every record held by topic, partition by partition
// in offset order, and returns fn's first error. It holds one record at a
// time (besides librdkafka's bounded prefetch, ReaderSettings), so a DLQ of
// any size can be listed, replayed or purged; it ends when every partition
// reached the high watermark read at its start, and fails only when the
// broker delivers nothing for stallTimeout.
func Scan(ctx context.Context, c *kafka.Consumer, topic string, fn func(Entry) error) error {
	wm, err := watermarks(c, topic)
	if err != nil {
		return err
	}
	for _, p := range slices.Sorted(maps.Keys(wm)) {
		w := wm[p]
		if err := ScanRange(ctx, c, topic, p, w[0], w[1], fn); err != nil {
			return err
		}
	}
	return nil
}

// ScanRange calls fn with the records of topic's partition from offset
// from up to (not including) to, in offset order; records deleted meanwhile
// are skipped.
func ScanRange(ctx context.Context, c *kafka.Consumer, topic string, partition int32, from, to int64, fn func(Entry) error) error {
	if to <= from {
		return nil
	}
	var fnErr error
	err := scan(ctx, c, []kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(from)}},
		map[int32][2]int64{partition: {from, to}}, func(m *kafka.Message) bool {
			if int64(m.TopicPartition.Offset) >= to {
				return false
			}
			fnErr = fn(Parse(m))
			return fnErr == nil
		})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// ErrNoRecord means a position holds no record (deleted, or never written).
var ErrNoRecord = errors.New("no such record")

// ReadAt returns the record of topic at partition and offset.
func ReadAt(ctx context.Context, c *kafka.Consumer, topic string, partition int32, offset int64) (Entry, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return Entry{}, err
	}
	w, ok := wm[partition]
	if !ok || offset < w[0] || offset >= w[1] {
		return Entry{}, fmt.Errorf("%s/%d/%d: %w", topic, partition, offset, ErrNoRecord)
	}
	var found *Entry
	err = ScanRange(ctx, c, topic, partition, offset, offset+1, func(e Entry) error {
		found = &e
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	if found == nil || found.Offset != offset {
		return Entry{}, fmt.Errorf("%s/%d/%d: %w", topic, partition, offset, ErrNoRecord)
	}
	return *found, nil
}

// Read returns every record held by topic, in partition and offset order.
// It holds them all: the tools stream with Scan; Read is for tests and
// topics known to be small.
func Read(ctx context.Context, c *kafka.Consumer, topic string) ([]Entry, error) {
	var out []Entry
	err := Scan(ctx, c, topic, func(e Entry) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// stallTimeout is how long a scan waits for the broker to deliver anything
// (a record or a partition's end) before it fails.
const stallTimeout = 30 * time.Second

// scan reads the assigned partitions from their offsets until each reaches
// its high watermark, or until fn returns false for a record of it. It
// fails when nothing arrives for stallTimeout.
func scan(ctx context.Context, c *kafka.Consumer, assign []kafka.TopicPartition, wm map[int32][2]int64, fn func(*kafka.Message) bool) error {
	if err := c.Assign(assign); err != nil {
		return fmt.Errorf("assigning: %w", err)
	}
	defer func() { _ = c.Unassign() }()
	open := map[int32]bool{}
	for _, tp := range assign {
		open[tp.Partition] = true
	}
	last := time.Now()
	for len(open) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(last) > stallTimeout {
			return fmt.Errorf("reading %s: nothing received for %s with %d partitions unread", *assign[0].Topic, stallTimeout, len(open))
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			last = time.Now()
			p := e.TopicPartition.Partition
			if !open[p] {
				continue
			}
			more := fn(e)
			if !more || int64(e.TopicPartition.Offset)+1 >= wm[p][1] {
				delete(open, p)
			}
		case kafka.PartitionEOF:
			last = time.Now()
			delete(open, e.Partition) // nothing more to read (records deleted meanwhile)
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("reading: %w", e)
			}
		}
	}
	return nil
}
