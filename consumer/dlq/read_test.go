package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestScanEndsWhenRecordsVanish: the records counted by the watermarks are
// deleted (a purge) before the scan fetches them. librdkafka resets the
// fetch position to the end and delivers no record; the scan must end at
// the partition's EOF instead of waiting out its 60 s deadline, during
// which the consumer's DLQ gauges would stay stale.
func TestScanEndsWhenRecordsVanish(t *testing.T) {
	env := testenv.New(t)
	topic := env.Topic
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": env.Endpoints.KafkaBootstrap, "acks": "all", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	delivered := make(chan kafka.Event, 2)
	for range 2 {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("x")}, delivered); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if m := (<-delivered).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}

	c, err := NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wm, err := watermarks(c, topic)
	if err != nil {
		t.Fatal(err)
	}
	if wm[0] != [2]int64{0, 2} {
		t.Fatalf("watermarks of partition 0: %v, want [0 2]", wm[0])
	}

	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 2}}); err != nil {
		t.Fatal(err)
	}

	read := 0
	err = scan(ctx, c, []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}, wm, func(*kafka.Message) bool {
		read++
		return true
	})
	if err != nil {
		t.Fatalf("scan after the records were deleted: %v", err)
	}
	if read != 0 {
		t.Fatalf("scan read %d deleted records", read)
	}
}
