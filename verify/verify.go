// Package verify is EventForge's delivery auditor. It reads durable state
// only — the outbox, processed_events and business tables in PostgreSQL, the
// topic as Kafka stores it (read from the beginning by a reader that joins no
// group and commits nothing), the consumer groups' committed offsets and the
// replication slot — and turns it into the three counters of the design
// (logical events, deliveries, business changes) plus the violations that
// would break the promise "at-least-once delivery, exactly one business
// effect": lost events, duplicate effects, marks without effect and per-order
// ordering violations, plus the two states in which the audit cannot vouch
// for the pipeline: events left unpublished beyond a grace period, events
// the relay dead-lettered and nobody replayed yet, and a pipeline that did
// not drain within the wait.
//
// The outbox is pruned after a retention (24 h by default), so no check
// needs an outbox row: an event is attributed to its order and type from its
// outbox row, its Kafka record, its dead letter, its purge record or its
// row in the relay's dead-letter table, whichever still exists. Checks keyed on orders and counters (a second
// shipment, ledger counters against the number of marks) cover all time;
// the rest cover the events that can still be attributed (docs/verify.md,
// "Audit window").
package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
)

// Config says what to audit.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	// KafkaBrokers is the Kafka bootstrap server list.
	KafkaBrokers string `name:"kafka-brokers" help:"Kafka bootstrap servers." default:"${kafka_brokers}"`
	// Topic is the topic the CDC reader publishes order events to.
	Topic string `name:"topic" help:"Topic of the order events." default:"${topic}"`
	// DLQTopic is the dead-letter topic; empty means <topic>.dlq. A missing
	// DLQ topic is treated as empty.
	DLQTopic string `name:"dlq-topic" help:"Dead-letter topic (default <topic>.dlq)."`
	// Consumers maps consumer names to their Kafka groups; empty means
	// every consumer EventForge runs, with its default group
	// (DefaultConsumers).
	Consumers map[string]string `name:"consumer" help:"consumer=group pairs to audit (repeatable; default: every consumer with its default group, eventforge-<name>)."`
	// ReplicationURL reaches the standby the CDC reader decodes on (its
	// --replication-url), where its slot is; empty, the slot is read on
	// DatabaseURL.
	ReplicationURL string `name:"replication-url" log:"url" help:"PostgreSQL connection URL of the standby the CDC reader decodes on (its --replication-url), where its slot is. Empty: the slot is on --database-url."`
	// Slot is the replication slot of the CDC reader.
	Slot string `name:"slot" help:"Replication slot of the CDC reader." default:"${slot}"`
	// DeadLetterTable is the relay's dead-letter table (cdc's
	// --dead-letter-table); only its rows of Slot are audited. A missing
	// table holds no dead letters.
	DeadLetterTable string `name:"dead-letter-table" help:"Schema-qualified dead-letter table of the CDC reader." default:"public.cdc_dead_letters"`
	// Wait, when positive, first waits (up to this long) for the slot to
	// confirm everything committed so far and for every group to commit up to
	// the end of the topic, so that in-flight events are not reported as
	// pending.
	Wait time.Duration `name:"wait" help:"Wait up to this long for the pipeline to drain before auditing (0: audit at once)." default:"0s"`
	// Grace is how long a committed outbox event may stay out of Kafka
	// before it counts as unpublished beyond the grace, which fails the
	// audit: a relay that stopped publishing.
	Grace time.Duration `name:"grace" help:"Longest a committed outbox event may stay unpublished before the audit fails." default:"1m"`
	// Timeout bounds the audit itself (after any Wait).
	Timeout time.Duration `name:"timeout" help:"Longest the audit may take after --wait." default:"5m"`
}

// DefaultConfig returns the configuration the flags default to (their
// tags, read by config.Defaults). Its Consumers is empty: every consumer
// with its default group (DefaultConsumers), filled in when the audit runs.
func DefaultConfig() Config {
	return config.Defaults[Config]()
}

// LogValue is the configuration as the startup line shows it: every flag,
// secrets masked (logging.ConfigValue).
func (c Config) LogValue() slog.Value { return logging.ConfigValue(c) }

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" || c.KafkaBrokers == "" || c.Topic == "" || c.Slot == "" || c.DeadLetterTable == "" {
		errs = append(errs, errors.New("database-url, kafka-brokers, topic, slot and dead-letter-table are required"))
	}
	for name := range c.Consumers {
		if _, ok := effectChecks[name]; !ok {
			errs = append(errs, fmt.Errorf("no effect check for consumer %q (known: %v)", name, knownConsumers()))
		}
	}
	if c.Wait < 0 || c.Grace < 0 {
		errs = append(errs, errors.New("wait and grace must not be negative"))
	}
	return errors.Join(errs...)
}

// withDefaults fills what an empty field means.
func (c Config) withDefaults() Config {
	if len(c.Consumers) == 0 {
		c.Consumers = DefaultConsumers()
	}
	return c
}

func (c Config) dlqTopic() string {
	if c.DLQTopic != "" {
		return c.DLQTopic
	}
	return c.Topic + ".dlq"
}

// Report is the audit's result. Its JSON form is the stable output of
// `eventforge verify --json`.
type Report struct {
	// LogicalEvents is the number of outbox events (one per business fact).
	LogicalEvents int `json:"logical_events"`
	// Deliveries is the number of records in the topic.
	Deliveries int `json:"deliveries"`
	// DuplicateDeliveries is Deliveries minus the distinct event IDs among
	// them: records republished after a relay crash, replays, and so on.
	DuplicateDeliveries int `json:"duplicate_deliveries"`
	// RelayDuplicates is the part of DuplicateDeliveries the relay
	// published again (restarts, takeovers, gap recoveries): 0 with
	// `eventforge cdc --exactly-once`, as a read_committed reader sees the
	// topic. The rest are DLQ replays (DLQReplays). A consumer reading a
	// record again after a crash is no record in Kafka: its marks absorb
	// it and eventforge_consumer_events_total{result="duplicate"} counts it.
	RelayDuplicates int `json:"relay_duplicates"`
	// DLQReplays counts the records `eventforge dlq replay` published
	// (header dlq.replay.source).
	DLQReplays int `json:"dlq_replays"`
	// BusinessChanges counts each consumer's business effects.
	BusinessChanges map[string]int `json:"business_changes"`
	// Lost counts events the contract lost: an outbox event absent from
	// Kafka although the slot confirmed past it, or a record a consumer's
	// committed offset passed without applying it (and without
	// dead-lettering it, and without a purge record of its dead letter).
	Lost int `json:"lost"`
	// DeadLettersLost counts dead letters that left the DLQ topic without
	// a purge record: deleted below its low watermark (expired under a
	// finite retention, deleted by hand) although `eventforge dlq purge`
	// never recorded them in dlq_purged. Their events may never have been
	// applied, and once their source records expired too nothing else
	// shows them. A violation of the contract, like Lost; while a source
	// record is still in the topic, its event is in Lost as well.
	DeadLettersLost int `json:"dead_letters_lost"`
	// DuplicateEffects counts business effects applied more than once.
	DuplicateEffects int `json:"duplicate_effects"`
	// MarksWithoutEffect counts processed_events marks whose effect is
	// missing; EffectsWithoutMark the reverse.
	MarksWithoutEffect int `json:"marks_without_effect"`
	EffectsWithoutMark int `json:"effects_without_mark"`
	// OrderingViolations counts orders whose events are spread over several
	// partitions or appear in Kafka out of commit order (or, once the outbox
	// rows are pruned, another event of an order before its OrderCreated).
	OrderingViolations int `json:"ordering_violations"`
	// UnpublishedPastGrace counts the unpublished events committed longer
	// than Config.Grace ago: a relay that stopped publishing. It fails the
	// audit.
	UnpublishedPastGrace int `json:"unpublished_past_grace"`

	// RelayDeadLettered counts events the relay dead-lettered (Kafka
	// refused their records permanently; table cdc_dead_letters) that
	// nobody replayed yet and that are not in the topic: no event is lost,
	// but none of them is delivered until an operator fixes the cause and
	// runs `eventforge outbox dead-letters replay`. It fails the audit.
	RelayDeadLettered int `json:"relay_dead_lettered"`
	// RelayReplayed counts the relay's dead letters that were replayed:
	// their events are audited like any published event.
	RelayReplayed int `json:"relay_replayed"`

	// Unpublished counts outbox events not in Kafka yet while the slot has
	// not confirmed past them (including those past the grace).
	Unpublished int `json:"unpublished"`
	// Pending counts, per consumer, records beyond the committed offset that
	// are not applied yet: in flight, not lost.
	Pending map[string]int `json:"pending"`
	// DeadLettered counts, per consumer, events found in the DLQ.
	DeadLettered map[string]int `json:"dead_lettered"`
	// Purged counts, per consumer, dead-lettered events deleted from the DLQ
	// by `eventforge dlq purge` (recorded in the table dlq_purged).
	Purged map[string]int `json:"purged"`
	// UnattributedMarks counts, per consumer, marks whose event can no
	// longer be attributed to an order (outbox row pruned, Kafka record past
	// the topic's retention): they are audited only by the checks keyed on
	// orders and counters.
	UnattributedMarks map[string]int `json:"unattributed_marks"`
	// SlotLagBytes is the WAL between the server's position and the slot's
	// confirmed_flush_lsn at the time of the audit.
	SlotLagBytes int64 `json:"slot_lag_bytes"`
	// Drained is false when Wait was set and the pipeline did not drain in
	// time. It fails the audit: pending work was expected to finish.
	Drained bool `json:"drained"`
	// Violations describes the first violations found, one per line.
	Violations []string `json:"violations"`
}

// OK reports whether the audit passed: no violation of the contract,
// nothing unpublished beyond the grace, no event waiting in the relay's
// dead-letter table, and a drained pipeline when the audit was asked to
// wait for it.
func (r *Report) OK() bool {
	return r.ContractKept() && r.UnpublishedPastGrace == 0 && r.RelayDeadLettered == 0 && r.Drained
}

// ContractKept reports whether the audit found no violation of the
// contract: nothing lost (no dead letter either), no effect applied twice, no mark without its
// effect or effect without its mark, no ordering violation.
func (r *Report) ContractKept() bool {
	return r.Lost == 0 && r.DeadLettersLost == 0 && r.DuplicateEffects == 0 && r.MarksWithoutEffect == 0 &&
		r.EffectsWithoutMark == 0 && r.OrderingViolations == 0
}

// Failures lists, one phrase each, why OK is false.
func (r *Report) Failures() []string {
	var out []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{r.Lost, "lost"}, {r.DeadLettersLost, "dead letters lost"}, {r.DuplicateEffects, "duplicate effects"}, {r.MarksWithoutEffect, "marks without effect"},
		{r.EffectsWithoutMark, "effects without mark"}, {r.OrderingViolations, "ordering violations"},
		{r.UnpublishedPastGrace, "unpublished beyond the grace"},
	} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%s %d", c.what, c.n))
		}
	}
	if r.RelayDeadLettered > 0 {
		out = append(out, fmt.Sprintf("dead-lettered by the relay %d (replay with `%s` once the cause is fixed)", r.RelayDeadLettered, ReplayDeadLettersCommand))
	}
	if !r.Drained {
		out = append(out, "the pipeline did not drain within --wait")
	}
	return out
}

// maxDetails bounds Report.Violations; counters stay exact.
const maxDetails = 50

func (r *Report) violate(format string, args ...any) {
	if len(r.Violations) < maxDetails {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// Run audits and returns the report. An error means the audit itself could
// not be completed (unreachable database or broker); contract violations are
// in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid verify config: %w", err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Wait+timeout)
	defer cancel()
	a, err := newAuditor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer a.close()
	return a.run(ctx)
}
