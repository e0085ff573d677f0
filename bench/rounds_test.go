package bench

import (
	"math"
	"testing"
	"time"
)

func TestMedianAndSpread(t *testing.T) {
	for _, tt := range []struct {
		name   string
		v      []float64
		median float64
		lo, hi float64
	}{
		{"one", []float64{7}, 7, 7, 7},
		{"odd, unsorted", []float64{30, 9, 12}, 12, 9, 30},
		{"even: the mean of the middle two", []float64{4, 1, 3, 2}, 2.5, 1, 4},
		{"equal", []float64{5, 5, 5}, 5, 5, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64{}, tt.v...)
			if got := median(tt.v); got != tt.median {
				t.Errorf("median(%v) = %v, want %v", tt.v, got, tt.median)
			}
			if lo, hi := spread(tt.v); lo != tt.lo || hi != tt.hi {
				t.Errorf("spread(%v) = %v–%v, want %v–%v", tt.v, lo, hi, tt.lo, tt.hi)
			}
			for i := range in {
				if in[i] != tt.v[i] {
					t.Fatalf("median or spread reordered its input: %v, was %v", tt.v, in)
				}
			}
		})
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is a number")
	}
	if lo, hi := spread(nil); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Error("spread of nothing is a number")
	}
}

// A comparison is the median of the round-by-round ratios, not the ratio of
// the medians: a round whose reference was slow counts as one round.
func TestRatioIsTheMedianOfTheRoundsRatios(t *testing.T) {
	relay := byRound{1: 9, 2: 30, 3: 12}
	ref := byRound{1: 10, 2: 15, 3: 24}
	if got := relay.ratios(ref); len(got) != 3 || got[0] != 0.9 || got[1] != 2 || got[2] != 0.5 {
		t.Errorf("ratios = %v, want [0.9 2 0.5] in round order", got)
	}
	r, ok := relay.ratioTo(ref)
	if !ok || r != 0.9 {
		t.Errorf("ratioTo = %v, %v; want 0.9 (the ratio of the medians would be %v)", r, ok, relay.median()/ref.median())
	}
	// Only rounds both measured, with a positive reference, count.
	partial := byRound{1: 9, 2: 30, 4: 8}
	if got := partial.ratios(byRound{1: 10, 2: 0, 3: 1}); len(got) != 1 || got[0] != 0.9 {
		t.Errorf("ratios over rounds 1 (both), 2 (zero reference), 3 and 4 (one each) = %v, want [0.9]", got)
	}
	if _, ok := relay.ratioTo(byRound{}); ok {
		t.Error("a ratio to a relay without rounds")
	}
	if lo, hi := relay.spread(); relay.median() != 12 || lo != 9 || hi != 30 {
		t.Errorf("byRound median %v, spread %v–%v; want 12, 9–30", relay.median(), lo, hi)
	}
	if got := (byRound{3: 1, 1: 2, 2: 3}).values(); got[0] != 2 || got[1] != 3 || got[2] != 1 {
		t.Errorf("values = %v, want round order [2 3 1]", got)
	}
}

func TestTailShareBefore(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	// 100 orders: 98 of 10 ms, 2 of 100 ms; the p99 is 100 ms, so the tail
	// is those two.
	total, before := make([]time.Duration, 100), make([]time.Duration, 100)
	for i := range total {
		total[i], before[i] = 10*time.Millisecond, 9*time.Millisecond
	}
	total[17], before[17] = 100*time.Millisecond, 80*time.Millisecond
	total[63], before[63] = 100*time.Millisecond, 40*time.Millisecond
	if got := tailShareBefore(total, before, 0.99); math.Abs(got-0.6) > 1e-9 {
		t.Errorf("share = %v, want 0.6 ((80+40)/(100+100))", got)
	}
	for _, tt := range []struct {
		name          string
		total, before []time.Duration
		want          float64
	}{
		{"before clipped to the total", ms(10), ms(15), 1},
		{"a negative before counts 0", ms(10), ms(-2), 0},
		{"no orders", nil, nil, 0},
		{"unpaired", ms(10, 20), ms(5), 0},
		{"zero latency", ms(0, 0), ms(0, 0), 0},
	} {
		if got := tailShareBefore(tt.total, tt.before, 0.99); got != tt.want {
			t.Errorf("%s: share = %v, want %v", tt.name, got, tt.want)
		}
	}
	// The order of the slices is kept: latencies sorts afterwards.
	tot, bef := ms(50, 10), ms(5, 9)
	_ = tailShareBefore(tot, bef, 0.5)
	if tot[0] != 50*time.Millisecond || bef[0] != 5*time.Millisecond {
		t.Errorf("tailShareBefore reordered its input: %v %v", tot, bef)
	}
}
