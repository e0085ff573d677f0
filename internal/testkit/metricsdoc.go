package testkit

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// MetricDoc is one row of the metrics table of docs/metrics.md.
type MetricDoc struct {
	// Kind is counter, gauge or histogram.
	Kind string
	// Labels are the metric's label names, sorted (none for "—" or blank).
	Labels []string
	// Component is the component that exports it (api, cdc, consumer).
	Component string
}

// metricDocRow matches a row: | `name` | kind | `label`, `label` | component |
var metricDocRow = regexp.MustCompile("^\\| `(eventforge_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\| ([a-z]+) \\|")

// MetricsDoc parses the metrics table of the docs/metrics.md at path into
// its rows by metric name. A file without rows fails the test.
func MetricsDoc(t testing.TB, path string) map[string]MetricDoc {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]MetricDoc{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := metricDocRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		out[m[1]] = MetricDoc{Kind: m[2], Labels: labels, Component: m[4]}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no metric rows found", path)
	}
	return out
}
