package console

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/deploy/prometheus/rules"
)

// TestChartAlertsAreShipped: every alert a chart draws is a threshold of
// the shipped rules on the metric the chart's figure mirrors, and the
// figure is a field of Sample; the overview serves each threshold as the
// rules file has it.
func TestChartAlertsAreShipped(t *testing.T) {
	ths, err := rules.Thresholds()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	st := reflect.TypeFor[Sample]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		fields[name] = true
	}
	served := figureAlerts()
	for _, ca := range chartAlerts {
		th, ok := ths[ca.Alert]
		switch {
		case !ok:
			t.Errorf("%s: no such threshold alert in deploy/prometheus/rules", ca.Alert)
		case th.Metric != ca.Metric:
			t.Errorf("%s compares %s, but the chart of %s shows %s", ca.Alert, th.Metric, ca.Figure, ca.Metric)
		case served[ca.Figure].Value != th.Value || served[ca.Figure].Alert != ca.Alert:
			t.Errorf("%s: the overview serves %+v, the rules say %v", ca.Figure, served[ca.Figure], th.Value)
		}
		if !fields[ca.Figure] {
			t.Errorf("chart alert on %q, which is no Sample field", ca.Figure)
		}
	}
	b, err := json.Marshal(served)
	if err != nil || !strings.Contains(string(b), `"slot_lag_bytes":{"alert":"EventForgeSlotLagHigh"`) {
		t.Errorf("overview alerts JSON %s, %v", b, err)
	}
}
