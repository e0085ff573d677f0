package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCheckNamesMissingFigures(t *testing.T) {
	var empty Results
	all := map[string]bool{"postgres": true, "api": true, "drain": true, "apply": true, "e2e": true}
	err := empty.check(all)
	if err == nil {
		t.Fatal("empty results passed the check")
	}
	for _, want := range []string{"PostgreSQL limit", "API gRPC", "api CPU per order", "CDC drain", "consumer apply", "end-to-end phases", "cdc peak RSS", "CPU by phase"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q does not name %q", err, want)
		}
	}
	// A run of some phases is checked for their figures only.
	err = empty.check(map[string]bool{"drain": true})
	if err == nil || !strings.Contains(err.Error(), "CDC drain") || strings.Contains(err.Error(), "API gRPC") {
		t.Errorf("drain-only check: %v; want the drain figures named, and only them", err)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}}
	for _, tt := range tests {
		if got := percentile(d, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestAPICPUPerOrderIsItsCoresOverTheRate(t *testing.T) {
	res := Results{Phases: []string{"api"}, CPU: []phaseCPU{
		{Phase: "api gRPC", Cores: map[string]float64{"api": 0.9, "postgres": 0.5}},
		{Phase: "api REST", Cores: map[string]float64{"api": 0.6}},
		{Phase: "api gRPC", Cores: map[string]float64{"api": 0.45}}, // recorded last: this one counts
	}}
	if got := res.cpuPerOrder("api gRPC", "api", 3000); math.Abs(got-150) > 1e-9 {
		t.Errorf("gRPC: %v µs per order, want 150", got)
	}
	if got := res.cpuPerOrder("api REST", "api", 2000); math.Abs(got-300) > 1e-9 {
		t.Errorf("REST: %v µs per order, want 300", got)
	}
	for _, c := range []struct {
		phase  string
		perSec float64
	}{{"api gRPC", 0}, {"cdc drain", 3000}} {
		if got := res.cpuPerOrder(c.phase, "api", c.perSec); got != 0 {
			t.Errorf("%s at %v/s: %v, want 0", c.phase, c.perSec, got)
		}
	}

	res.APIGRPCCPU, res.APIRESTCPU = 150, 300
	var out bytes.Buffer
	res.printTable(&out)
	for _, want := range []string{"api 150 µs CPU per order (target ≤ 100)", "api 300 µs CPU per order\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// Item 6 reports each component's CPU without a target; the relay's is
// read against the relays doing the same job in the same run.
func TestComponentsHaveNoTargetAndTheRelayMeetsItsPeers(t *testing.T) {
	res := Results{Phases: []string{"postgres", "api", "drain", "apply", "e2e"}, Components: map[string]componentUsage{
		"api": {PeakRSSBytes: 90 << 20, CPUSecondsPer1000: 0.23}, "cdc": {PeakRSSBytes: 60 << 20, CPUSecondsPer1000: 0.20},
		"consumer": {PeakRSSBytes: 100 << 20, CPUSecondsPer1000: 0.16}}}
	var out bytes.Buffer
	res.printTable(&out)
	text := out.String()
	for _, want := range []string{"api  ", "peak RSS 90.0 MiB, 0.23 CPU s per 1,000 orders", "cdc against its peers", "not measured in this run"} {
		if !strings.Contains(text, want) {
			t.Errorf("item 6 lacks %q:\n%s", want, text)
		}
	}
	for _, gone := range []string{"0.35", "api + cdc + consumer"} {
		if strings.Contains(text, gone) {
			t.Errorf("item 6 still has %q:\n%s", gone, text)
		}
	}
	// With the peers phase in the run: the reader's CPU per 1,000 events
	// against Debezium's (0.2, 0.3, 0.4 round by round) and the polling
	// relay's (0.4, 0.6, 0.8) at each rate.
	res.Phases = append(res.Phases, "peers")
	res.Peers = samplePeers()
	out.Reset()
	res.printTable(&out)
	want := "relay CPU s per 1,000 events, medians of 3 rounds: EventForge 0.030, Debezium 0.100 (EventForge 0.30× of it), polling 0.050 (EventForge 0.60× of it)"
	if !strings.Contains(out.String(), "cdc against its peers at 500 orders/s") || !strings.Contains(out.String(), want) {
		t.Errorf("item 6 lacks the relay against its peers at 500/s (%q):\n%s", want, out.String())
	}
}
