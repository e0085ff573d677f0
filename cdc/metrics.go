package cdc

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The reader's Prometheus metrics, on the default registry. The only label is
// the slot name: values never carry order or event IDs.
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

// slotMetrics are the reader's metrics bound to one slot label.
type slotMetrics struct {
	slotLag, retainedWAL, replicationLag, oldestAge, inflight, active, confirmedLSN, gap prometheus.Gauge
	published, errors, deadLettered, gapRecoveries, gapRepublished, standbyWait          prometheus.Counter
}

func newSlotMetrics(slot string) *slotMetrics {
	m := &slotMetrics{
		slotLag:        slotLagBytes.WithLabelValues(slot),
		retainedWAL:    retainedWALBytes.WithLabelValues(slot),
		replicationLag: replicationLagSeconds.WithLabelValues(slot),
		oldestAge:      oldestUnpublishedAgeSeconds.WithLabelValues(slot),
		inflight:       inflightEvents.WithLabelValues(slot),
		active:         activeGauge.WithLabelValues(slot),
		confirmedLSN:   confirmedLSNBytes.WithLabelValues(slot),
		published:      eventsPublished.WithLabelValues(slot),
		errors:         publishErrors.WithLabelValues(slot),
		deadLettered:   deadLettered.WithLabelValues(slot),
		gap:            slotGap.WithLabelValues(slot),
		gapRecoveries:  gapRecoveries.WithLabelValues(slot),
		gapRepublished: gapRepublished.WithLabelValues(slot),
		standbyWait:    standbyWaitSeconds.WithLabelValues(slot),
	}
	m.active.Set(0)
	return m
}
