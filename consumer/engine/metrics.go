package engine

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Results of eventforge_consumer_events_total: every event a consumer
// finishes is counted once, under exactly one result.
const (
	// ResultApplied: applied at the first attempt.
	ResultApplied = "applied"
	// ResultDuplicate: its (consumer, event_id) mark existed; nothing changed.
	ResultDuplicate = "duplicate"
	// ResultRetried: applied after at least one failed attempt.
	ResultRetried = "retried"
	// ResultDeadLettered: written to the DLQ.
	ResultDeadLettered = "dead_lettered"
)

// Metrics on the default registry. Labels never carry order or event IDs.
var (
	eventsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_consumer_events_total",
		Help: "Events finished by a consumer, by result: applied, duplicate, retried (applied after a failed attempt), dead_lettered.",
	}, []string{"consumer", "result"})
	conflictsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_consumer_idempotency_conflicts_total",
		Help: "Duplicates detected while another transaction was applying the same event concurrently (the mark appeared during our insert).",
	}, []string{"consumer"})
	retriesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_consumer_retries_total",
		Help: "Failed attempts that were retried inline.",
	}, []string{"consumer"})
	unavailablePartitions = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_consumer_unavailable_partitions",
		Help: "Partitions whose next record waits because PostgreSQL does not answer (class unavailable: retried without an attempt limit).",
	}, []string{"consumer"})
	dlqUnavailablePartitions = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_consumer_dlq_unavailable_partitions",
		Help: "Partitions whose next record waits because its dead letter cannot be written to the DLQ topic, by cause: topic_missing, not_authorized, too_large, write_failed.",
	}, []string{"consumer", "cause"})
	lagGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_consumer_lag",
		Help: "Records not yet finished per assigned partition: high watermark minus the offset after the last finished record (summed over topics).",
	}, []string{"consumer", "partition"})
	applySeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "eventforge_consumer_apply_seconds",
		Help:    "Duration of one apply transaction (one event, or one batch), from BEGIN to COMMIT.",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
	}, []string{"consumer"})
	marksPruned = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_consumer_marks_pruned_total",
		Help: "Marks deleted because their event can no longer be delivered again: every copy below the partition's log start, the outbox row pruned, no relay dead letter.",
	}, []string{"consumer"})
	marksHeld = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_consumer_marks_held",
		Help: "Marks the consumer holds (its processed_events rows), counted when pruning starts and after each pruning round.",
	}, []string{"consumer"})
	marksPrunePaused = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_consumer_marks_prune_paused",
		Help: "1 while no mark is pruned because the source topic's DLQ holds records (a replay would deliver them again).",
	}, []string{"consumer"})
	dlqEvents = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_dlq_events",
		Help: "Records currently held by a DLQ topic (high minus low watermark, summed over partitions).",
	}, []string{"topic"})
	dlqExpiring = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_dlq_expiring",
		Help: "1 when a DLQ topic is missing or its settings let records be deleted without a purge (finite retention.ms or retention.bytes, or compaction); 0 otherwise.",
	}, []string{"topic"})
	dlqOldestAge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_dlq_oldest_age_seconds",
		Help: "Age of the oldest record held by a DLQ topic; 0 when it is empty.",
	}, []string{"topic"})
)

// initMetrics creates every series of consumer with value 0, so dashboards
// and alerts see them before the first event.
func initMetrics(consumer string) {
	for _, r := range []string{ResultApplied, ResultDuplicate, ResultRetried, ResultDeadLettered} {
		eventsTotal.WithLabelValues(consumer, r)
	}
	conflictsTotal.WithLabelValues(consumer)
	retriesTotal.WithLabelValues(consumer)
	unavailablePartitions.WithLabelValues(consumer)
	for _, c := range dlqWriteCauses {
		dlqUnavailablePartitions.WithLabelValues(consumer, c)
	}
	applySeconds.WithLabelValues(consumer)
}
