package main

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/internal/logging"
	"github.com/eventforge/eventforge/schema"
)

type apiCmd struct {
	api.Config `embed:""`
	Console    console.Config `embed:"" group:"Console (/ui/ and /api/ops/, off unless --console)"`
}

func (c *apiCmd) Run(env *runEnv) error {
	if err := c.Console.CheckExposure(c.HTTPAddr); err != nil {
		return err
	}
	env.logger.Info("starting api", "database_url", logging.MaskURL(c.DatabaseURL), "grpc_addr", c.GRPCAddr,
		"http_addr", c.HTTPAddr, "max_conns", c.MaxConns, "shutdown_timeout", c.ShutdownTimeout, "console", c.Console.Enabled)
	if !c.Console.Enabled {
		if c.Console.OpsToken != "" || c.Console.EnableDrills {
			env.logger.Warn("the console is off: --ops-token and --enable-drills take effect with --console")
		}
		return api.RunNotify(env.ctx, c.Config, env.logger, nil)
	}
	return runAPIWithConsole(env, c.Config, c.Console, nil, nil)
}

type cdcCmd struct {
	cdc.Config  `embed:""`
	MetricsAddr string `name:"metrics-addr" help:"Serve Prometheus /metrics on this address (empty: off)."`
}

func (c *cdcCmd) Run(env *runEnv) error {
	env.logger.Info("starting cdc", "database_url", logging.MaskURL(c.DatabaseURL), "kafka_brokers", c.KafkaBrokers,
		"slot", c.Slot, "publication", c.Publication, "outbox_table", c.OutboxTable, "topics", c.Topics,
		"topic_fallback", c.TopicFallback, "status_interval", c.StatusInterval, "no_create_slot", c.NoCreateSlot,
		"heartbeat_interval", c.HeartbeatInterval, "max_inflight_events", c.MaxInflightEvents,
		"max_inflight_bytes", c.MaxInflightBytes, "standby_retry", c.StandbyRetry,
		"outbox_retention", c.OutboxRetention, "metrics_addr", c.MetricsAddr)
	return runCDC(env, c.Config, c.MetricsAddr)
}

type consumerCmd struct {
	consumer.Config `embed:""`
}

func (c *consumerCmd) Run(env *runEnv) error {
	env.logger.Info("starting consumer", "database_url", logging.MaskURL(c.DatabaseURL), "kafka_brokers", c.KafkaBrokers,
		"consumer", c.Name, "group", c.GroupID(), "topics", c.Topics, "workers", c.Workers, "batch_size", c.BatchSize,
		"queue_size", c.QueueSize, "max_attempts", c.MaxAttempts, "initial_backoff", c.InitialBackoff, "max_backoff", c.MaxBackoff,
		"attempt_timeout", c.AttemptTimeout, "session_timeout", c.SessionTimeout, "commit_interval", c.CommitInterval, "max_conns", c.MaxConns,
		"dlq_suffix", c.DLQSuffix, "metrics_addr", c.MetricsAddr)
	return consumer.Run(env.ctx, c.Config, env.logger)
}

type migrateCmd struct {
	DatabaseURL string `name:"database-url" help:"PostgreSQL connection URL (role with REPLICATION to create the slot)." default:"${database_url}"`
	Slot        string `name:"slot" help:"Logical replication slot to create if missing." default:"${slot}"`
	NoSlot      bool   `name:"no-slot" help:"Do not create the replication slot."`
}

func (c *migrateCmd) Run(env *runEnv) error {
	return migrate(env, c.DatabaseURL, c.Slot, c.NoSlot)
}

// migrate applies the migrations and creates the slot, so that every outbox
// row written afterwards is decoded from it even if cdc has never run.
func migrate(env *runEnv, dsn, slot string, noSlot bool) error {
	if err := schema.Migrate(env.ctx, dsn, env.logger); err != nil {
		return err
	}
	if noSlot {
		return nil
	}
	conn, err := pgx.Connect(env.ctx, dsn)
	if err != nil {
		return fmt.Errorf("connecting to postgres: %w", err)
	}
	defer conn.Close(env.ctx)
	created, err := schema.EnsureSlot(env.ctx, conn, slot)
	if err != nil {
		return err
	}
	env.logger.Info("replication slot ready", "slot", slot, "created", created)
	return nil
}
