package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
var ReaderSettings = kafka.ConfigMap{"enable.partition.eof": true}

// ErrNoTopic means the DLQ topic does not exist: nothing was ever
// dead-lettered to it (the consumers create it at start).
var ErrNoTopic = errors.New("topic does not exist")

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

// Read returns every record held by topic, in partition and offset order.
func Read(ctx context.Context, c *kafka.Consumer, topic string) ([]Entry, error) {
	wm, err := watermarks(c, topic)
	if err != nil {
		return nil, err
	}
	var assign []kafka.TopicPartition
	for p, w := range wm {
		if w[1] > w[0] {
			assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(w[0])})
		}
	}
	if len(assign) == 0 {
		return nil, nil
	}
	var out []Entry
	err = scan(ctx, c, assign, wm, func(m *kafka.Message) bool {
		out = append(out, Parse(m))
		return true
	})
	sortEntries(out)
	return out, err
}

// scan reads the assigned partitions from their offsets until each reaches
// its high watermark, or until fn returns false for a record of it.
func scan(ctx context.Context, c *kafka.Consumer, assign []kafka.TopicPartition, wm map[int32][2]int64, fn func(*kafka.Message) bool) error {
	if err := c.Assign(assign); err != nil {
		return fmt.Errorf("assigning: %w", err)
	}
	defer func() { _ = c.Unassign() }()
	open := map[int32]bool{}
	for _, tp := range assign {
		open[tp.Partition] = true
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(open) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reading %s: timed out with %d partitions unread", *assign[0].Topic, len(open))
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			p := e.TopicPartition.Partition
			if !open[p] {
				continue
			}
			more := fn(e)
			if !more || int64(e.TopicPartition.Offset)+1 >= wm[p][1] {
				delete(open, p)
			}
		case kafka.PartitionEOF:
			delete(open, e.Partition) // nothing more to read (records deleted meanwhile)
		case kafka.Error:
			if e.IsFatal() {
				return fmt.Errorf("reading: %w", e)
			}
		}
	}
	return nil
}

func sortEntries(es []Entry) {
	slices.SortStableFunc(es, func(a, b Entry) int {
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
}
