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
	// Workers bounds how many partitions are applied at the same time.
	Workers int `name:"workers" help:"Partitions applied concurrently (each in order)." default:"4"`
	// BatchSize is the most records of one partition applied in one
	// transaction; 1 turns batching off.
	BatchSize int `name:"batch-size" help:"Most records of one partition per transaction (1 = no batching)." default:"100"`
	// BatchWait is how long after its queue became non-empty a partition
	// waits for a fuller batch; 0 applies what is queued at once.
	BatchWait time.Duration `name:"batch-wait" help:"How long after its queue became non-empty a partition waits for more records before fewer than --batch-size are applied (0 = apply what is queued at once)." default:"0s"`
	// QueueSize is how many records are buffered per partition before its
	// fetching pauses.
	QueueSize int `name:"queue-size" help:"Records buffered per partition before its fetching pauses." default:"5000"`
	// QueueBytes is how many bytes of records (key, value, headers and an
	// estimate of the Go structures holding them) are buffered per
	// partition before its fetching pauses, whichever of QueueSize and
	// QueueBytes is reached first.
	QueueBytes int `name:"queue-bytes" help:"Bytes of records buffered per partition before its fetching pauses (whichever of --queue-size and --queue-bytes is reached first)." default:"4194304"`
	// FetchWait is the longest the broker holds a fetch to gather more
	// records; 0 answers as soon as any record is there.
	FetchWait time.Duration `name:"fetch-wait" help:"Longest the broker holds a fetch to gather more records, so that one fetch and one transaction per partition carry several (0 = answer as soon as any record is there)." default:"10ms"`
	// MaxAttempts is how often a retryable failure is tried before the
	// record is dead-lettered.
	MaxAttempts int `name:"max-attempts" help:"Attempts at a failing record before it is dead-lettered." default:"5"`
	// NotFoundGrace is the least time an event whose order does not exist
	// (yet) is retried before it is dead-lettered, whatever MaxAttempts says:
	// logical decoding may deliver a transaction a moment before it is
	// visible to other sessions on the primary.
	NotFoundGrace time.Duration `name:"not-found-grace" help:"Least time an event whose order cannot be found is retried before it is dead-lettered." default:"10s"`
	// InitialBackoff is the first wait between attempts.
	InitialBackoff time.Duration `name:"initial-backoff" help:"First wait between attempts at one record (doubles each attempt, with jitter)." default:"100ms"`
	// MaxBackoff caps the wait between attempts at one record.
	MaxBackoff time.Duration `name:"max-backoff" help:"Longest wait between attempts at one record." default:"5s"`
	// AttemptTimeout bounds one apply transaction.
	AttemptTimeout time.Duration `name:"attempt-timeout" help:"Longest one apply transaction may take (at most 4m: a revoked partition's transaction is waited for within the group's 5m poll interval)." default:"30s"`
	// ProbeTimeout bounds the probe (a transaction on a new connection
	// that writes what an apply writes and commits) that tells a database
	// that refuses or does not answer every apply from an event that
	// failed by itself; see docs/consumer.md.
	ProbeTimeout time.Duration `name:"probe-timeout" help:"Longest the database probe after a failed attempt may take; a probe that fails means the database is unavailable." default:"5s"`
	// SessionTimeout is how long the group waits for a member that stopped
	// heart-beating (e.g. was killed) before giving its partitions to others.
	SessionTimeout time.Duration `name:"session-timeout" help:"Group session timeout: how soon a dead member's partitions move to others." default:"45s"`
	// CommitInterval is how often stored offsets are committed (also on
	// revoke and shutdown).
	CommitInterval time.Duration `name:"commit-interval" help:"How often stored offsets are committed." default:"1s"`
	// MaxConns bounds the PostgreSQL pool.
	MaxConns int32 `name:"max-conns" help:"PostgreSQL pool size (at least --workers)." default:"5"`
	// DLQSuffix names the DLQ topic of each source topic: <topic><suffix>.
	DLQSuffix string `name:"dlq-suffix" help:"DLQ topic of a source topic: <topic><suffix>." default:".dlq"`
	// DLQStatsInterval is how often the DLQ gauges are refreshed.
	DLQStatsInterval time.Duration `name:"dlq-stats-interval" help:"How often eventforge_dlq_* gauges are refreshed." default:"15s"`
	// MetricsAddr serves /metrics when not empty.
	MetricsAddr string `name:"metrics-addr" help:"Serve Prometheus /metrics on this address (empty: off)."`
}

// DefaultConfig returns the configuration the flags default to (their
// tags, read by config.Defaults with the registry's variables): the
// engine's DefaultOptions (config_test.go holds them equal), the
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

	opts := cfg.options()
	opts.OnAssignment = memoryLimiter(cfg.QueueBytes, logger)
	rt := engine.New(opts, engine.PoolDB{Pool: pool}, handler, logger)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return metrics.Serve(gctx, cfg.MetricsAddr, logger, nil) })
	g.Go(func() error { return rt.Run(gctx) })
	return g.Wait()
}

// options are the engine's options for c.
func (c Config) options() engine.Options {
	return engine.Options{
		Name:             c.Name,
		Group:            c.GroupID(),
		Topics:           c.Topics,
		Bootstrap:        c.KafkaBrokers,
		Workers:          c.Workers,
		BatchSize:        c.BatchSize,
		BatchWait:        c.BatchWait,
		QueueSize:        c.QueueSize,
		QueueBytes:       c.QueueBytes,
		FetchWait:        c.FetchWait,
		MaxAttempts:      c.MaxAttempts,
		InitialBackoff:   c.InitialBackoff,
		NotFoundGrace:    c.NotFoundGrace,
		MaxBackoff:       c.MaxBackoff,
		AttemptTimeout:   c.AttemptTimeout,
		ProbeTimeout:     c.ProbeTimeout,
		CommitPeriod:     c.CommitInterval,
		SessionTimeout:   c.SessionTimeout,
		DLQSuffix:        c.DLQSuffix,
		DLQStatsInterval: c.DLQStatsInterval,
	}
}
