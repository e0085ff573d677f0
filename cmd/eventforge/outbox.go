package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/eventforge/eventforge/cdc"
)

type outboxCmd struct {
	Replay outboxReplayCmd `cmd:"" help:"Republish stored outbox events with their original IDs (for topics that lost data)."`
}

type outboxReplayCmd struct {
	DatabaseURL   string            `name:"database-url" help:"PostgreSQL connection URL." default:"postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable"`
	KafkaBrokers  string            `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"127.0.0.1:19092"`
	OutboxTable   string            `name:"outbox-table" help:"Schema-qualified outbox table." default:"public.outbox"`
	Topics        map[string]string `name:"topic" help:"aggregatetype=topic routes (repeatable), as for cdc." default:"order=eventforge.orders"`
	TopicFallback string            `name:"topic-fallback" help:"Topic for unrouted aggregate types ({aggregatetype} is replaced)." default:"eventforge.{aggregatetype}"`
	EventID       []string          `name:"event-id" help:"Event ID to republish (repeatable)." xor:"selection"`
	Since         time.Time         `name:"since" help:"Republish events created at or after this time (RFC 3339)." xor:"selection"`
	Until         time.Time         `name:"until" help:"Republish events created before this time (RFC 3339); with --since."`
	NoProgress    bool              `name:"no-progress" help:"Do not draw a progress bar."`
}

func (c *outboxReplayCmd) Run(env *runEnv) error {
	cfg := cdc.ReplayConfig{
		DatabaseURL:   c.DatabaseURL,
		KafkaBrokers:  c.KafkaBrokers,
		OutboxTable:   c.OutboxTable,
		Topics:        c.Topics,
		TopicFallback: c.TopicFallback,
		EventIDs:      c.EventID,
		Since:         c.Since,
		Until:         c.Until,
	}
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
	res, err := cdc.Replay(env.ctx, cfg, env.logger, progress)
	if bar != nil {
		_ = bar.Finish()
	}
	for _, id := range res.Missing {
		env.logger.Warn("event not in the outbox (pruned by retention, or never written)", "event_id", id)
	}
	if err != nil {
		return err
	}
	fmt.Printf("replayed %d of %d selected events\n", res.Published, res.Selected)
	if len(res.Missing) > 0 {
		return fmt.Errorf("%d event IDs not found in the outbox", len(res.Missing))
	}
	return nil
}
