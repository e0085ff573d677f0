// Package cdc is EventForge's relay: it streams committed outbox inserts from
// a PostgreSQL logical replication slot (pgoutput) to Kafka, keyed by the
// aggregate ID, and confirms a transaction's WAL position to the slot only
// after Kafka acknowledged every event of it and of every earlier
// transaction. A crash between the acknowledgement and the confirmation
// republishes the event on restart: at-least-once delivery, with the event ID
// preserved so consumers apply it once. docs/cdc.md is the contract.
//
// This package holds the relay's Config and Run; the stages live in rooms of
// their own (docs/architecture.md, "The relay"): leader (leadership, health,
// the loop over sessions), stream (a replication session), gap (the
// checkpoint and gap recovery), retention (outbox pruning), deadletter,
// standby, slot, and the sink seam with its Kafka driver (sink, kafkasink).
package cdc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/leader"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/retention"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/cdc/stream"
)

// Health is what /readyz of `eventforge cdc` reports (leader.Health).
type Health = leader.Health

// Option changes how Run runs the relay.
type Option func(*options)

type options struct {
	health *Health
	driver sink.Driver
}

// WithHealth reports the relay's readiness to h.
func WithHealth(h *Health) Option { return func(o *options) { o.health = h } }

// WithSink publishes through d instead of the Kafka sink cfg.Kafka
// configures.
func WithSink(d sink.Driver) Option { return func(o *options) { o.driver = d } }

// Run runs the relay until ctx is cancelled. Several processes may run for
// one slot: exactly one publishes, the others stand by (package leader).
// Connection losses are retried; Run returns nil after a clean shutdown, or
// an error that reconnecting cannot fix.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid cdc config: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	logger = logger.With("slot", cfg.Slot)
	if o.driver == nil {
		d, err := cfg.kafkaDriver(ctx, logger)
		if err != nil {
			return err
		}
		o.driver = d
	}
	return leader.Run(ctx, cfg.leader(), leader.Deps{
		Driver: o.driver,
		Router: sink.Router{Topics: cfg.Topics, Fallback: cfg.TopicFallback},
		Health: o.health,
		Logger: logger,
	})
}

// kafkaDriver is the Kafka sink cfg configures: transactional with
// ExactlyOnce (its position topic created when missing), else idempotent.
func (c Config) kafkaDriver(ctx context.Context, logger *slog.Logger) (sink.Driver, error) {
	extra := c.Kafka.RelaySettings(c.MaxInflightEvents, c.MaxInflightBytes)
	if !c.ExactlyOnce {
		return kafkasink.Driver{Bootstrap: c.Kafka.Brokers, Extra: extra, Logger: logger}, nil
	}
	pcfg, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database-url: %w", err)
	}
	if err := kafkasink.EnsurePositionTopic(ctx, c.Kafka.Brokers, c.PositionTopic); err != nil {
		return nil, err
	}
	return kafkasink.TxnDriver{
		Bootstrap:       c.Kafka.Brokers,
		TransactionalID: kafkasink.TransactionalID(pcfg.Database, c.Slot),
		PositionTopic:   c.PositionTopic,
		PositionKey:     pcfg.Database + "/" + c.Slot,
		Timeout:         c.TransactionTimeout,
		Extra:           extra,
		Logger:          logger,
	}, nil
}

// leader is cfg as the leadership and its stages take it. cfg is valid.
func (c Config) leader() leader.Config {
	table := outbox.MustParseTable
	ob, dead, checkpoints := table(c.OutboxTable), table(c.DeadLetterTable), table(c.CheckpointTable)
	slots := standby.Slots(c.SynchronizedStandbySlots)
	slotURL := c.DatabaseURL
	if c.ReplicationURL != "" {
		slotURL = c.ReplicationURL
	}
	return leader.Config{
		DatabaseURL:       c.DatabaseURL,
		ReplicationURL:    c.ReplicationURL,
		Slot:              c.Slot,
		Publication:       c.Publication,
		Outbox:            ob,
		DeadLetters:       dead,
		StatusInterval:    c.StatusInterval,
		HeartbeatInterval: c.HeartbeatInterval,
		StandbyRetry:      c.StandbyRetry,
		UnhealthyAfter:    c.UnhealthyAfter,
		MaxBackoff:        c.MaxBackoff,
		StandbySlots:      slots,
		Stream: stream.Config{
			DatabaseURL: slotURL, Slot: c.Slot, Publication: c.Publication, Outbox: ob, Checkpoints: checkpoints,
			StatusInterval: c.StatusInterval, ConfirmInterval: c.ConfirmInterval, FlushTimeout: c.FlushTimeout,
			MaxInflightEvents: c.MaxInflightEvents, MaxInflightBytes: c.MaxInflightBytes, StandbySlots: slots,
			Txn: stream.TxnBounds{Events: c.TransactionEvents, Bytes: c.TransactionBytes, Interval: c.TransactionInterval},
		},
		Gap: gap.Config{
			DatabaseURL: slotURL, Slot: c.Slot, Outbox: ob, DeadLetters: dead, Checkpoints: checkpoints,
			NoCreateSlot: c.NoCreateSlot, LogEvery: c.CheckpointInterval, Stall: c.UnhealthyAfter, MaxInflight: c.MaxInflightEvents,
		},
		Retention: retention.Config{
			Slot: c.Slot, Outbox: ob, Checkpoints: checkpoints, CheckpointInterval: c.CheckpointInterval,
			Retention: c.OutboxRetention, PruneInterval: c.PruneInterval, PruneBatch: c.PruneBatch,
		},
	}
}
