package engine

import (
	"time"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// Options configure a Runtime: which consumer it is and what it reads
// (Name, Group, Topics, Bootstrap), how it runs (Settings) and a hook.
type Options struct {
	Name      string   // consumer name, the first half of the mark
	Group     string   // Kafka consumer group id
	Topics    []string // topics to subscribe to
	Bootstrap string   // Kafka bootstrap servers
	// Settings tune the runtime; package consumer's Config embeds them, so
	// they are the flags of `eventforge consumer` as they are.
	Settings
	// OnAssignment, if set, is called on the poll goroutine after each
	// rebalance with the number of partitions now assigned.
	OnAssignment func(partitions int)
}

// Settings tune a Runtime: parallelism, batching, queues, retries,
// timeouts and the DLQ. Their struct tags are the flags of `eventforge
// consumer` (package consumer embeds Settings in its Config), defaulting to
// DefaultSettings. In Options, a zero duration, size or suffix takes its
// value from DefaultSettings, except BatchSize, NotFoundGrace, FetchWait and
// BatchWait, whose zero values mean something of their own (noted).
type Settings struct {
	// Workers bounds how many partitions are applied at the same time.
	Workers int `name:"workers" help:"Partitions applied concurrently (each in order)." default:"4"`
	// BatchSize is the most records of one partition applied in one
	// transaction; 1 turns batching off (in Options, so does 0).
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
	// records (fetch.wait.max.ms with fetch.min.bytes of fetchGatherBytes);
	// zero answers a fetch as soon as any record is there. At moderate
	// rates a short wait lets one fetch, one wakeup and one transaction per
	// partition carry several records.
	FetchWait time.Duration `name:"fetch-wait" help:"Longest the broker holds a fetch to gather more records, so that one fetch and one transaction per partition carry several (0 = answer as soon as any record is there)." default:"10ms"`
	// MaxAttempts is how often a retryable failure is tried before the
	// record is dead-lettered.
	MaxAttempts int `name:"max-attempts" help:"Attempts at a failing record before it is dead-lettered." default:"5"`
	// NotFoundGrace is the least time an event whose order does not exist
	// (yet) is retried before it is dead-lettered, whatever MaxAttempts says:
	// logical decoding may deliver a transaction a moment before it is
	// visible to other sessions on the primary. Zero: attempts only.
	NotFoundGrace time.Duration `name:"not-found-grace" help:"Least time an event whose order cannot be found is retried before it is dead-lettered." default:"10s"`
	// InitialBackoff is the first wait between attempts.
	InitialBackoff time.Duration `name:"initial-backoff" help:"First wait between attempts at one record (doubles each attempt, with jitter)." default:"100ms"`
	// MaxBackoff caps the wait between attempts at one record.
	MaxBackoff time.Duration `name:"max-backoff" help:"Longest wait between attempts at one record." default:"5s"`
	// AttemptTimeout bounds one apply transaction; at most
	// MaxAttemptTimeout.
	AttemptTimeout time.Duration `name:"attempt-timeout" help:"Longest one apply transaction may take (at most 4m: a revoked partition's transaction is waited for within the group's 5m poll interval)." default:"30s"`
	// ProbeTimeout bounds the probe (a transaction on a new connection
	// that writes what an apply writes and commits) that tells a database
	// that refuses or does not answer every apply from an event that
	// failed by itself; see probe.go and docs/consumer.md.
	ProbeTimeout time.Duration `name:"probe-timeout" help:"Longest the database probe after a failed attempt may take; a probe that fails means the database is unavailable." default:"5s"`
	// SessionTimeout is how long the group waits for a member that stopped
	// heart-beating (e.g. was killed) before giving its partitions to others.
	SessionTimeout time.Duration `name:"session-timeout" help:"Group session timeout: how soon a dead member's partitions move to others." default:"45s"`
	// CommitInterval is how often stored offsets are committed (also on
	// revoke and shutdown).
	CommitInterval time.Duration `name:"commit-interval" help:"How often stored offsets are committed." default:"1s"`
	// DLQSuffix names the DLQ topic of each source topic: <topic><suffix>.
	DLQSuffix string `name:"dlq-suffix" help:"DLQ topic of a source topic: <topic><suffix>." default:".dlq"`
	// DLQStatsInterval is how often the DLQ gauges are refreshed.
	DLQStatsInterval time.Duration `name:"dlq-stats-interval" help:"How often eventforge_dlq_* gauges are refreshed." default:"15s"`
	// MarksPruneInterval is how often marks whose event can no longer come
	// back are deleted (prune.go); zero keeps every mark.
	MarksPruneInterval time.Duration `name:"marks-prune-interval" help:"How often to delete marks whose event can no longer be delivered again (0 keeps every mark)." default:"1m"`
	// MarksPruneBatch is the number of marks deleted per statement.
	MarksPruneBatch int `name:"marks-prune-batch" help:"Marks deleted per statement when pruning." default:"1000"`
}

// DefaultSettings are the settings a consumer runs with unless configured
// otherwise; the flags of `eventforge consumer` default to them.
func DefaultSettings() Settings {
	return Settings{
		Workers:            4,
		BatchSize:          100,
		QueueSize:          5000,
		QueueBytes:         4 << 20,
		FetchWait:          DefaultFetchWait,
		MaxAttempts:        5,
		NotFoundGrace:      10 * time.Second,
		InitialBackoff:     100 * time.Millisecond,
		MaxBackoff:         5 * time.Second,
		AttemptTimeout:     30 * time.Second,
		ProbeTimeout:       5 * time.Second,
		SessionTimeout:     45 * time.Second,
		CommitInterval:     time.Second,
		DLQSuffix:          dlq.DefaultSuffix,
		DLQStatsInterval:   15 * time.Second,
		MarksPruneInterval: time.Minute,
		MarksPruneBatch:    1000,
	}
}

// withDefaults fills the zero fields from DefaultSettings; a zero BatchSize
// is 1, and a zero NotFoundGrace, FetchWait or BatchWait stays zero.
func (o Options) withDefaults() Options {
	d := DefaultSettings()
	orDefault(&o.Workers, d.Workers)
	orDefault(&o.BatchSize, 1)
	orDefault(&o.QueueSize, d.QueueSize)
	o.QueueSize = max(o.QueueSize, 2*o.BatchSize)
	orDefault(&o.QueueBytes, d.QueueBytes)
	orDefault(&o.MaxAttempts, d.MaxAttempts)
	orDefault(&o.InitialBackoff, d.InitialBackoff)
	orDefault(&o.MaxBackoff, d.MaxBackoff)
	orDefault(&o.AttemptTimeout, d.AttemptTimeout)
	orDefault(&o.ProbeTimeout, d.ProbeTimeout)
	orDefault(&o.CommitInterval, d.CommitInterval)
	orDefault(&o.SessionTimeout, d.SessionTimeout)
	orDefault(&o.DLQStatsInterval, d.DLQStatsInterval)
	orDefault(&o.MarksPruneBatch, d.MarksPruneBatch)
	if o.DLQSuffix == "" {
		o.DLQSuffix = d.DLQSuffix
	}
	return o
}

// orDefault sets *v to d when *v is not positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
