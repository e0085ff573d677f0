package bench

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// printGrowthSection prints the growth phase: each drain's rate and the
// reader's peak RSS, then the apply rate of each partitions × workers run.
func (res *Results) printGrowthSection(w io.Writer) {
	g := res.Growth
	if g == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("\t")
	p("9. Growth with the work\t")
	for _, d := range g.Drains {
		p("   CDC drain of %d events\t%.0f events/s in %.1f s, reader peak RSS %s", d.Events, d.EventsPerSec, d.Seconds, mib(d.PeakRSSBytes))
	}
	for _, a := range g.Apply {
		p("   consumer apply, %d partitions × %d workers\t%.0f events/s (%d events, %.1f s, batching on)", a.Partitions, a.Workers, a.EventsPerSec, a.Events, a.Seconds)
	}
	_ = tw.Flush()
}

// writeGrowthChart draws the growth phase as one figure of three panels
// (SVG and PNG): drain rate and reader peak RSS against the backlog (log
// axis), and the apply rate against the workers, one line per partition
// count.
func (g *growthResult) writeGrowthChart(prefix string) ([]string, error) {
	rate, rss := plot.New(), plot.New()
	rate.Title.Text, rss.Title.Text = "CDC drain rate (events/s)", "Reader peak RSS (MiB)"
	var ticks []plot.Tick
	var rates, rssPts plotter.XYs
	for _, d := range g.Drains {
		ticks = append(ticks, plot.Tick{Value: float64(d.Events), Label: strconv.Itoa(d.Events)})
		rates = append(rates, plotter.XY{X: float64(d.Events), Y: d.EventsPerSec})
		rssPts = append(rssPts, plotter.XY{X: float64(d.Events), Y: float64(d.PeakRSSBytes) / (1 << 20)})
	}
	for _, pl := range []*plot.Plot{rate, rss} {
		pl.X.Label.Text = "backlog (events, log)"
		pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(ticks)
		if len(ticks) > 0 {
			pl.X.Min, pl.X.Max = ticks[0].Value/2, ticks[len(ticks)-1].Value*2
		}
		pl.Y.Min, pl.Y.Tick.Marker = 0, plainTicks{}
	}
	if err := plotutil.AddLinePoints(rate, rates); err != nil {
		return nil, err
	}
	if err := plotutil.AddLinePoints(rss, rssPts); err != nil {
		return nil, err
	}
	rate.Y.Max, rss.Y.Max = rate.Y.Max*1.2, rss.Y.Max*1.2

	apply := plot.New()
	apply.Title.Text = "Consumer apply rate (events/s, batching on)"
	apply.X.Label.Text = "workers"
	byParts := map[int]plotter.XYs{}
	var parts []int
	var workerTicks []plot.Tick
	seen := map[int]bool{}
	for _, a := range g.Apply {
		if _, ok := byParts[a.Partitions]; !ok {
			parts = append(parts, a.Partitions)
		}
		byParts[a.Partitions] = append(byParts[a.Partitions], plotter.XY{X: float64(a.Workers), Y: a.EventsPerSec})
		if !seen[a.Workers] {
			seen[a.Workers] = true
			workerTicks = append(workerTicks, plot.Tick{Value: float64(a.Workers), Label: strconv.Itoa(a.Workers)})
		}
	}
	apply.X.Scale, apply.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks(workerTicks)
	if len(workerTicks) > 0 {
		lo, hi := math.Inf(1), 0.0
		for _, t := range workerTicks {
			lo, hi = math.Min(lo, t.Value), math.Max(hi, t.Value)
		}
		apply.X.Min, apply.X.Max = lo/1.5, hi*1.5
	}
	var lines []any
	for _, n := range parts {
		lines = append(lines, fmt.Sprintf("%d partitions", n), byParts[n])
	}
	if err := plotutil.AddLinePoints(apply, lines...); err != nil {
		return nil, err
	}
	apply.Y.Min, apply.Y.Tick.Marker = 0, plainTicks{}
	apply.Y.Max *= 1.4 // the legend's band, above the lines
	apply.Legend.Top, apply.Legend.Left = true, true

	return writePanels(prefix+"-growth", [][]*plot.Plot{{rate, rss, apply}}, 13*vg.Inch, 4*vg.Inch)
}
