// Package consumer runs EventForge's idempotent consumers: a Kafka consumer
// group per consumer name whose events are applied with a durable
// (consumer, event_id) mark in the same PostgreSQL transaction as the
// business change, whose offsets are committed only after that transaction,
// and whose failures end in a dead-letter topic. See package engine for the
// contract and docs/consumer.md.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
	"github.com/eventforge/eventforge/internal/metrics"
)

// Config configures one consumer.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	// KafkaBrokers is the Kafka bootstrap server list.
	KafkaBrokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	// Name selects the handler and names the marks; one of registry.Names().
	Name string `name:"name" help:"Consumer (handler) name: ${consumer_names_in_words}." default:"${consumer_default}" enum:"${consumer_names}"`
	// Group is the Kafka consumer group; empty means eventforge-<name>.
	Group string `name:"group" help:"Kafka consumer group (default eventforge-<name>)."`
	// Topics are the topics consumed.
	Topics []string `name:"topics" help:"Topics to consume." default:"${topic}"`
	// Settings are the runtime's (engine.Settings): parallelism, batching,
	// queues, retries, timeouts and the DLQ, each a flag of its own.
	engine.Settings `embed:""`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size (at least --workers)." default:"5"`
	// MetricsAddr serves /metrics when not empty.
	MetricsAddr string `name:"metrics-addr" help:"Serve Prometheus /metrics on this address (empty: off)."`
}

// DefaultConfig returns the configuration the flags default to (their
// tags, read by config.Defaults with the registry's variables): the
// engine's DefaultSettings (config_test.go holds them equal), the
// contract's database, brokers and topic, and the registry's default
// consumer.
func DefaultConfig() Config {
	return config.Defaults[Config](registry.FlagVars())
}

// LogValue is the configuration as the startup line shows it: every flag,
// secrets masked (logging.ConfigValue), with the consumer's name under the
// key every consumer log line uses and the effective group.
func (c Config) LogValue() slog.Value {
	attrs := logging.ConfigValue(c).Group()
	for i, a := range attrs {
		switch a.Key {
		case "name":
			attrs[i] = slog.String("consumer", c.Name)
		case "group":
			attrs[i] = slog.String("group", c.GroupID())
		}
	}
	return slog.GroupValue(attrs...)
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" || c.KafkaBrokers == "" {
		errs = append(errs, errors.New("database-url and kafka-brokers are required"))
	}
	if _, err := registry.Handler(c.Name); err != nil {
		errs = append(errs, err)
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("at least one topic is required"))
	}
	if c.Workers < 1 || c.BatchSize < 1 || c.QueueSize < 1 || c.QueueBytes < 1 || c.MaxAttempts < 1 {
		errs = append(errs, errors.New("workers, batch-size, queue-size, queue-bytes and max-attempts must be at least 1"))
	}
	if c.BatchWait < 0 || c.BatchWait > 5*time.Second {
		errs = append(errs, errors.New("batch-wait must be between 0 and 5s"))
	}
	if c.FetchWait < 0 || (c.FetchWait > 0 && c.FetchWait < time.Millisecond) || c.FetchWait > 5*time.Second {
		errs = append(errs, errors.New("fetch-wait must be 0 or between 1ms and 5s"))
	}
	if c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff {
		errs = append(errs, errors.New("initial-backoff must be positive and at most max-backoff"))
	}
	if c.AttemptTimeout <= 0 || c.ProbeTimeout <= 0 || c.CommitInterval <= 0 || c.DLQStatsInterval <= 0 || c.SessionTimeout <= 0 {
		errs = append(errs, errors.New("attempt-timeout, probe-timeout, session-timeout, commit-interval and dlq-stats-interval must be positive"))
	}
	if c.AttemptTimeout > engine.MaxAttemptTimeout {
		errs = append(errs, fmt.Errorf("attempt-timeout %s must be at most %s: a revoked partition's transaction is waited for within the group's poll interval", c.AttemptTimeout, engine.MaxAttemptTimeout))
	}
	if c.MaxConns < int32(max(c.Workers, 1)) {
		errs = append(errs, fmt.Errorf("max-conns %d must be at least workers %d", c.MaxConns, c.Workers))
	}
	if c.DLQSuffix == "" {
		errs = append(errs, errors.New("dlq-suffix must not be empty"))
	}
	return errors.Join(errs...)
}

// GroupID returns the Kafka consumer group of the consumer.
func (c Config) GroupID() string {
	if c.Group != "" {
		return c.Group
	}
	return registry.DefaultGroup(c.Name)
}

// Run consumes until ctx is cancelled, then commits stored offsets and
// leaves the group. It returns an error, for the supervisor to restart the
// process, when the Kafka consumer or the DLQ producer fails fatally.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid consumer config: %w", err)
	}
	handler, _ := registry.Handler(cfg.Name)
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("parsing database-url: %w", err)
	}
	poolCfg.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("creating postgres pool: %w", err)
	}
	defer pool.Close()

	rt := engine.New(engine.Options{
		Name:         cfg.Name,
		Group:        cfg.GroupID(),
		Topics:       cfg.Topics,
		Bootstrap:    cfg.KafkaBrokers,
		Settings:     cfg.Settings,
		OnAssignment: memoryLimiter(cfg.QueueBytes, logger),
	}, engine.PoolDB{Pool: pool}, handler, logger)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return metrics.Serve(gctx, cfg.MetricsAddr, logger, nil) })
	g.Go(func() error { return rt.Run(gctx) })
	return g.Wait()
}
