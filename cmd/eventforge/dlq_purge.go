package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/consumer/dlq"
)

type dlqPurgeCmd struct {
	dlqTopicFlags
	DatabaseURL string        `name:"database-url" log:"url" help:"PostgreSQL connection URL: each purged record is recorded in dlq_purged before it is deleted." default:"${database_url}"`
	Through     []string      `name:"through" help:"Delete partition P's records up to and including offset O, given as P:O (repeatable; dlq replay prints them for what it replayed)."`
	OlderThan   time.Duration `name:"older-than" help:"Delete only records older than this (per partition, up to its first newer record)."`
	All         bool          `name:"all" help:"Delete every record held now."`
	Yes         bool          `name:"yes" help:"Really delete (without it, only print what would be deleted)."`
}

// Validate refuses a purge that does not name exactly one selection, and a
// --through that does not parse: kong calls it while it parses the command
// line, so these are usage errors.
func (c *dlqPurgeCmd) Validate() error {
	named := 0
	for _, b := range []bool{len(c.Through) > 0, c.OlderThan > 0, c.All} {
		if b {
			named++
		}
	}
	if named != 1 {
		return errors.New("say what to purge, one of: --through P:O (what dlq replay printed), --older-than, --all")
	}
	for _, arg := range c.Through {
		if _, _, _, ok := dlq.ParsePosition(arg); !ok {
			return fmt.Errorf("--through %q: want <partition>:<offset>", arg)
		}
	}
	return nil
}

// Run deletes what the selection names; without --yes it only prints
// that (a dry run, exit status 0).
func (c *dlqPurgeCmd) Run(env *runEnv) error {
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	var plans []dlq.PurgePlan
	if len(c.Through) > 0 {
		through := map[int32]int64{}
		for _, arg := range c.Through {
			_, p, o, _ := dlq.ParsePosition(arg) // Validate parsed it
			through[p] = o
		}
		plans, err = dlq.PlanThrough(r, c.Topic, through)
	} else {
		plans, err = dlq.PlanPurge(r, c.Topic, c.OlderThan, time.Now())
	}
	if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
		return err
	}
	var total int64
	for _, pl := range plans {
		total += pl.To - pl.Low
		fmt.Printf("partition %d: offsets %d..%d (%d records)\n", pl.Partition, pl.Low, pl.To-1, pl.To-pl.Low)
	}
	if total == 0 {
		fmt.Printf("%s: nothing to purge\n", c.Topic)
		return nil
	}
	if !c.Yes {
		fmt.Printf("would delete %d records from %s: re-run with --yes to delete them\n", total, c.Topic)
		return nil
	}
	return purge(env, r, c.Topic, c.DatabaseURL, plans)
}

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
