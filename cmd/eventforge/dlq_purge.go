package main

import (
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// recordPurge writes a dlq_purged row for every record plans delete, before
// anything is deleted, so that `eventforge verify` reports their events as
// purged, not lost. It refuses to go on when it could not read every
// planned record.
func (c *dlqPurgeCmd) recordPurge(env *runEnv, r *kafka.Consumer, plans []dlq.PurgePlan, total int64) error {
	all, err := dlq.Read(env.ctx, r, c.Topic)
	if err != nil {
		return fmt.Errorf("reading the records to purge: %w", err)
	}
	es := dlq.Planned(all, plans)
	if int64(len(es)) != total {
		return fmt.Errorf("read %d of the %d records to purge from %s: nothing deleted, try again", len(es), total, c.Topic)
	}
	conn, err := pgx.Connect(env.ctx, c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to postgres to record the purge: %w", err)
	}
	defer conn.Close(env.ctx)
	if err := dlq.RecordPurge(env.ctx, conn, es); err != nil {
		return err
	}
	env.logger.Info("dlq purge recorded", "dlq_topic", c.Topic, "records", len(es))
	return nil
}
