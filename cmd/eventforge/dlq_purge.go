package main

import (
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// purge deletes what plans name from topic: it first writes a dlq_purged
// row for every record (dlq.RecordPlanned, streaming), so that `eventforge
// verify` reports their events as purged, not lost, and deletes nothing
// unless every planned record was recorded.
func purge(env *runEnv, r *kafka.Consumer, topic, databaseURL string, plans []dlq.PurgePlan) error {
	conn, err := pgx.Connect(env.ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connecting to postgres to record the purge: %w", err)
	}
	defer conn.Close(env.ctx)
	n, err := dlq.RecordPlanned(env.ctx, r, conn, topic, plans)
	if err != nil {
		return fmt.Errorf("recording the records to purge (nothing deleted, try again): %w", err)
	}
	env.logger.Info("dlq purge recorded", "dlq_topic", topic, "records", n)
	// Derived from the reader, so it shares its configuration (kafkaconf's
	// --kafka-* TLS and SASL settings among them).
	a, err := kafka.NewAdminClientFromConsumer(r)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer a.Close()
	if err := dlq.Purge(env.ctx, a, topic, plans); err != nil {
		return err
	}
	fmt.Printf("purged %d records from %s\n", n, topic)
	env.logger.Info("dlq purged", "dlq_topic", topic, "records", n)
	return nil
}
