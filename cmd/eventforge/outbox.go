package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/replay"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
)

type outboxCmd struct {
	Replay      outboxReplayCmd      `cmd:"" help:"Republish stored outbox events with their original IDs (for topics that lost data)."`
	DeadLetters outboxDeadLettersCmd `cmd:"" name:"dead-letters" help:"Events Kafka refused permanently (the relay's dead-letter table): list and replay."`
}

type outboxDeadLettersCmd struct {
	List   deadLettersListCmd   `cmd:"" help:"List the relay's dead letters in WAL order."`
	Replay deadLettersReplayCmd `cmd:"" help:"Republish dead letters with their original event IDs once the cause is fixed, and mark them replayed."`
}

type deadLettersListCmd struct {
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	Table       string `name:"dead-letter-table" help:"Schema-qualified dead-letter table." default:"public.cdc_dead_letters"`
	All         bool   `name:"all" help:"Include dead letters already replayed."`
	JSON        bool   `name:"json" help:"Print JSON."`
}

func (c *deadLettersListCmd) Run(env *runEnv) error {
	conn, err := connectPG(env, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(env.ctx))
	dls, err := deadletter.List(env.ctx, conn, c.Table, !c.All)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(dls)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT ID\tORDER\tTYPE\tTOPIC\tLSN\tBYTES\tERROR\tATTEMPTS\tDEAD-LETTERED\tREPLAYED")
	for _, d := range dls {
		replayed := "-"
		if d.ReplayedAt != nil {
			replayed = d.ReplayedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", d.EventID, d.AggregateID, d.Type, d.Topic, d.LSN,
			d.PayloadBytes, d.ErrorCode, d.Attempts, d.DeadLetteredAt.UTC().Format(time.RFC3339), replayed)
	}
	return w.Flush()
}

type deadLettersReplayCmd struct {
	DatabaseURL  string        `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	KafkaBrokers string        `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	Table        string        `name:"dead-letter-table" help:"Schema-qualified dead-letter table." default:"public.cdc_dead_letters"`
	EventID      []string      `name:"event-id" help:"Event ID to replay (repeatable); default: every dead letter not replayed yet."`
	FlushTimeout time.Duration `name:"flush-timeout" help:"How long to wait for Kafka's acknowledgements." default:"30s"`
	kafkaFlags
	tracingFlags
}

func (c *deadLettersReplayCmd) Run(env *runEnv) error {
	res, err := deadletter.Replay(env.ctx, deadletter.ReplayConfig{
		DatabaseURL:  c.DatabaseURL,
		Driver:       kafkasink.Driver{Bootstrap: c.KafkaBrokers, Logger: env.logger},
		Table:        c.Table,
		EventIDs:     c.EventID,
		FlushTimeout: c.FlushTimeout,
	})
	return replayEnded(env, "dead letters", "the dead-letter table", "", int64(res.Published), int64(res.Selected), res.Missing, err)
}

type outboxReplayCmd struct {
	DatabaseURL   string            `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	KafkaBrokers  string            `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	OutboxTable   string            `name:"outbox-table" help:"Schema-qualified outbox table." default:"public.outbox"`
	Topics        map[string]string `name:"topic" help:"aggregatetype=topic routes (repeatable), as for cdc." default:"${aggregate_order}=${topic}"`
	TopicFallback string            `name:"topic-fallback" help:"Topic for unrouted aggregate types ({aggregatetype} is replaced)." default:"eventforge.{aggregatetype}"`
	EventID       []string          `name:"event-id" help:"Event ID to republish (repeatable)." xor:"selection"`
	Since         time.Time         `name:"since" help:"Republish events created at or after this time (RFC 3339)." xor:"selection"`
	Until         time.Time         `name:"until" help:"Republish events created before this time (RFC 3339); with --since."`
	NoProgress    bool              `name:"no-progress" help:"Do not draw a progress bar."`
	kafkaFlags
	tracingFlags
}

// config is the replay the flags describe, publishing through a Kafka
// sink that logs to logger.
func (c *outboxReplayCmd) config(logger *slog.Logger) replay.Config {
	return replay.Config{
		DatabaseURL:   c.DatabaseURL,
		Driver:        kafkasink.Driver{Bootstrap: c.KafkaBrokers, Logger: logger},
		OutboxTable:   c.OutboxTable,
		Topics:        c.Topics,
		TopicFallback: c.TopicFallback,
		EventIDs:      c.EventID,
		Since:         c.Since,
		Until:         c.Until,
	}
}

// Validate refuses a replay without a selection, or with an empty time
// range, while kong parses the command line (usage errors).
func (c *outboxReplayCmd) Validate() error { return c.config(nil).Validate() }

func (c *outboxReplayCmd) Run(env *runEnv) error {
	cfg := c.config(env.logger)
	var bar *progressbar.ProgressBar
	progress := func(acked, total int64) {
		if c.NoProgress {
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription("replaying"),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("events"),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
			)
		}
		_ = bar.Set64(acked)
	}
	res, err := replay.Run(env.ctx, cfg, progress)
	if bar != nil {
		_ = bar.Finish()
	}
	return replayEnded(env, "events", "the outbox", " (pruned by retention, or never written)", res.Published, res.Selected, res.Missing, err)
}

// replayEnded reports a replay that ended with err: a warning for each
// selected event ID not found in where (why says what that means, if
// anything), then err, or the count of the republished records (what) and
// an error when IDs were missing.
func replayEnded(env *runEnv, what, where, why string, published, selected int64, missing []string, err error) error {
	for _, id := range missing {
		env.logger.Warn("event not in "+where+why, "event_id", id)
	}
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d of %d selected %s\n", published, selected, what)
	if len(missing) > 0 {
		return fmt.Errorf("%d event IDs not found in %s", len(missing), where)
	}
	return nil
}
