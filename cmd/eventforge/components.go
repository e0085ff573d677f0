package main

import (
	"log/slog"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/schema"
)

type apiCmd struct {
	api.Config `embed:""`
	Console    console.Config `embed:"" group:"Console (/ui/ and /api/ops/, off unless --console)"`
	kafkaFlags
	tracingFlags
}

// Validate refuses a console exposed without a token while kong parses the
// command line (a usage error).
func (c *apiCmd) Validate() error { return c.Console.CheckExposure(c.HTTPAddr) }

func (c *apiCmd) Run(env *runEnv) error {
	setGCPercent(apiGCPercent, env.logger)
	// An empty key inlines the group: each flag is a key of the line.
	env.logger.Info("starting api", slog.Any("", c.Config), slog.Any("", c.Console), "kafka_security", c.kafkaSecurity())
	if !c.Console.Enabled {
		if c.Console.OpsToken != "" || c.Console.EnableDrills {
			env.logger.Warn("the console is off: --ops-token and --enable-drills take effect with --console")
		}
		return api.Run(env.ctx, c.Config, env.logger)
	}
	return runAPIWithConsole(env, c.Config, c.Console, nil, nil)
}

type cdcCmd struct {
	cdc.Config  `embed:""`
	MetricsAddr string `name:"metrics-addr" help:"Serve Prometheus /metrics on this address (empty: off)."`
	kafkaFlags
	tracingFlags
}

func (c *cdcCmd) Run(env *runEnv) error {
	env.logger.Info("starting cdc", slog.Any("", c.Config), "metrics_addr", c.MetricsAddr, "kafka_security", c.kafkaSecurity())
	return runCDC(env, c.Config, c.MetricsAddr)
}

type consumerCmd struct {
	consumer.Config `embed:""`
	kafkaFlags
	tracingFlags
}

func (c *consumerCmd) Run(env *runEnv) error {
	env.logger.Info("starting consumer", slog.Any("", c.Config), "kafka_security", c.kafkaSecurity())
	return consumer.Run(env.ctx, c.Config, env.logger)
}

type migrateCmd struct {
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL (role with REPLICATION to create the slot)." default:"${database_url}"`
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
	conn, err := connectPG(env, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(env.ctx)
	created, err := schema.EnsureSlot(env.ctx, conn, slot)
	if err != nil {
		return err
	}
	env.logger.Info("replication slot ready", "slot", slot, "created", created)
	return nil
}
