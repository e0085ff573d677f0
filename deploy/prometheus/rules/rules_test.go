package rules

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	src := []byte(`
groups:
  - name: g
    rules:
      - alert: Bytes
        expr: max by (slot) (eventforge_cdc_slot_lag_bytes) > 512 * 1024 * 1024
        for: 10m
        labels: {severity: warning}
      - alert: Seconds
        expr: max by (slot) (eventforge_cdc_replication_lag_seconds) > 60
        for: 5m
        labels: {severity: critical}
      - alert: Fraction
        expr: sum(eventforge_x_total) > 0.05
      - alert: Rate
        expr: sum by (slot) (rate(eventforge_cdc_publish_errors_total[5m])) > 0.05
      - alert: Equality
        expr: max by (slot) (eventforge_cdc_slot_gap) == 1
      - record: not_an_alert
        expr: max by (slot) (eventforge_y) > 1
`)
	got, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Threshold{
		"Bytes":    {Alert: "Bytes", Metric: "eventforge_cdc_slot_lag_bytes", Value: 512 << 20, For: 10 * time.Minute, Severity: "warning"},
		"Seconds":  {Alert: "Seconds", Metric: "eventforge_cdc_replication_lag_seconds", Value: 60, For: 5 * time.Minute, Severity: "critical"},
		"Fraction": {Alert: "Fraction", Metric: "eventforge_x_total", Value: 0.05},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d thresholds %v, want %d", len(got), got, len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
}

// TestThresholds: the embedded rules parse, and the alerts on the slot's
// bytes are among the thresholds.
func TestThresholds(t *testing.T) {
	got, err := Thresholds()
	if err != nil {
		t.Fatal(err)
	}
	for alert, metric := range map[string]string{
		"EventForgeSlotLagHigh":     "eventforge_cdc_slot_lag_bytes",
		"EventForgeRetainedWALHigh": "eventforge_cdc_retained_wal_bytes",
	} {
		if th, ok := got[alert]; !ok || th.Metric != metric || th.Value <= 0 || th.For <= 0 {
			t.Errorf("%s: %+v (found %v), want a threshold on %s", alert, th, ok, metric)
		}
	}
}

func TestProductRefusesOtherArithmetic(t *testing.T) {
	for _, s := range []string{"1 + 2", "x", ""} {
		if _, err := product(s); err == nil {
			t.Errorf("product(%q) accepted", s)
		}
	}
}
