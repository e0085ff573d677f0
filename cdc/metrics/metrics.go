// Package metrics holds the relay's Prometheus metrics, on the default
// registry. The only label is the slot name: values never carry order or
// event IDs. docs/metrics.md lists them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	slotLagBytes = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_slot_lag_bytes",
		Help: "Bytes of WAL between the server's current position and the slot's confirmed_flush_lsn.",
	}, []string{"slot"})
	retainedWALBytes = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_retained_wal_bytes",
		Help: "Bytes of WAL the server retains for the slot (current position minus restart_lsn).",
	}, []string{"slot"})
	replicationLagSeconds = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_replication_lag_seconds",
		Help: "Round trip of the newest heartbeat message through the WAL and the slot; grows while a heartbeat is outstanding.",
	}, []string{"slot"})
	oldestUnpublishedAgeSeconds = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_oldest_unpublished_age_seconds",
		Help: "Age of the oldest committed outbox event not yet acknowledged by Kafka, as seen by the active reader (0 on a standby).",
	}, []string{"slot"})
	eventsPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_events_published_total",
		Help: "Outbox events acknowledged by Kafka (republished events count again).",
	}, []string{"slot"})
	publishErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_publish_errors_total",
		Help: "Failed deliveries and fatal producer errors; each ends the session, which resumes from the confirmed LSN.",
	}, []string{"slot"})
	deadLettered = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_dead_lettered_total",
		Help: "Outbox events Kafka refused permanently (or that could not be built into a record), written to the relay's dead-letter table and skipped.",
	}, []string{"slot"})
	inflightEvents = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_inflight_events",
		Help: "Events handed to Kafka and not yet acknowledged.",
	}, []string{"slot"})
	confirmedLSNBytes = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_confirmed_lsn_bytes",
		Help: "The LSN this process last confirmed to the slot, as a byte position; its rate is the confirmed-WAL throughput.",
	}, []string{"slot"})
	slotGap = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_slot_gap",
		Help: "1 while the slot was found lost, invalidated or recreated and the outbox rows it may have skipped are not yet republished; 0 otherwise.",
	}, []string{"slot"})
	gapRecoveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_gap_recoveries_total",
		Help: "Slot gaps recovered: the slot was recreated and the outbox rows it may have skipped were republished.",
	}, []string{"slot"})
	gapRepublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_gap_republished_total",
		Help: "Outbox events republished by gap recoveries (most are duplicates consumers skip).",
	}, []string{"slot"})
	standbyWaitSeconds = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "eventforge_cdc_standby_wait_seconds_total",
		Help: "Time transactions waited for the --synchronized-standby-slots to flush their commit before being published.",
	}, []string{"slot"})
	activeGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eventforge_cdc_active",
		Help: "1 while this process holds the replication slot and publishes, 0 otherwise.",
	}, []string{"slot"})
)

// Slot is the relay's metrics bound to one slot label.
type Slot struct {
	SlotLag, RetainedWAL, ReplicationLag, OldestAge, Inflight, Active, ConfirmedLSN, Gap prometheus.Gauge
	Published, Errors, DeadLettered, GapRecoveries, GapRepublished, StandbyWait          prometheus.Counter
}

// NewSlot returns the metrics of slot, with eventforge_cdc_active at 0.
func NewSlot(slot string) *Slot {
	m := &Slot{
		SlotLag:        slotLagBytes.WithLabelValues(slot),
		RetainedWAL:    retainedWALBytes.WithLabelValues(slot),
		ReplicationLag: replicationLagSeconds.WithLabelValues(slot),
		OldestAge:      oldestUnpublishedAgeSeconds.WithLabelValues(slot),
		Inflight:       inflightEvents.WithLabelValues(slot),
		Active:         activeGauge.WithLabelValues(slot),
		ConfirmedLSN:   confirmedLSNBytes.WithLabelValues(slot),
		Published:      eventsPublished.WithLabelValues(slot),
		Errors:         publishErrors.WithLabelValues(slot),
		DeadLettered:   deadLettered.WithLabelValues(slot),
		Gap:            slotGap.WithLabelValues(slot),
		GapRecoveries:  gapRecoveries.WithLabelValues(slot),
		GapRepublished: gapRepublished.WithLabelValues(slot),
		StandbyWait:    standbyWaitSeconds.WithLabelValues(slot),
	}
	m.Active.Set(0)
	return m
}
