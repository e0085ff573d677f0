package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// peerColumns are the relays the peers table always shows, in this order; a
// relay the run did not measure shows as such.
var peerColumns = []string{eventforgeName, exactlyOnceName, pollingName, debeziumName}

// columns returns the figures of each column: those of peerColumns, then any
// other relay measured; nil where a relay was not measured.
func (p *peersResult) columns() ([]string, []*relayFigures) {
	names := slices.Clone(peerColumns)
	for _, f := range p.Relays {
		if !slices.Contains(names, f.Relay) {
			names = append(names, f.Relay)
		}
	}
	figs := make([]*relayFigures, len(names))
	for i, n := range names {
		figs[i] = p.figures(n)
	}
	return names, figs
}

// figures are the figures of relay, nil when it was not measured.
func (p *peersResult) figures(relay string) *relayFigures {
	for i := range p.Relays {
		if p.Relays[i].Relay == relay {
			return &p.Relays[i]
		}
	}
	return nil
}

// drainRounds is one drain figure of f, by round.
func (f *relayFigures) drainRounds(get func(relayDrain) float64) byRound {
	b := byRound{}
	for _, d := range f.Drains {
		b[d.Round] = get(d)
	}
	return b
}

// latencyRounds is one figure of f's windows at rate, by round.
func (f *relayFigures) latencyRounds(rate int, get func(relayLatency) float64) byRound {
	b := byRound{}
	for _, l := range f.Latency {
		if l.OfferedPerSec == rate {
			b[l.Round] = get(l)
		}
	}
	return b
}

// recvlogicalRounds is pg_recvlogical's drain rate, by round.
func (p *peersResult) recvlogicalRounds() byRound {
	b := byRound{}
	for _, rl := range p.Recvlogical {
		b[rl.Round] = rl.EventsPerSec
	}
	return b
}

// rates returns every offered load measured, in the order first seen.
func (p *peersResult) rates() []int {
	var out []int
	for _, f := range p.Relays {
		for _, l := range f.Latency {
			if !slices.Contains(out, l.OfferedPerSec) {
				out = append(out, l.OfferedPerSec)
			}
		}
	}
	return out
}

// peersTable collects rows of a label and a cell per column, and lines of
// their own (headings), then writes them aligned: every column as wide as
// its widest cell, headings not counted.
type peersTable struct {
	figs  []*relayFigures
	lines [][]string // a heading is a line of one cell
}

// row adds label and, per column, cell of its figures ("not measured"
// without figures, "-" for a cell without a value).
func (t *peersTable) row(label string, cell func(f *relayFigures) string) {
	cells := []string{label}
	for _, f := range t.figs {
		c := "not measured"
		if f != nil {
			if c = cell(f); c == "" {
				c = "-"
			}
		}
		cells = append(cells, c)
	}
	t.lines = append(t.lines, cells)
}

// heading adds label on a line of its own.
func (t *peersTable) heading(label string) { t.lines = append(t.lines, []string{label}) }

// write writes the lines, the cells of rows padded to their column's width
// and two spaces apart.
func (t *peersTable) write(w io.Writer) {
	var widths []int
	for _, l := range t.lines {
		if len(l) == 1 {
			continue
		}
		for i, c := range l {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, l := range t.lines {
		var b strings.Builder
		for i, c := range l {
			b.WriteString(c)
			if len(l) > 1 && i < len(l)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// Cell formats: each returns "" for a figure no round has.

func one(b byRound, format string) string {
	if len(b) == 0 {
		return ""
	}
	return fmt.Sprintf(format, b.median())
}

func oneSpread(b byRound, format string) string {
	if len(b) == 0 {
		return ""
	}
	lo, hi := b.spread()
	return fmt.Sprintf(format+"–"+format, lo, hi)
}

func percentSpread(b byRound) string {
	if s := oneSpread(b, "%.0f"); s != "" {
		return s + "%"
	}
	return ""
}

func ratio(b, ref byRound) string {
	if r, ok := b.ratioTo(ref); ok {
		return fmt.Sprintf("%.2f×", r)
	}
	return ""
}

// pair joins two cells with " / ", or is "" when either is.
func pair(a, b string) string {
	if a == "" || b == "" {
		return ""
	}
	return a + " / " + b
}

// printPeers prints the relays side by side: one column per relay, one row
// per figure, each the median over the rounds unless it says otherwise.
func (p *peersResult) printPeers(w io.Writer) {
	names, figs := p.columns()
	t := &peersTable{figs: figs}
	t.lines = append(t.lines, append([]string{"relay"}, names...))
	p.printDrainRows(t)
	for _, rate := range p.rates() {
		p.printRateRows(t, rate)
	}
	t.write(w)
}

// debezium is Debezium's figures, empty when it was not measured.
func (p *peersResult) debezium() *relayFigures {
	if f := p.figures(debeziumName); f != nil {
		return f
	}
	return &relayFigures{}
}

func (p *peersResult) printDrainRows(t *peersTable) {
	drain := func(get func(relayDrain) float64) func(f *relayFigures) byRound {
		return func(f *relayFigures) byRound { return f.drainRounds(get) }
	}
	rate := drain(func(d relayDrain) float64 { return d.EventsPerSec })
	dbz, recv := rate(p.debezium()), p.recvlogicalRounds()
	t.row(fmt.Sprintf("drain of %d events, events/s, median of %d rounds", p.Backlog, p.Rounds), func(f *relayFigures) string { return one(rate(f), "%.0f") })
	t.row("  min–max over the rounds", func(f *relayFigures) string { return oneSpread(rate(f), "%.0f") })
	if len(recv) > 0 {
		lo, hi := recv.spread()
		t.heading(fmt.Sprintf("  pg_recvlogical on the same backlog: %.0f events/s, median of %d rounds (%.0f–%.0f)", recv.median(), len(recv), lo, hi))
	}
	t.row("  × pg_recvlogical, median of the rounds' ratios", func(f *relayFigures) string { return ratio(rate(f), recv) })
	t.row("  × Debezium, median of the rounds' ratios", func(f *relayFigures) string { return ratio(rate(f), dbz) })
	for _, r := range []struct {
		label  string
		get    func(relayDrain) float64
		format func(float64) string
	}{
		{"  first record after start, s", func(d relayDrain) float64 { return d.FirstRecordSecs }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{"  relay peak RSS", func(d relayDrain) float64 { return float64(d.PeakRSSBytes) }, func(v float64) string { return mib(int64(v)) }},
		{"  relay CPU s per 1,000 events", func(d relayDrain) float64 { return d.RelayCPUPer1000 }, func(v float64) string { return fmt.Sprintf("%.3f", v) }},
		{"  PostgreSQL CPU s per 1,000 events", func(d relayDrain) float64 { return d.PostgresCPUPer1000 }, func(v float64) string { return fmt.Sprintf("%.3f", v) }},
		{"  WAL per 1,000 events", func(d relayDrain) float64 { return d.WALBytesPer1000 }, walSize},
	} {
		t.row(r.label, func(f *relayFigures) string {
			b := f.drainRounds(r.get)
			if len(b) == 0 {
				return ""
			}
			return r.format(b.median())
		})
	}
}

// latencyRows prints a latency's p50 / p99 medians, their spreads and their
// ratios to Debezium's.
func (p *peersResult) latencyRows(t *peersTable, rate int, label string, get func(relayLatency) latency) {
	p50 := func(f *relayFigures) byRound {
		return f.latencyRounds(rate, func(l relayLatency) float64 { return inMS(get(l).P50) })
	}
	p99 := func(f *relayFigures) byRound {
		return f.latencyRounds(rate, func(l relayLatency) float64 { return inMS(get(l).P99) })
	}
	dbz := p.debezium()
	t.row(label, func(f *relayFigures) string { return pair(one(p50(f), "%.1f"), one(p99(f), "%.1f ms")) })
	t.row("    min–max over the rounds", func(f *relayFigures) string { return pair(oneSpread(p50(f), "%.1f"), oneSpread(p99(f), "%.1f")) })
	t.row("    × Debezium, median of the rounds' ratios", func(f *relayFigures) string {
		return pair(ratio(p50(f), p50(dbz)), ratio(p99(f), p99(dbz)))
	})
}

func (p *peersResult) printRateRows(t *peersTable, rate int) {
	t.heading(fmt.Sprintf("at %d orders/s (warm-up: %d orders, then %.0f s at the rate; %.0f s measured), medians of %d rounds",
		rate, p.WarmupOrders, p.WarmupSecs, p.WindowSecs, p.Rounds))
	p.latencyRows(t, rate, "  commit → Kafka append, p50 / p99", func(l relayLatency) latency { return l.CommitToAppend })
	p.latencyRows(t, rate, "  commit → read by a read_committed reader, p50 / p99", func(l relayLatency) latency { return l.CommitToRead })
	sent := func(q func(latency) float64) func(l relayLatency) float64 {
		return func(l relayLatency) float64 { return q(l.CommitToSent) }
	}
	t.row("  commit → walsender sent (PostgreSQL's part), p50 / p99", func(f *relayFigures) string {
		return pair(one(f.latencyRounds(rate, sent(func(l latency) float64 { return inMS(l.P50) })), "%.1f"),
			one(f.latencyRounds(rate, sent(func(l latency) float64 { return inMS(l.P99) })), "%.1f ms"))
	})
	share := func(f *relayFigures, read bool) byRound {
		return f.latencyRounds(rate, func(l relayLatency) float64 {
			if read {
				return 100 * l.ReadTailBeforeSent
			}
			return 100 * l.AppendTailBeforeSent
		})
	}
	t.row("  p99 tail before the walsender sent, of append / of read", func(f *relayFigures) string {
		return pair(one(share(f, false), "%.0f%%"), one(share(f, true), "%.0f%%"))
	})
	t.row("    min–max over the rounds", func(f *relayFigures) string {
		return pair(percentSpread(share(f, false)), percentSpread(share(f, true)))
	})
	cpu := func(f *relayFigures) byRound {
		return f.latencyRounds(rate, func(l relayLatency) float64 { return l.RelayCPUPer1000 })
	}
	t.row("  relay CPU s per 1,000 events", func(f *relayFigures) string { return one(cpu(f), "%.3f") })
	t.row("    × Debezium, median of the rounds' ratios", func(f *relayFigures) string { return ratio(cpu(f), cpu(p.debezium())) })
	t.row("  achieved orders/s, orders measured", func(f *relayFigures) string {
		achieved := f.latencyRounds(rate, func(l relayLatency) float64 { return l.AchievedPerSec })
		orders := f.latencyRounds(rate, func(l relayLatency) float64 { return float64(l.Orders) })
		return pair(one(achieved, "%.0f"), one(orders, "%.0f"))
	})
	t.row("  cores used by other processes, median / max", func(f *relayFigures) string {
		other := f.latencyRounds(rate, func(l relayLatency) float64 { return l.OtherCores })
		if len(other) == 0 {
			return ""
		}
		_, hi := other.spread()
		return fmt.Sprintf("%.2f / %.2f", other.median(), hi)
	})
}

// printPeersSection prints the peers table under its heading, and what the
// run left unmeasured.
func (res *Results) printPeersSection(w io.Writer) {
	fmt.Fprintf(w, "\n8. Relays side by side, in rounds (same PostgreSQL, Kafka and backlog; docs/bench.md says what bounds each)\n")
	if res.Peers == nil {
		fmt.Fprintln(w, "   not measured")
		return
	}
	res.Peers.printPeers(w)
	names, figs := res.Peers.columns()
	for i, f := range figs {
		if f == nil {
			why := res.Peers.Unavailable[names[i]]
			switch {
			case slices.Contains(res.Peers.Skipped, names[i]):
				why = "left out by --peer-relays"
			case why == "":
				why = "the peers phase did not run it"
			}
			fmt.Fprintf(w, "   %s: not measured — %s\n", names[i], why)
		}
	}
	fmt.Fprintf(w, "   cores used of %d, by group, during each measurement:\n", res.CPUs)
	for _, pc := range res.CPU {
		if strings.HasPrefix(pc.Phase, "peers: ") {
			fmt.Fprintf(w, "   %-48s %s\n", strings.TrimPrefix(pc.Phase, "peers: "), pc)
		}
	}
}

// walSize prints a WAL volume in KiB, or in bytes below 10 KiB, where the
// CDC relays' figures are (a hundred-odd bytes per 1,000 events).
func walSize(bytes float64) string {
	if bytes < 10<<10 {
		return fmt.Sprintf("%.0f bytes", bytes)
	}
	return fmt.Sprintf("%.0f KiB", bytes/1024)
}

// finite is v, or 0 when it is NaN or infinite (nothing to plot).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// missing names every figure the peers phase should have and lacks: each
// column measured unless --peer-relays left it out, pg_recvlogical's drain
// in every round when a relay streams from a slot, and every relay's
// drain and latency window in every round at every rate.
func (p *peersResult) missing() []string {
	var out []string
	names, figs := p.columns()
	streams := false
	for i, f := range figs {
		skipped := slices.Contains(p.Skipped, names[i])
		if f == nil && !skipped {
			out = append(out, names[i]+" (not measured)")
		}
		streams = streams || (!skipped && names[i] != pollingName)
	}
	if streams && len(p.Recvlogical) < p.Rounds {
		out = append(out, fmt.Sprintf("pg_recvlogical reference drain of the peers (%d of %d rounds)", len(p.Recvlogical), p.Rounds))
	}
	for _, f := range p.Relays {
		complete := len(f.Drains) == p.Rounds
		for _, d := range f.Drains {
			complete = complete && d.EventsPerSec > 0 && d.PeakRSSBytes > 0 && d.RelayCPUPer1000 > 0
		}
		if !complete {
			out = append(out, f.Relay+" drain figures")
		}
		for _, rate := range p.Rates {
			lats := f.latencyRounds(rate, func(l relayLatency) float64 {
				if l.Orders > 0 && l.CommitToAppend.P99 > 0 && l.CommitToRead.P99 > 0 && l.CommitToSent.P99 > 0 {
					return 1
				}
				return 0
			})
			if len(lats) < p.Rounds || slices.Contains(lats.values(), 0) {
				out = append(out, fmt.Sprintf("%s latency at %d/s", f.Relay, rate))
			}
		}
	}
	return out
}
