package localstack

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/testkit"
)

// TestKafkaCluster starts a real three-node cluster, creates a topic with
// replication factor 3 and min.insync.replicas 2, kills one node and checks
// that acks=all produces still succeed, then restarts it.
func TestKafkaCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := testkit.StackDir(t, "eventforge-cluster-test-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := StartKafkaCluster(ctx, ClusterConfig{StateDir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })

	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": c.Bootstrap})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: "replicated", NumPartitions: 3, ReplicationFactor: 3,
		Config: map[string]string{"min.insync.replicas": "2"}}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("creating replicated topic: %v %v", err, res)
	}

	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": c.Bootstrap, "acks": "all", "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(n int) {
		t.Helper()
		topic := "replicated"
		done := make(chan kafka.Event, n)
		for i := range n {
			if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte{byte(i)}}, done); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			m := (<-done).(*kafka.Message)
			if m.TopicPartition.Error != nil {
				t.Fatalf("delivery: %v", m.TopicPartition.Error)
			}
		}
	}
	produce(50)
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	produce(50) // two of three replicas remain: min.insync.replicas=2 holds
	if err := c.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	produce(50)

	md, err := a.GetMetadata(nil, false, 5000)
	if err != nil || len(md.Brokers) != 3 {
		t.Fatalf("after restart: %d brokers (%v), want 3", len(md.Brokers), err)
	}
}
