// Package rules embeds EventForge's Prometheus alert rules
// (eventforge.rules.yml beside it, the file Prometheus loads) so that
// what shows the same figures — the console's charts — draws the alerts'
// thresholds from the rules themselves, never from a second copy of the
// numbers.
package rules

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

//go:embed eventforge.rules.yml
var file []byte

// Threshold is an alert of the form `<aggregation> (<metric>) > <number>`:
// it fires when the metric stays above Value for For.
type Threshold struct {
	Alert    string
	Metric   string
	Value    float64
	For      time.Duration
	Severity string
}

// thresholdExpr matches `max by (slot) (eventforge_x) > 512 * 1024`: an
// aggregation of one metric compared with a constant.
var thresholdExpr = regexp.MustCompile(`^\s*[a-z]+(?:\s+by\s*\([a-z_, ]*\))?\s*\(\s*(eventforge_[a-z0-9_]+)\s*\)\s*>\s*([0-9.eE+*\s]+)$`)

// Thresholds returns every alert of the embedded rules that compares one
// metric with a constant, by alert name.
func Thresholds() (map[string]Threshold, error) {
	return parse(file)
}

func parse(src []byte) (map[string]Threshold, error) {
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				For    string            `yaml:"for"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(src, &rf); err != nil {
		return nil, fmt.Errorf("parsing the alert rules: %w", err)
	}
	out := map[string]Threshold{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			m := thresholdExpr.FindStringSubmatch(r.Expr)
			if r.Alert == "" || m == nil {
				continue
			}
			v, err := product(m[2])
			if err != nil {
				return nil, fmt.Errorf("alert %s: %w", r.Alert, err)
			}
			var d time.Duration
			if r.For != "" {
				if d, err = time.ParseDuration(r.For); err != nil {
					return nil, fmt.Errorf("alert %s: for %q: %w", r.Alert, r.For, err)
				}
			}
			out[r.Alert] = Threshold{Alert: r.Alert, Metric: m[1], Value: v, For: d, Severity: r.Labels["severity"]}
		}
	}
	return out, nil
}

// product evaluates a product of numbers, e.g. "8 * 1024 * 1024".
func product(s string) (float64, error) {
	v := 1.0
	for _, f := range strings.Split(s, "*") {
		n, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return 0, fmt.Errorf("threshold %q: %w", strings.TrimSpace(s), err)
		}
		v *= n
	}
	return v, nil
}
