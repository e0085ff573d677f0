package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/eventforge/eventforge/internal/kafkaread"
)

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
