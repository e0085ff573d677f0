package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/kafkaconf"
)

// tailReader reads a topic from its beginning as a consumer with
// isolation.level=read_committed does (librdkafka's default and
// EventForge's consumers'), while the relay publishes: a record of a Kafka
// transaction arrives only once its transaction committed, any other once
// it is appended. It joins no group and commits nothing.
type tailReader struct {
	c *kafka.Consumer
	// keyed keeps, per record key, when its first record arrived; without
	// it the reader only counts (a drain's backlog).
	keyed bool

	mu    sync.Mutex
	count int
	first map[string]tailRecord
	err   error

	stop, done chan struct{}
}

// tailRecord is the first record of one key: its broker append time
// (LogAppendTime topics) and when the reader received it.
type tailRecord struct{ appended, read time.Time }

// startTail assigns every partition of topic from its beginning and reads
// until close.
func startTail(bootstrap, topic string, keyed bool) (*tailReader, error) {
	cfg := kafkaconf.Tool(bootstrap, "eventforge-bench-tail")
	cfg["group.id"] = "eventforge-bench-tail" // required by librdkafka; never joined
	cfg["enable.auto.commit"] = false
	cfg["isolation.level"] = "read_committed"
	c, err := kafka.NewConsumer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the tail reader of %s: %w", topic, err)
	}
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reading metadata of %s: %w", topic, err)
	}
	var assign []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
	}
	if len(assign) == 0 {
		c.Close()
		return nil, fmt.Errorf("topic %s has no partitions", topic)
	}
	if err := c.Assign(assign); err != nil {
		c.Close()
		return nil, fmt.Errorf("assigning %s: %w", topic, err)
	}
	t := &tailReader{c: c, keyed: keyed, first: map[string]tailRecord{}, stop: make(chan struct{}), done: make(chan struct{})}
	go t.read()
	return t, nil
}

func (t *tailReader) read() {
	defer close(t.done)
	for {
		select {
		case <-t.stop:
			return
		default:
		}
		switch e := t.c.Poll(100).(type) {
		case *kafka.Message:
			now := time.Now()
			t.mu.Lock()
			t.count++
			if t.keyed {
				if _, seen := t.first[string(e.Key)]; !seen {
					t.first[string(e.Key)] = tailRecord{appended: e.Timestamp, read: now}
				}
			}
			t.mu.Unlock()
		case kafka.Error:
			if e.IsFatal() {
				t.mu.Lock()
				t.err = e
				t.mu.Unlock()
				return
			}
		}
	}
}

// records is the number of records read (keyed: of distinct keys), or the
// reader's fatal error.
func (t *tailReader) records() (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keyed {
		return len(t.first), t.err
	}
	return t.count, t.err
}

// record is the first record of key.
func (t *tailReader) record(key string) (tailRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.first[key]
	return r, ok
}

// close stops reading and releases the consumer.
func (t *tailReader) close() {
	close(t.stop)
	<-t.done
	_ = t.c.Close()
}
