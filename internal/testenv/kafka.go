package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Record is a Kafka record as the tests inspect it.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
}

// ReadTopic reads every record of topic from the beginning to the current
// end of each partition, with a consumer that joins no group and commits
// nothing.
func ReadTopic(bootstrap, topic string) ([]Record, error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"group.id":           "eventforge-testenv-reader", // required by librdkafka; never used: Assign, no commits
		"enable.auto.commit": false,
		"log_level":          3,
	})
	if err != nil {
		return nil, fmt.Errorf("creating reader: %w", err)
	}
	defer c.Close()
	ends, err := EndOffsets(c, topic)
	if err != nil {
		return nil, err
	}
	var assign []kafka.TopicPartition
	remaining := 0
	for p, end := range ends {
		if end > 0 {
			assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning})
			remaining++
		}
	}
	if remaining == 0 {
		return nil, nil
	}
	if err := c.Assign(assign); err != nil {
		return nil, fmt.Errorf("assigning: %w", err)
	}
	var out []Record
	deadline := time.Now().Add(30 * time.Second)
	done := map[int32]bool{}
	for remaining > 0 {
		if time.Now().After(deadline) {
			return out, fmt.Errorf("reading %s: timed out with %d partitions unread", topic, remaining)
		}
		ev := c.Poll(100)
		m, ok := ev.(*kafka.Message)
		if !ok {
			if e, isErr := ev.(kafka.Error); isErr && e.IsFatal() {
				return out, e
			}
			continue
		}
		r := Record{Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset), Key: string(m.Key), Value: m.Value, Headers: map[string]string{}}
		for _, h := range m.Headers {
			r.Headers[h.Key] = string(h.Value)
		}
		out = append(out, r)
		if r.Offset+1 >= ends[r.Partition] && !done[r.Partition] {
			done[r.Partition] = true
			remaining--
		}
	}
	return out, nil
}

// EndOffsets returns the high watermark of every partition of topic.
func EndOffsets(c *kafka.Consumer, topic string) (map[int32]int64, error) {
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, p := range md.Topics[topic].Partitions {
		_, high, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s[%d]: %w", topic, p.ID, err)
		}
		ends[p.ID] = high
	}
	return ends, nil
}

// CommittedOffsets returns the group's committed offset per partition of
// topic (kafka.OffsetInvalid, i.e. -1001, where it committed nothing) and the
// partitions' end offsets.
func CommittedOffsets(bootstrap, group, topic string) (committed, ends map[int32]int64, err error) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": false, "log_level": 3})
	if err != nil {
		return nil, nil, fmt.Errorf("creating offset reader: %w", err)
	}
	defer c.Close()
	ends, err = EndOffsets(c, topic)
	if err != nil {
		return nil, nil, err
	}
	var tps []kafka.TopicPartition
	for p := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	got, err := c.Committed(tps, 10000)
	if err != nil {
		return nil, nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	committed = map[int32]int64{}
	for _, tp := range got {
		committed[tp.Partition] = int64(tp.Offset)
	}
	return committed, ends, nil
}

// WaitCommittedAtEnd waits until group's committed offsets equal the end
// offsets on every non-empty partition of topic.
func WaitCommittedAtEnd(ctx context.Context, bootstrap, group, topic string) error {
	for {
		committed, ends, err := CommittedOffsets(bootstrap, group, topic)
		if err == nil {
			err = compareOffsets(committed, ends)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func compareOffsets(committed, ends map[int32]int64) error {
	for p, end := range ends {
		if end == 0 {
			continue
		}
		if committed[p] != end {
			return fmt.Errorf("partition %d: committed %d, end %d", p, committed[p], end)
		}
	}
	return nil
}
