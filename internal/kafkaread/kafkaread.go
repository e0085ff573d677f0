// Package kafkaread reads Kafka state without changing it: every record of a
// topic from the beginning (a consumer that joins no group and commits
// nothing), partition end offsets, and a group's committed offsets. The
// delivery auditor and the tests use it to look at what Kafka durably holds.
package kafkaread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// Record is one Kafka record.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
	Timestamp time.Time
}

// Reader reads one cluster. Create with New; Close when done.
type Reader struct {
	c         *kafka.Consumer
	bootstrap string
}

// readerGroup is the group id of the assign-only consumers.
const readerGroup = "eventforge-kafkaread"

// config is the configuration of every consumer a Reader creates: built by
// kafkaconf (so the --kafka-* TLS and SASL settings apply), committing
// nothing.
func config(bootstrap, group string) kafka.ConfigMap {
	cfg := kafkaconf.Tool(bootstrap, "eventforge-kafkaread")
	cfg["group.id"] = group
	cfg["enable.auto.commit"] = false
	return cfg
}

// New connects a reader to bootstrap.
func New(bootstrap string) (*Reader, error) {
	// librdkafka requires a group id even for assign-only consumers; this
	// one never joins it and never commits.
	cfg := config(bootstrap, readerGroup)
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating kafka reader: %w", err)
	}
	return &Reader{c: c, bootstrap: bootstrap}, nil
}

// Close releases the reader.
func (r *Reader) Close() { _ = r.c.Close() }

// EndOffsets returns the high watermark of every partition of topic. A
// missing topic is an error.
func (r *Reader) EndOffsets(topic string) (map[int32]int64, error) {
	md, err := r.c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("reading metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || len(t.Partitions) == 0 {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	ends := map[int32]int64{}
	for _, p := range t.Partitions {
		_, high, err := r.c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, fmt.Errorf("reading watermarks of %s[%d]: %w", topic, p.ID, err)
		}
		ends[p.ID] = high
	}
	return ends, nil
}

// Exists reports whether topic exists.
func (r *Reader) Exists(topic string) (bool, error) {
	md, err := r.c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return false, fmt.Errorf("reading metadata of %s: %w", topic, err)
	}
	t, ok := md.Topics[topic]
	return ok && t.Error.Code() != kafka.ErrUnknownTopicOrPart && len(t.Partitions) > 0, nil
}

// ReadAll reads every record of topic from the beginning up to the end
// offsets observed when it starts, in partition order.
func (r *Reader) ReadAll(ctx context.Context, topic string) ([]Record, error) {
	return r.ReadFrom(ctx, topic, nil)
}

// ReadFrom reads the records of topic from the given offset of each
// partition (the beginning where absent) up to the end offsets observed when
// it starts.
func (r *Reader) ReadFrom(ctx context.Context, topic string, from map[int32]int64) ([]Record, error) {
	ends, err := r.EndOffsets(topic)
	if err != nil {
		return nil, err
	}
	cfg := config(r.bootstrap, readerGroup)
	cfg["enable.partition.eof"] = true
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating kafka reader: %w", err)
	}
	defer c.Close()
	var assign []kafka.TopicPartition
	remaining := map[int32]bool{}
	for p, end := range ends {
		// Records below the low watermark are gone (retention, or deleted
		// as a DLQ purge does): a partition whose low watermark reached its
		// end has nothing to read.
		low, _, err := r.c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			return nil, fmt.Errorf("reading watermarks of %s[%d]: %w", topic, p, err)
		}
		start := max(from[p], low)
		if end > start {
			assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(start)})
			remaining[p] = true
		}
	}
	if len(assign) == 0 {
		return nil, nil
	}
	if err := c.Assign(assign); err != nil {
		return nil, fmt.Errorf("assigning %s: %w", topic, err)
	}
	var out []Record
	for len(remaining) > 0 {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("reading %s with %d partitions unfinished: %w", topic, len(remaining), err)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			p := e.TopicPartition.Partition
			rec := Record{Partition: p, Offset: int64(e.TopicPartition.Offset), Key: string(e.Key), Value: e.Value,
				Headers: make(map[string]string, len(e.Headers)), Timestamp: e.Timestamp}
			for _, h := range e.Headers {
				rec.Headers[h.Key] = string(h.Value)
			}
			if rec.Offset < ends[p] {
				out = append(out, rec)
			}
			if rec.Offset+1 >= ends[p] {
				delete(remaining, p)
			}
		case kafka.PartitionEOF:
			// Nothing left to read in this partition (e.g. the last offsets
			// hold no readable record).
			delete(remaining, e.Partition)
		case kafka.Error:
			if e.IsFatal() {
				return out, fmt.Errorf("reading %s: %w", topic, e)
			}
		}
	}
	return out, nil
}

// Committed returns group's committed offset for each partition of topic;
// partitions where the group committed nothing are absent.
func (r *Reader) Committed(group, topic string) (map[int32]int64, error) {
	ends, err := r.EndOffsets(topic)
	if err != nil {
		return nil, err
	}
	cfg := config(r.bootstrap, group)
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating offset reader: %w", err)
	}
	defer c.Close()
	tps := make([]kafka.TopicPartition, 0, len(ends))
	for p := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	// Right after a broker restart the group coordinator may move or still
	// be loading: retry what Kafka calls retriable for a while.
	var got []kafka.TopicPartition
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		got, err = c.Committed(tps, 10000)
		if err == nil || !coordinatorBusy(err) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading committed offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for _, tp := range got {
		if tp.Offset >= 0 {
			out[tp.Partition] = int64(tp.Offset)
		}
	}
	return out, nil
}

// coordinatorBusy reports errors that mean "ask again shortly": the group
// coordinator moved, is loading, or is not available yet.
func coordinatorBusy(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrNotCoordinator, kafka.ErrCoordinatorLoadInProgress, kafka.ErrCoordinatorNotAvailable:
		return true
	}
	return kerr.IsRetriable()
}

// OffsetsAt returns, for every partition of topic, the offset of its first
// record with a timestamp at or after t (the end offset where there is
// none).
func (r *Reader) OffsetsAt(topic string, t time.Time) (map[int32]int64, error) {
	ends, err := r.EndOffsets(topic)
	if err != nil {
		return nil, err
	}
	tps := make([]kafka.TopicPartition, 0, len(ends))
	for p := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(t.UnixMilli())})
	}
	got, err := r.c.OffsetsForTimes(tps, 10000)
	if err != nil {
		return nil, fmt.Errorf("looking up the offsets of %s at %s: %w", topic, t.Format(time.RFC3339), err)
	}
	out := make(map[int32]int64, len(got))
	for _, tp := range got {
		if tp.Offset < 0 { // no record at or after t
			out[tp.Partition] = ends[tp.Partition]
			continue
		}
		out[tp.Partition] = int64(tp.Offset)
	}
	return out, nil
}
