package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
)

// TestMarksPrunedAndGroupResetToEarliest: marks go only when their event
// can no longer come back, and a consumer group reset to the earliest
// offset afterwards applies nothing twice. With the relay's outbox
// retention and the consumer's pruning on short intervals, the marks stay
// while the records of their events are in Kafka although the outbox rows
// are already pruned; once the topic's log start passes them (records
// deleted, as retention deletes them) they are pruned. Then more orders
// are applied, the group is reset to the earliest offset and the consumer
// reads everything left again: every order still has exactly one
// shipment.
func TestMarksPrunedAndGroupResetToEarliest(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil, "--outbox-retention", "1s", "--outbox-prune-interval", "1s", "--checkpoint-interval", "1s")
	consumerArgs := []string{"--marks-prune-interval", "1s", "--dlq-stats-interval", "500ms"}
	metrics := testkit.FreeAddr(t)
	consumer := pl.startConsumer(t, "consumer", nil, append([]string{"--metrics-addr", metrics}, consumerArgs...)...)

	const first, second = 20, 10
	create := func(n int, prefix string) {
		for i := range n {
			orderID, eventID := createREST(t, pl.httpAddr, fmt.Sprintf("%s-%d", prefix, i))
			waitProcessed(t, pl, orderID, eventID)
		}
	}
	create(first, "pruned")
	testenv.Eventually(t, time.Minute, "the outbox pruned", func() error {
		var rows int
		if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&rows); err != nil {
			return err
		}
		if rows > 0 {
			return fmt.Errorf("%d outbox rows", rows)
		}
		return nil
	})
	// The outbox rows are gone but every record is still in Kafka: a
	// rewind could deliver them, so the marks stay.
	time.Sleep(3 * time.Second) // three pruning rounds
	if m := marks(t, pl, "fulfillment"); m != first {
		t.Fatalf("%d marks while every record is in Kafka, want all %d kept", m, first)
	}

	waitMetric(t, metrics, "eventforge_consumer_marks_held", 30*time.Second, "the marks held counted",
		func(v float64) bool { return v == first })

	deleteRecordsToEnd(t, pl, pl.env.Topic)
	testenv.Eventually(t, time.Minute, "the marks below the log start pruned", func() error {
		if m := marks(t, pl, "fulfillment"); m != 0 {
			return fmt.Errorf("%d marks left", m)
		}
		return nil
	})
	waitMetric(t, metrics, "eventforge_consumer_marks_held", 30*time.Second, "no marks held after pruning",
		func(v float64) bool { return v == 0 })
	if pruned, _ := scrape(metrics, "eventforge_consumer_marks_pruned_total"); pruned != first {
		t.Errorf("eventforge_consumer_marks_pruned_total = %v, want %d", pruned, first)
	}

	create(second, "kept")
	consumer.stop()
	resetGroupToEarliest(t, pl)
	pl.startConsumer(t, "consumer-reset", nil, consumerArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic); err != nil {
		t.Fatalf("the reset consumer never committed the end: %v", err)
	}
	var orders, shipments, duplicated int
	err := pl.env.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM shipments),
		(SELECT count(*) FROM (SELECT order_id FROM shipments GROUP BY order_id HAVING count(*) > 1) d)`).Scan(&orders, &shipments, &duplicated)
	if err != nil {
		t.Fatal(err)
	}
	if orders != first+second || shipments != orders || duplicated != 0 {
		t.Fatalf("after the reset: %d orders, %d shipments, %d orders shipped twice; want %d, %d, 0", orders, shipments, duplicated, first+second, first+second)
	}
	if m := marks(t, pl, "fulfillment"); m != second {
		t.Errorf("%d marks after the reset, want the %d of the records still in Kafka", m, second)
	}
	mustVerify(t, pl)
	t.Logf("%d marks pruned below the log start, %d kept; group reset to the earliest offset: %d orders, %d shipments, 0 applied twice", first, second, orders, shipments)
}

// resetGroupToEarliest moves the test's group to the low watermark of every
// partition of its topic, as `kafka-consumer-groups --reset-offsets
// --to-earliest` does.
func resetGroupToEarliest(t *testing.T, pl *pipeline) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": pl.env.Endpoints.KafkaBootstrap, "group.id": "eventforge-reset-reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := pl.env.Topic
	var tps []kafka.TopicPartition
	for p := range int32(6) {
		low, _, err := c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil {
			t.Fatal(err)
		}
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(low)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: pl.env.Group, Partitions: tps}})
	if err != nil {
		t.Fatalf("resetting group %s: %v", pl.env.Group, err)
	}
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Error != nil {
				t.Fatalf("resetting group %s on %s[%d]: %v", pl.env.Group, topic, tp.Partition, tp.Error)
			}
		}
	}
}
