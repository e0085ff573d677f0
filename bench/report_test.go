package bench

import (
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
	for _, want := range []string{"PostgreSQL limit", "API gRPC", "CDC drain", "consumer apply", "end-to-end phases", "cdc peak RSS", "CPU by phase"} {
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
