package engine

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// librdkafka's fetching, bounded: what it prefetched for a partition is
// dropped when the partition pauses, and it lives in C memory beside the Go
// heap. The defaults let it hold 64 MiB of prefetched records (more with
// their per-record structures) and receive fetch responses of up to 50 MiB.
const (
	// prefetchKBytes bounds librdkafka's prefetched records, all partitions
	// together (queued.max.messages.kbytes).
	prefetchKBytes = 4 << 10
	// fetchMaxBytes bounds one fetch response (fetch.max.bytes). A
	// response's buffer stays allocated while any record from it is
	// queued, so smaller responses free memory sooner (docs/bench.md,
	// *Where the consumer's memory is*).
	fetchMaxBytes = 1 << 20
	// partitionFetchBytes bounds one partition's share of a fetch response
	// (max.partition.fetch.bytes, alias fetch.message.max.bytes); a larger
	// record is still fetched whole.
	partitionFetchBytes = 256 << 10
	// fetchQueueBackoffMS is how soon a partition is fetched again after
	// the prefetch bound was reached (fetch.queue.backoff.ms, default
	// 1,000): with a small prefetch the bound is reached often, and a
	// second's wait would starve the runtime's queues.
	fetchQueueBackoffMS = 10
	// fetchGatherBytes is the fetch.min.bytes of a fetch held for up to
	// FetchWait: large enough that below a backlog the wait, not the size,
	// ends it, and at most one partition's share of a response, so that a
	// single partition's data can fill it.
	fetchGatherBytes = 128 << 10
)

// The revoke callback runs on the poll goroutine and waits there for the
// revoked partitions' transactions in flight (each at most
// Options.AttemptTimeout) and dead-letter writes (at most
// dlqDeliveryTimeout). A poll loop that stalls longer than
// max.poll.interval.ms makes the member leave the group, and the offsets
// it then commits are refused; MaxAttemptTimeout keeps the wait a minute
// inside it, for the commit that follows.
const (
	maxPollInterval = 5 * time.Minute
	// MaxAttemptTimeout is the longest Options.AttemptTimeout.
	MaxAttemptTimeout = maxPollInterval - time.Minute
)

// DefaultFetchWait is FetchWait's default; docs/consumer.md (*Waiting for
// more records*) has the measurements it was chosen from.
const DefaultFetchWait = 10 * time.Millisecond

// consumerSettings are the librdkafka properties of the Kafka consumer,
// on top of kafkaconf.Base.
func consumerSettings(o Options) kafka.ConfigMap {
	settings := kafka.ConfigMap{
		"group.id":                      o.Group,
		"partition.assignment.strategy": "cooperative-sticky",
		"auto.offset.reset":             "earliest",
		// Offsets are stored by the runtime only after the DB commit (or the
		// DLQ ack) and committed periodically, on revoke and on close.
		"enable.auto.offset.store": false,
		"enable.auto.commit":       true,
		"auto.commit.interval.ms":  int(o.CommitInterval / time.Millisecond),
		"session.timeout.ms":       int(o.SessionTimeout / time.Millisecond),
		"max.poll.interval.ms":     int(maxPollInterval / time.Millisecond),
		"heartbeat.interval.ms":    int(max(o.SessionTimeout/10, 100*time.Millisecond) / time.Millisecond),
		// librdkafka's own prefetch, on top of the runtime's queues. Pausing a
		// partition discards what librdkafka prefetched for it, so a large
		// prefetch is mostly fetched twice; its defaults also dominated the
		// consumer's memory.
		"queued.max.messages.kbytes": prefetchKBytes,
		"fetch.max.bytes":            fetchMaxBytes,
		"max.partition.fetch.bytes":  partitionFetchBytes,
		"fetch.queue.backoff.ms":     fetchQueueBackoffMS,
	}
	if o.FetchWait > 0 {
		settings["fetch.wait.max.ms"] = max(int(o.FetchWait/time.Millisecond), 1)
		settings["fetch.min.bytes"] = fetchGatherBytes
	}
	return settings
}
