package console

import (
	"github.com/eventforge/eventforge/deploy/prometheus/rules"
)

// chartAlert names the shipped alert (deploy/prometheus/rules) on the
// metric a chart's figure is the console's reading of: the chart draws
// that alert's threshold, read from the rules file embedded at build time.
type chartAlert struct {
	Figure string // the Sample field, as in JSON
	Metric string // the metric the figure mirrors (docs/metrics.md)
	Alert  string
}

var chartAlerts = []chartAlert{
	{"slot_lag_bytes", "eventforge_cdc_slot_lag_bytes", "EventForgeSlotLagHigh"},
	{"retained_wal_bytes", "eventforge_cdc_retained_wal_bytes", "EventForgeRetainedWALHigh"},
	{"slot_lag_seconds", "eventforge_cdc_replication_lag_seconds", "EventForgeReplicationLagHigh"},
	{"oldest_unpublished_seconds", "eventforge_cdc_oldest_unpublished_age_seconds", "EventForgeOldestUnpublishedAgeHigh"},
	{"consumer_lag", "eventforge_consumer_lag", "EventForgeConsumerLagHigh"},
}

// alertLine is a threshold as the front end draws it.
type alertLine struct {
	Alert      string  `json:"alert"`
	Value      float64 `json:"value"`
	ForSeconds float64 `json:"for_seconds"`
	Severity   string  `json:"severity"`
}

// figureAlerts returns the threshold of each chart's alert, by figure. An
// alert missing from the rules (or no longer a threshold on the figure's
// metric) is left out; TestChartAlertsAreShipped fails on it.
func figureAlerts() map[string]alertLine {
	ths, err := rules.Thresholds()
	out := map[string]alertLine{}
	if err != nil {
		return out
	}
	for _, ca := range chartAlerts {
		if th, ok := ths[ca.Alert]; ok && th.Metric == ca.Metric {
			out[ca.Figure] = alertLine{Alert: th.Alert, Value: th.Value, ForSeconds: th.For.Seconds(), Severity: th.Severity}
		}
	}
	return out
}
