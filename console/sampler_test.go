package console

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	dto "github.com/prometheus/client_model/go"
)

func f(v float64) *float64 { return &v }

func TestRate(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur *float64
		dt        float64
		want      *float64
	}{
		{"steady", f(10), f(30), 2, f(10)},
		{"restarted process counts from zero", f(100), f(4), 2, f(2)},
		{"no previous", nil, f(4), 2, nil},
		{"source gone", f(4), nil, 2, nil},
		{"no time passed", f(1), f(2), 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rate(tt.prev, tt.cur, tt.dt)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("rate = %v, want %v", deref(got), deref(tt.want))
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestLSNDiff(t *testing.T) {
	s := func(v string) *string { return &v }
	tests := []struct {
		a, b *string
		want *float64
	}{
		{s("0/3000"), s("0/1000"), f(0x2000)},
		{s("1/0"), s("0/FFFFFF00"), f(0x100)},
		{s("0/1000"), s("0/3000"), f(0)},
		{s("0/1000"), nil, nil},
		{s("bogus"), s("0/1"), nil},
	}
	for _, tt := range tests {
		got := lsnDiff(tt.a, tt.b)
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Fatalf("lsnDiff(%v, %v) = %v, want %v", tt.a, tt.b, deref(got), deref(tt.want))
		}
	}
}

func TestMetricsFromText(t *testing.T) {
	cdc := `# TYPE eventforge_cdc_replication_lag_seconds gauge
eventforge_cdc_replication_lag_seconds 0.25
# TYPE eventforge_cdc_publish_errors_total counter
eventforge_cdc_publish_errors_total 3
`
	consumerA := `# TYPE eventforge_consumer_retries_total counter
eventforge_consumer_retries_total{consumer="fulfillment"} 5
eventforge_consumer_retries_total{consumer="ledger"} 2
`
	a, err := parseMetrics(strings.NewReader(cdc))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseMetrics(strings.NewReader(consumerA))
	if err != nil {
		t.Fatal(err)
	}
	fams := []map[string]*dto.MetricFamily{a, b}
	if got := gaugeMax(fams, "eventforge_cdc_replication_lag_seconds"); got == nil || *got != 0.25 {
		t.Fatalf("replication lag %v", deref(got))
	}
	if got := counterSum(fams, "eventforge_consumer_retries_total"); got == nil || *got != 7 {
		t.Fatalf("retries %v", deref(got))
	}
	if got := counterSum(fams, "eventforge_cdc_publish_errors_total"); got == nil || *got != 3 {
		t.Fatalf("publish errors %v", deref(got))
	}
	if got := gaugeMax(fams, "eventforge_cdc_oldest_unpublished_age_seconds"); got != nil {
		t.Fatalf("absent metric gave %v", *got)
	}
}

func TestHistoryAndCommitIndex(t *testing.T) {
	h := newHistory(3)
	for i := int64(1); i <= 5; i++ {
		h.add(Sample{At: i})
	}
	if got := h.since(0); len(got) != 3 || got[0].At != 3 {
		t.Fatalf("history keeps %v, want the last 3", got)
	}
	if got := h.since(4); len(got) != 1 || got[0].At != 5 {
		t.Fatalf("since(4) = %v", got)
	}

	ci := newCommitIndex(2)
	calls := 0
	first := func(lsn pglogrepl.LSN) func() (pglogrepl.LSN, error) {
		return func() (pglogrepl.LSN, error) { calls++; return lsn, nil }
	}
	a, _ := ci.lookup("a", first(10))
	a2, _ := ci.lookup("a", first(99))
	if a != 10 || a2 != 10 || calls != 1 {
		t.Fatalf("the first sighting must stick: %v %v (%d calls)", a, a2, calls)
	}
	_, _ = ci.lookup("b", first(20))
	_, _ = ci.lookup("c", first(30))
	if again, _ := ci.lookup("a", first(40)); again != 40 {
		t.Fatalf("the oldest order was not evicted: %v", again)
	}
}
