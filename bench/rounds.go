package bench

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Rounds: the peers phase measures each relay several times, alternating
// the relays (A B C, A B C, …), so that a moment of the machine (a
// checkpoint, another process) lands in one round of every relay rather
// than in the one phase of one relay. A figure is then read as the median
// over the rounds with its spread, and a comparison between two relays as
// the median of their ratios round by round: the two windows of one round
// are minutes apart at most and share the machine's moment.

// byRound is one figure of one relay, by round (1-based).
type byRound map[int]float64

// median is the median of v (the mean of the middle two for an even
// count); NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread is the least and the greatest of v; NaN for none.
func spread(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(v), slices.Max(v)
}

// values are the figures of every round, in round order.
func (b byRound) values() []float64 {
	rounds := sortedRounds(b)
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = b[r]
	}
	return out
}

// median is the median over the rounds.
func (b byRound) median() float64 { return median(b.values()) }

// spread is the least and the greatest over the rounds.
func (b byRound) spread() (lo, hi float64) { return spread(b.values()) }

// ratios are b's figure over ref's, round by round, for every round both
// measured with a positive reference.
func (b byRound) ratios(ref byRound) []float64 {
	var out []float64
	for _, r := range sortedRounds(b) {
		if d, ok := ref[r]; ok && d > 0 {
			out = append(out, b[r]/d)
		}
	}
	return out
}

// ratioTo is the median of the round-by-round ratios to ref; ok is false
// when no round has both.
func (b byRound) ratioTo(ref byRound) (ratio float64, ok bool) {
	r := b.ratios(ref)
	if len(r) == 0 {
		return 0, false
	}
	return median(r), true
}

func sortedRounds(b byRound) []int {
	rounds := make([]int, 0, len(b))
	for r := range b {
		rounds = append(rounds, r)
	}
	sort.Ints(rounds)
	return rounds
}

// inMS is d in milliseconds.
func inMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tailShareBefore splits the tail of a latency between two stages: total
// and before are, order by order, the whole latency and its part up to a
// moment in between (before is clipped to [0, total]). Of the orders whose
// total is at or above the p-th percentile of total, it returns the share
// of their summed latency spent before that moment; 0 when there are no
// orders or their latency sums to zero.
func tailShareBefore(total, before []time.Duration, p float64) float64 {
	if len(total) == 0 || len(total) != len(before) {
		return 0
	}
	sorted := slices.Clone(total)
	slices.Sort(sorted)
	cut := percentile(sorted, p)
	var sumTotal, sumBefore time.Duration
	for i, t := range total {
		if t < cut || t <= 0 {
			continue
		}
		sumTotal += t
		sumBefore += min(max(before[i], 0), t)
	}
	if sumTotal <= 0 {
		return 0
	}
	return float64(sumBefore) / float64(sumTotal)
}
