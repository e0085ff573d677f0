package bench

import (
	"strings"
	"testing"
	"time"
)

func TestCheckNamesMissingFigures(t *testing.T) {
	var empty Results
	err := empty.check()
	if err == nil {
		t.Fatal("empty results passed the check")
	}
	for _, want := range []string{"PostgreSQL limit", "API gRPC", "CDC drain", "consumer apply", "end-to-end phases", "cdc peak RSS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q does not name %q", err, want)
		}
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
