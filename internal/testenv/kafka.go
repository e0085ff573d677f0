package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaread"
)

// DeleteTopics deletes topics on the Kafka at bootstrap, waiting up to 30 s
// for the request to be answered.
func DeleteTopics(bootstrap string, topics ...string) error {
	return withAdmin(bootstrap, func(ctx context.Context, a *kafka.AdminClient) error {
		if _, err := a.DeleteTopics(ctx, topics); err != nil {
			return fmt.Errorf("deleting topics %v: %w", topics, err)
		}
		return nil
	})
}

// withAdmin runs f with an admin client of the Kafka at bootstrap and a
// context that ends after 30 s.
func withAdmin(bootstrap string, f func(ctx context.Context, a *kafka.AdminClient) error) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f(ctx, a)
}

// Record is a Kafka record as the tests inspect it.
type Record = kafkaread.Record

// ReadTopic reads every record of topic from the beginning to the current
// end of each partition, with a consumer that joins no group and commits
// nothing.
func ReadTopic(bootstrap, topic string) ([]Record, error) {
	r, err := kafkaread.New(bootstrap)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return r.ReadAll(ctx, topic)
}

// CommittedOffsets returns the group's committed offset per partition of
// topic (absent where it committed nothing) and the partitions' end offsets.
func CommittedOffsets(bootstrap, group, topic string) (committed, ends map[int32]int64, err error) {
	r, err := kafkaread.New(bootstrap)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	if ends, err = r.EndOffsets(topic); err != nil {
		return nil, nil, err
	}
	committed, err = r.Committed(group, topic)
	return committed, ends, err
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
