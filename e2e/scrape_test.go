package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eventforge/eventforge/internal/testenv"
)

// scraped is one scrape of a /metrics endpoint, read by Prometheus' own
// text parser: metric families by name.
type scraped map[string]*dto.MetricFamily

// scrapeMetrics reads the /metrics endpoint of addr (host:port). It is the
// one scraper of the e2e tests; the helpers below read its result.
func scrapeMetrics(addr string) (scraped, error) {
	url := "http://" + addr + "/metrics"
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, nil
}

// mustMetrics scrapes addr, failing the test when it does not answer.
func mustMetrics(t testing.TB, addr string) scraped {
	t.Helper()
	m, err := scrapeMetrics(addr)
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return m
}

// lookup returns the counter, gauge or untyped sample of the family name
// whose labels are exactly labels (name, value pairs); ok is false when the
// scrape has none.
func (s scraped) lookup(name string, labels ...string) (v float64, ok bool) {
	for _, m := range s[name].GetMetric() {
		if hasLabels(m, labels) {
			return sampleValue(m)
		}
	}
	return 0, false
}

// value is lookup's sample, or 0 when there is none: a series not exported
// yet reads as 0.
func (s scraped) value(name string, labels ...string) float64 {
	v, _ := s.lookup(name, labels...)
	return v
}

// first returns the first sample of the family name, whatever its labels;
// ok is false when there is none.
func (s scraped) first(name string) (float64, bool) {
	ms := s[name].GetMetric()
	if len(ms) == 0 {
		return 0, false
	}
	return sampleValue(ms[0])
}

// hasLabels reports whether m's labels are exactly the name, value pairs
// of labels.
func hasLabels(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel())*2 != len(labels) {
		return false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; !ok || v != lp.GetValue() {
			return false
		}
	}
	return true
}

// sampleValue is the value of a counter, gauge or untyped sample.
func sampleValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// scrape reads the first sample of metric (whatever its labels) from the
// /metrics endpoint of addr. ok is false when the endpoint does not answer
// or lacks it.
func scrape(addr, metric string) (float64, bool) {
	m, err := scrapeMetrics(addr)
	if err != nil {
		return 0, false
	}
	return m.first(metric)
}

// waitMetric waits until metric on addr satisfies cond.
func waitMetric(t testing.TB, addr, metric string, timeout time.Duration, what string, cond func(float64) bool) float64 {
	t.Helper()
	var last float64
	testenv.Eventually(t, timeout, what, func() error {
		v, ok := scrape(addr, metric)
		if !ok {
			return fmt.Errorf("%s not scraped from %s", metric, addr)
		}
		last = v
		if !cond(v) {
			return fmt.Errorf("%s = %v", metric, v)
		}
		return nil
	})
	return last
}

// events returns eventforge_consumer_events_total{consumer, result} of a
// scrape.
func events(m scraped, consumer, result string) float64 {
	return m.value("eventforge_consumer_events_total", "consumer", consumer, "result", result)
}
