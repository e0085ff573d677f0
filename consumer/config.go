// Package consumer runs EventForge's idempotent consumers: a Kafka consumer
// group per consumer name whose events are applied with a durable
// (consumer, event_id) mark in the same PostgreSQL transaction as the
// business change, and whose offsets are committed only after that
// transaction. See package runtime for the contract and docs/consumer.md.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/consumer/fulfillment"
	"github.com/eventforge/eventforge/consumer/runtime"
)

// Config configures one consumer.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" help:"PostgreSQL connection URL." default:"postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable"`
	// KafkaBrokers is the Kafka bootstrap server list.
	KafkaBrokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"127.0.0.1:19092"`
	// Name selects the handler and names the marks; one of: fulfillment.
	Name string `name:"name" help:"Consumer (handler) name: fulfillment." default:"fulfillment" enum:"fulfillment"`
	// Group is the Kafka consumer group; empty means eventforge-<name>.
	Group string `name:"group" help:"Kafka consumer group (default eventforge-<name>)."`
	// Topics are the topics consumed.
	Topics []string `name:"topics" help:"Topics to consume." default:"eventforge.orders"`
	// MaxBackoff caps the wait between attempts at one event.
	MaxBackoff time.Duration `name:"max-backoff" help:"Longest wait between attempts at one event." default:"5s"`
	// CommitInterval is how often stored offsets are committed (also on
	// revoke and shutdown).
	CommitInterval time.Duration `name:"commit-interval" help:"How often stored offsets are committed." default:"1s"`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size." default:"4"`
}

// DefaultConfig returns the configuration the flags default to.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:    "postgres://eventforge:eventforge@127.0.0.1:54329/eventforge?sslmode=disable",
		KafkaBrokers:   "127.0.0.1:19092",
		Name:           fulfillment.Name,
		Topics:         []string{"eventforge.orders"},
		MaxBackoff:     5 * time.Second,
		CommitInterval: time.Second,
		MaxConns:       4,
	}
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" || c.KafkaBrokers == "" {
		errs = append(errs, errors.New("database-url and kafka-brokers are required"))
	}
	if _, err := handlerFor(c.Name); err != nil {
		errs = append(errs, err)
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("at least one topic is required"))
	}
	if c.MaxBackoff <= 0 || c.CommitInterval <= 0 || c.MaxConns <= 0 {
		errs = append(errs, errors.New("max-backoff, commit-interval and max-conns must be positive"))
	}
	return errors.Join(errs...)
}

// GroupID returns the Kafka consumer group of the consumer.
func (c Config) GroupID() string {
	if c.Group != "" {
		return c.Group
	}
	return "eventforge-" + c.Name
}

func handlerFor(name string) (runtime.Handler, error) {
	switch name {
	case fulfillment.Name:
		return fulfillment.Handler{}, nil
	}
	return nil, fmt.Errorf("unknown consumer %q (known: %s)", name, fulfillment.Name)
}

// Run consumes until ctx is cancelled, then commits stored offsets and
// leaves the group.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid consumer config: %w", err)
	}
	handler, _ := handlerFor(cfg.Name)
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

	rt := runtime.New(runtime.Options{
		Name:         cfg.Name,
		Group:        cfg.GroupID(),
		Topics:       cfg.Topics,
		Bootstrap:    cfg.KafkaBrokers,
		MaxBackoff:   cfg.MaxBackoff,
		CommitPeriod: cfg.CommitInterval,
	}, pool, handler, logger)
	return rt.Run(ctx)
}
