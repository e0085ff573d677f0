package console

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// clientID names the console's Kafka clients.
const clientID = "eventforge-console"

// adminConfig and readerConfig configure the console's Kafka clients
// (besides the kafkaread.Reader and the DLQ replay producer, which build
// theirs the same way): through kafkaconf, so the --kafka-* TLS and SASL
// settings apply. The reader joins no group and commits nothing.
func adminConfig(bootstrap string) kafka.ConfigMap {
	return kafkaconf.Tool(bootstrap, clientID)
}

func readerConfig(bootstrap string) kafka.ConfigMap {
	cfg := kafkaconf.Tool(bootstrap, clientID)
	cfg["group.id"] = clientID
	cfg["enable.auto.commit"] = false
	return cfg
}

// committed returns group's committed offset per partition of topic
// (partitions where it committed nothing are absent).
func (c *Console) committed(ctx context.Context, group, topic string, partitions []int32) (map[int32]int64, error) {
	tps := make([]kafka.TopicPartition, 0, len(partitions))
	for _, p := range partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	res, err := c.admin.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
	if err != nil {
		return nil, fmt.Errorf("reading committed offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Error == nil && tp.Offset >= 0 {
				out[tp.Partition] = int64(tp.Offset)
			}
		}
	}
	return out, nil
}

// member is one consumer group member as the console shows it.
type member struct {
	ClientID   string  `json:"client_id"`
	MemberID   string  `json:"member_id"`
	Host       string  `json:"host"`
	Partitions []int32 `json:"partitions"`
}

// members describes group's members and their partitions of topic.
func (c *Console) members(ctx context.Context, group, topic string) ([]member, error) {
	res, err := c.admin.DescribeConsumerGroups(ctx, []string{group})
	if err != nil {
		return nil, fmt.Errorf("describing group %s: %w", group, err)
	}
	var out []member
	for _, g := range res.ConsumerGroupDescriptions {
		for _, m := range g.Members {
			mm := member{ClientID: m.ClientID, MemberID: m.ConsumerID, Host: m.Host, Partitions: []int32{}}
			for _, tp := range m.Assignment.TopicPartitions {
				if tp.Topic != nil && *tp.Topic == topic {
					mm.Partitions = append(mm.Partitions, tp.Partition)
				}
			}
			out = append(out, mm)
		}
	}
	return out, nil
}

// readSince reads the records of topic produced at or after since, up to the
// partitions' current end offsets, keeping those match accepts. At most
// limit records are read per partition.
func (c *Console) readSince(ctx context.Context, topic string, since time.Time, limit int64, match func(kafkaread.Record) bool) ([]kafkaread.Record, error) {
	ends, err := c.kafka.EndOffsets(topic)
	if err != nil {
		return nil, err
	}
	cfg := readerConfig(c.cfg.KafkaBrokers)
	cons, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating kafka reader: %w", err)
	}
	defer cons.Close()
	query := make([]kafka.TopicPartition, 0, len(ends))
	for p, end := range ends {
		if end > 0 {
			query = append(query, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(since.UnixMilli())})
		}
	}
	if len(query) == 0 {
		return nil, nil
	}
	starts, err := cons.OffsetsForTimes(query, 10000)
	if err != nil {
		return nil, fmt.Errorf("finding offsets of %s at %s: %w", topic, since.Format(time.RFC3339), err)
	}
	var assign []kafka.TopicPartition
	remaining := map[int32]int64{}
	for _, tp := range starts {
		end := ends[tp.Partition]
		start := int64(tp.Offset)
		if start < 0 || start >= end { // no record at or after since
			continue
		}
		start = max(start, end-limit)
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: tp.Partition, Offset: kafka.Offset(start)})
		remaining[tp.Partition] = end
	}
	if len(assign) == 0 {
		return nil, nil
	}
	if err := cons.Assign(assign); err != nil {
		return nil, fmt.Errorf("assigning %s: %w", topic, err)
	}
	var out []kafkaread.Record
	for len(remaining) > 0 {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		switch e := cons.Poll(100).(type) {
		case *kafka.Message:
			rec := toRecord(e)
			end, ok := remaining[rec.Partition]
			if !ok {
				continue
			}
			if rec.Offset < end && match(rec) {
				out = append(out, rec)
			}
			if rec.Offset+1 >= end {
				delete(remaining, rec.Partition)
			}
		case kafka.Error:
			if e.IsFatal() {
				return out, fmt.Errorf("reading %s: %w", topic, e)
			}
		}
	}
	return out, nil
}

func toRecord(m *kafka.Message) kafkaread.Record {
	rec := kafkaread.Record{Partition: m.TopicPartition.Partition, Offset: int64(m.TopicPartition.Offset), Key: string(m.Key),
		Value: m.Value, Headers: make(map[string]string, len(m.Headers)), Timestamp: m.Timestamp}
	for _, h := range m.Headers {
		rec.Headers[h.Key] = string(h.Value)
	}
	return rec
}
