package cdc

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/cdc/standby"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
)

// Config configures the reader. The zero value is not valid; start from
// DefaultConfig or from the flags of `eventforge cdc`.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string. The role needs the
	// REPLICATION attribute (and CREATE on the database to create the slot).
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL (role with REPLICATION)." default:"${database_url}"`
	// ReplicationURL, when set, reaches a physical standby of the primary
	// (PostgreSQL 16+) to decode on: the slot, the replication connection
	// and a gap recovery's snapshot are there, while DatabaseURL stays the
	// primary for the leadership lock, heartbeats and checkpoints
	// (docs/cdc.md, "Decoding on a standby").
	ReplicationURL string `name:"replication-url" log:"url" help:"PostgreSQL connection URL of a standby (16+) to decode on: the slot lives there; --database-url stays the primary for the leadership lock, heartbeats and checkpoints. Empty: decode on --database-url."`
	// Kafka is the Kafka sink's settings: the bootstrap servers and the
	// producer properties an operator may set.
	Kafka kafkasink.Config `embed:""`
	// Slot is the logical replication slot to read.
	Slot string `name:"slot" help:"Logical replication slot to read." default:"${slot}"`
	// Publication is the pgoutput publication on the outbox table.
	Publication string `name:"publication" help:"Publication on the outbox table." default:"${publication}"`
	// OutboxTable is the schema-qualified outbox table.
	OutboxTable string `name:"outbox-table" help:"Schema-qualified outbox table." default:"public.outbox"`
	// Topics maps an outbox aggregatetype to its Kafka topic.
	Topics map[string]string `name:"topic" help:"aggregatetype=topic routes (repeatable)." default:"${aggregate_order}=${topic}"`
	// TopicFallback is the topic for aggregate types without a route;
	// "{aggregatetype}" is replaced.
	TopicFallback string `name:"topic-fallback" help:"Topic for unrouted aggregate types ({aggregatetype} is replaced)." default:"eventforge.{aggregatetype}"`
	// StatusInterval is how often the confirmed position is reported to
	// PostgreSQL (also sent at once when the server asks).
	StatusInterval time.Duration `name:"status-interval" help:"How often to report the confirmed LSN to PostgreSQL when nothing new was acknowledged." default:"2s"`
	// ConfirmInterval is how soon WAL that Kafka newly acknowledged is
	// confirmed: at most one status update per interval while the
	// confirmable position moves.
	ConfirmInterval time.Duration `name:"confirm-interval" help:"Confirm newly acknowledged WAL to PostgreSQL at most this often." default:"100ms"`
	// NoCreateSlot makes a missing slot an error instead of creating it.
	NoCreateSlot bool `name:"no-create-slot" help:"Fail if the slot does not exist instead of creating it."`
	// FlushTimeout bounds how long shutdown waits for Kafka to acknowledge
	// queued events before the final confirmation.
	FlushTimeout time.Duration `name:"flush-timeout" help:"How long shutdown waits for queued events to be acknowledged." default:"10s"`
	// MaxBackoff caps the wait between reconnection attempts.
	MaxBackoff time.Duration `name:"max-backoff" help:"Longest wait between reconnection attempts." default:"10s"`
	// HeartbeatInterval is how often the reader writes a heartbeat message
	// to the WAL (pg_logical_emit_message) and measures its round trip.
	HeartbeatInterval time.Duration `name:"heartbeat-interval" help:"How often to write a heartbeat message to the WAL and time its round trip." default:"10s"`
	// MaxInflightEvents bounds the events handed to Kafka and not yet
	// acknowledged; reading pauses at the bound.
	MaxInflightEvents int `name:"max-inflight-events" help:"Pause reading the slot while this many events await Kafka's acknowledgement." default:"2500"`
	// MaxInflightBytes bounds the approximate size of the events handed to
	// Kafka and not yet acknowledged; reading pauses at the bound.
	MaxInflightBytes int64 `name:"max-inflight-bytes" help:"Pause reading the slot while this many bytes of events await Kafka's acknowledgement." default:"16777216"`
	// StandbyRetry is how often a waiting reader checks whether it may take
	// over (leadership lock free, slot released).
	StandbyRetry time.Duration `name:"standby-retry" help:"How often a standby reader tries to take over the slot." default:"1s"`
	// UnhealthyAfter is how long a leader may be unable to publish (events
	// waiting for Kafka's acknowledgement with none acknowledged, or no
	// session streaming) before it gives up the leadership for a standby;
	// it then holds off as long before competing again.
	UnhealthyAfter time.Duration `name:"unhealthy-after" help:"Give up the leadership after being unable to publish for this long (and hold off as long)." default:"60s"`
	// OutboxRetention is how long outbox rows are kept; older rows are
	// deleted in small batches by the active reader. Zero disables pruning.
	OutboxRetention time.Duration `name:"outbox-retention" help:"Delete outbox rows older than this (0 keeps them)." default:"24h"`
	// PruneInterval is how often the active reader prunes the outbox.
	PruneInterval time.Duration `name:"outbox-prune-interval" help:"How often to prune the outbox." default:"5m"`
	// PruneBatch is the number of rows deleted per prune statement.
	PruneBatch int `name:"outbox-prune-batch" help:"Outbox rows deleted per statement when pruning." default:"1000"`
	// DeadLetterTable is the schema-qualified table that holds outbox
	// events Kafka refuses permanently (created by `eventforge migrate`).
	DeadLetterTable string `name:"dead-letter-table" help:"Schema-qualified table for events Kafka refuses permanently." default:"public.cdc_dead_letters"`
	// CheckpointTable is the schema-qualified table where the reader keeps
	// its slot checkpoint: the position it may confirm up to and the
	// transaction below which every outbox row is published (created by
	// `eventforge migrate`; package gap).
	CheckpointTable string `name:"checkpoint-table" help:"Schema-qualified table for the reader's slot checkpoint (gap recovery after a lost slot or a failover)." default:"public.cdc_checkpoints"`
	// CheckpointInterval is how often the active reader records the
	// transaction below which every outbox row is published; after a lost
	// slot, rows from there on are republished.
	CheckpointInterval time.Duration `name:"checkpoint-interval" help:"How often to record which outbox rows are published (bounds what a lost slot republishes)." default:"10s"`
	// ExactlyOnce publishes in Kafka transactions that also record the
	// position they reach, with a transactional.id of the slot that fences
	// an older leader (docs/cdc.md, "Exactly-once into Kafka").
	ExactlyOnce bool `name:"exactly-once" help:"Publish in Kafka transactions that carry the slot position: no duplicate from the relay for read_committed readers, an old leader fenced."`
	// PositionTopic is the compacted topic where an exactly-once relay
	// records its position (created when missing).
	PositionTopic string `name:"position-topic" help:"Compacted topic of the exactly-once relay's positions (created when missing)." default:"eventforge.cdc.positions"`
	// TransactionEvents, TransactionBytes and TransactionInterval bound an
	// exactly-once relay's Kafka transactions; whole PostgreSQL
	// transactions are grouped until one is reached.
	TransactionEvents   int           `name:"transaction-events" help:"With --exactly-once: commit the Kafka transaction once it holds this many events." default:"1000"`
	TransactionBytes    int64         `name:"transaction-bytes" help:"With --exactly-once: commit the Kafka transaction once it holds this many bytes." default:"4194304"`
	TransactionInterval time.Duration `name:"transaction-interval" help:"With --exactly-once: commit the Kafka transaction once it is this old." default:"100ms"`
	// TransactionTimeout is Kafka's transaction.timeout.ms, and the message
	// timeout, of an exactly-once relay.
	TransactionTimeout time.Duration `name:"transaction-timeout" help:"With --exactly-once: Kafka's transaction timeout (also the message timeout)." default:"60s"`
	// SynchronizedStandbySlots are physical slots of standbys on the
	// primary; a transaction's events are produced only once every one of
	// them flushed its commit, so a promoted standby has every order whose
	// event was published (package standby). PostgreSQL 17 does this itself
	// with synchronized_standby_slots. NoStandbyWait ("none") publishes
	// without waiting; left empty on a server with standbys and nothing
	// that holds the relay back, the reader refuses to publish.
	SynchronizedStandbySlots []string `name:"synchronized-standby-slots" help:"Physical slots of standbys: publish a transaction only once they flushed its commit, so a promoted standby has every published order (17+: or synchronized_standby_slots on the server). 'none' publishes without waiting (a failover can leave events of orders the new primary lacks); unset, the reader refuses to publish on a server with standbys." sep:","`
}

// NoStandbyWait, as --synchronized-standby-slots, publishes without waiting
// for standbys.
const NoStandbyWait = standby.NoWait

// DefaultConfig returns the configuration the flags default to (their
// tags are the one statement of the defaults).
func DefaultConfig() Config { return config.Defaults[Config]() }

// LogValue is the configuration as the startup line shows it: every flag,
// secrets masked (logging.ConfigValue).
func (c Config) LogValue() slog.Value { return logging.ConfigValue(c) }

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("database-url is required"))
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ExactlyOnce {
		if c.PositionTopic == "" || c.TransactionEvents < 1 || c.TransactionBytes < 1 || c.TransactionInterval <= 0 || c.TransactionTimeout < time.Second {
			errs = append(errs, errors.New("with exactly-once: position-topic is required, transaction-events, -bytes and -interval must be positive and transaction-timeout at least 1s"))
		}
		if _, set := c.Kafka.ProducerSettings["transaction.timeout.ms"]; set {
			errs = append(errs, errors.New("kafka-producer-setting transaction.timeout.ms: set --transaction-timeout instead"))
		}
	}
	if c.Slot == "" || c.Publication == "" {
		errs = append(errs, errors.New("slot and publication are required"))
	}
	if _, _, ok := strings.Cut(c.OutboxTable, "."); !ok {
		errs = append(errs, fmt.Errorf("outbox-table %q: want schema.table", c.OutboxTable))
	}
	if _, _, ok := strings.Cut(c.DeadLetterTable, "."); !ok {
		errs = append(errs, fmt.Errorf("dead-letter-table %q: want schema.table", c.DeadLetterTable))
	}
	if _, _, ok := strings.Cut(c.CheckpointTable, "."); !ok {
		errs = append(errs, fmt.Errorf("checkpoint-table %q: want schema.table", c.CheckpointTable))
	}
	if c.CheckpointInterval <= 0 {
		errs = append(errs, fmt.Errorf("checkpoint-interval %s: want > 0", c.CheckpointInterval))
	}
	if c.StatusInterval <= 0 || c.ConfirmInterval <= 0 || c.FlushTimeout <= 0 || c.MaxBackoff <= 0 || c.HeartbeatInterval <= 0 || c.StandbyRetry <= 0 || c.UnhealthyAfter <= 0 {
		errs = append(errs, errors.New("status-interval, confirm-interval, flush-timeout, max-backoff, heartbeat-interval, standby-retry and unhealthy-after must be positive"))
	}
	if len(c.SynchronizedStandbySlots) > 1 && slices.Contains(c.SynchronizedStandbySlots, NoStandbyWait) {
		errs = append(errs, fmt.Errorf("synchronized-standby-slots %v: %q stands alone", c.SynchronizedStandbySlots, NoStandbyWait))
	}
	if c.MaxInflightEvents < 1 || c.MaxInflightBytes < 1 {
		errs = append(errs, errors.New("max-inflight-events and max-inflight-bytes must be at least 1"))
	}
	if c.OutboxRetention < 0 {
		errs = append(errs, errors.New("outbox-retention must not be negative"))
	}
	if c.OutboxRetention > 0 && (c.PruneInterval <= 0 || c.PruneBatch < 1) {
		errs = append(errs, errors.New("outbox-prune-interval and outbox-prune-batch must be positive when outbox-retention is set"))
	}
	return errors.Join(errs...)
}
