package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// peerColumns are the relays the peers table always shows, in this order; a
// relay the run did not measure shows as such.
var peerColumns = []string{"EventForge", "polling", "Debezium"}

// relays returns the figures of each column: those of peerColumns, then any
// other relay measured; nil where a relay was not measured.
func (p *peersResult) columns() ([]string, []*relayFigures) {
	names := append([]string{}, peerColumns...)
	for _, f := range p.Relays {
		if !contains(names, f.Relay) {
			names = append(names, f.Relay)
		}
	}
	figs := make([]*relayFigures, len(names))
	for i, n := range names {
		for j := range p.Relays {
			if p.Relays[j].Relay == n {
				figs[i] = &p.Relays[j]
			}
		}
	}
	return names, figs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// printPeers prints the relays side by side: one column per relay, one row
// per figure.
func (p *peersResult) printPeers(w io.Writer) {
	names, figs := p.columns()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, cell func(f *relayFigures) string) {
		cells := []string{label}
		for _, f := range figs {
			if f == nil {
				cells = append(cells, "not measured")
				continue
			}
			cells = append(cells, cell(f))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	fmt.Fprintln(tw, "relay\t"+strings.Join(names, "\t")+"\t")
	row(fmt.Sprintf("drain of %d events, events/s", p.Backlog), func(f *relayFigures) string { return strconv.FormatFloat(f.Drain.EventsPerSec, 'f', 0, 64) })
	row(fmt.Sprintf("  × pg_recvlogical (%.0f events/s)", p.RecvlogicalPerSec), func(f *relayFigures) string {
		if p.RecvlogicalPerSec <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", f.Drain.EventsPerSec/p.RecvlogicalPerSec)
	})
	row("  first record after start, s", func(f *relayFigures) string { return fmt.Sprintf("%.1f", f.Drain.FirstRecordSecs) })
	row("  relay peak RSS", func(f *relayFigures) string { return mib(f.Drain.PeakRSSBytes) })
	row("  relay CPU s per 1,000 events", func(f *relayFigures) string { return fmt.Sprintf("%.3f", f.Drain.RelayCPUPer1000) })
	row("  PostgreSQL CPU s per 1,000 events", func(f *relayFigures) string { return fmt.Sprintf("%.3f", f.Drain.PostgresCPUPer1000) })
	row("  WAL per 1,000 events", func(f *relayFigures) string { return walSize(f.Drain.WALBytesPer1000) })
	for _, rate := range p.rates() {
		find := func(f *relayFigures) *relayLatency {
			for i := range f.Latency {
				if f.Latency[i].OfferedPerSec == rate {
					return &f.Latency[i]
				}
			}
			return nil
		}
		row(fmt.Sprintf("commit → Kafka append at %d orders/s: p50 / p99", rate), func(f *relayFigures) string {
			if l := find(f); l != nil {
				return ms(l.CommitToAppend.P50) + " / " + ms(l.CommitToAppend.P99)
			}
			return "-"
		})
		row("  achieved orders/s, orders measured", func(f *relayFigures) string {
			if l := find(f); l != nil {
				return fmt.Sprintf("%.0f, %d", l.AchievedPerSec, l.Orders)
			}
			return "-"
		})
		row("  cores used by other processes meanwhile", func(f *relayFigures) string {
			if l := find(f); l != nil {
				return fmt.Sprintf("%.2f", l.OtherCores)
			}
			return "-"
		})
	}
	_ = tw.Flush()
}

// printPeersSection prints the peers table under its heading, and what the
// run left unmeasured.
func (res *Results) printPeersSection(w io.Writer) {
	fmt.Fprintf(w, "\n8. Relays side by side (same PostgreSQL, Kafka and backlog; docs/bench.md says what bounds each)\n")
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
			fmt.Fprintf(w, "   %-32s %s\n", strings.TrimPrefix(pc.Phase, "peers: "), pc)
		}
	}
}

// rates returns every offered load measured, in the order first seen.
func (p *peersResult) rates() []int {
	var out []int
	for _, f := range p.Relays {
		for _, l := range f.Latency {
			if !containsInt(out, l.OfferedPerSec) {
				out = append(out, l.OfferedPerSec)
			}
		}
	}
	return out
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// writePeersChart draws the peers' figures as one chart of six panels,
// written as prefix-peers.svg and prefix-peers.png.
func (p *peersResult) writePeersChart(prefix string) ([]string, error) {
	latency, err := p.latencyPanel()
	if err != nil {
		return nil, err
	}
	rate := p.barPanel("Drain rate (events/s)", func(f *relayFigures) float64 { return f.Drain.EventsPerSec })
	if p.RecvlogicalPerSec > 0 {
		floor := plotter.NewFunction(func(float64) float64 { return p.RecvlogicalPerSec })
		floor.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		rate.Add(floor)
		rate.Legend.Add("pg_recvlogical "+barLabel(p.RecvlogicalPerSec), floor)
		rate.Legend.Top, rate.Legend.Left = true, true
		rate.Y.Max = math.Max(rate.Y.Max, p.RecvlogicalPerSec) * 1.3
	}
	panels := [][]*plot.Plot{
		{rate, p.barPanel("Relay peak RSS (MiB)", func(f *relayFigures) float64 { return float64(f.Drain.PeakRSSBytes) / (1 << 20) }), latency},
		{
			p.barPanel("Relay CPU s per 1,000 events", func(f *relayFigures) float64 { return f.Drain.RelayCPUPer1000 }),
			p.barPanel("PostgreSQL CPU s per 1,000 events", func(f *relayFigures) float64 { return f.Drain.PostgresCPUPer1000 }),
			p.barPanel("WAL KiB per 1,000 events", func(f *relayFigures) float64 { return f.Drain.WALBytesPer1000 / 1024 }),
		},
	}
	return writePanels(prefix+"-peers", panels, 13*vg.Inch, 7*vg.Inch)
}

// writePanels draws panels (rows of plots) as one figure of width × height
// to path.svg and path.png and returns the files written.
func writePanels(path string, panels [][]*plot.Plot, width, height vg.Length) ([]string, error) {
	var files []string
	svg := vgsvg.New(width, height)
	png := vgimg.New(width, height)
	for _, c := range []struct {
		canvas vg.CanvasWriterTo
		draw   draw.Canvas
		ext    string
	}{{svg, draw.New(svg), "svg"}, {vgimg.PngCanvas{Canvas: png}, draw.New(png), "png"}} {
		tiles := draw.Tiles{Rows: len(panels), Cols: len(panels[0]), PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
		canvases := plot.Align(panels, tiles, c.draw)
		for i := range panels {
			for j := range panels[i] {
				panels[i][j].Draw(canvases[i][j])
			}
		}
		file := path + "." + c.ext
		if err := writeTo(file, c.canvas); err != nil {
			return nil, err
		}
		files = append(files, file)
	}
	return files, nil
}

func writeTo(path string, c vg.CanvasWriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	return f.Close()
}

// barPanel draws one bar per measured relay.
func (p *peersResult) barPanel(title string, value func(*relayFigures) float64) *plot.Plot {
	pl := plot.New()
	pl.Title.Text = title
	var names []string
	var values plotter.Values
	for i := range p.Relays {
		names = append(names, p.Relays[i].Relay)
		values = append(values, value(&p.Relays[i]))
	}
	bars, err := plotter.NewBarChart(values, vg.Points(28))
	if err == nil {
		bars.Color = color.RGBA{R: 70, G: 110, B: 170, A: 255}
		pl.Add(bars)
		pl.NominalX(names...)
	}
	// Each bar carries its value, so a bar too short to see still reads.
	xys := plotter.XYLabels{}
	for i, v := range values {
		xys.XYs = append(xys.XYs, plotter.XY{X: float64(i), Y: v})
		xys.Labels = append(xys.Labels, barLabel(v))
	}
	if labels, err := plotter.NewLabels(xys); err == nil {
		for i := range labels.TextStyle {
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{Y: vg.Points(3)}
		pl.Add(labels)
	}
	pl.Y.Min = 0
	pl.Y.Tick.Marker = plainTicks{}
	// Headroom above the tallest bar for its label.
	for _, v := range values {
		pl.Y.Max = math.Max(pl.Y.Max, v*1.2)
	}
	return pl
}

// barLabel is v with three significant digits, without an exponent.
func barLabel(v float64) string {
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// latencyPanel draws commit → append p50 (dashed) and p99 of each relay
// against the offered load, on a log axis, with ticks at the loads measured.
func (p *peersResult) latencyPanel() (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = "Commit → Kafka append (ms, log)"
	pl.X.Label.Text = "offered orders/s"
	loadLatencyAxes(pl, p.rates())
	top := 1.0
	for i, f := range p.Relays {
		var p50, p99 plotter.XYs
		for _, l := range f.Latency {
			x := float64(l.OfferedPerSec)
			p50 = append(p50, plotter.XY{X: x, Y: positiveMS(l.CommitToAppend.P50)})
			p99 = append(p99, plotter.XY{X: x, Y: positiveMS(l.CommitToAppend.P99)})
			top = math.Max(top, positiveMS(l.CommitToAppend.P99))
		}
		if len(p99) == 0 {
			continue
		}
		for _, s := range []struct {
			name string
			xys  plotter.XYs
			dash bool
		}{{f.Relay + " p99", p99, false}, {f.Relay + " p50", p50, true}} {
			line, points, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			if s.dash {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			pl.Add(line, points)
			pl.Legend.Add(s.name, line, points)
		}
	}
	legendAbove(pl, top)
	return pl, nil
}

// loadLatencyAxes sets up a latency against offered load chart: latency
// (ms) on a log axis, and the load on a log axis too (loads that double are
// evenly spaced), ticked at the rates measured.
func loadLatencyAxes(pl *plot.Plot, rates []int) {
	pl.Y.Scale, pl.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var ticks []plot.Tick
	for _, r := range rates {
		if r > 0 {
			ticks = append(ticks, plot.Tick{Value: float64(r), Label: strconv.Itoa(r)})
		}
	}
	if len(ticks) == 0 {
		return
	}
	pl.X.Scale = plot.LogScale{}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.X.Min, pl.X.Max = ticks[0].Value/1.3, ticks[len(ticks)-1].Value*1.3
}

// legendAbove puts the legend of a log-latency chart in a band above the
// data, which reaches top: the axis goes well over a decade higher, so the
// legend covers no line.
func legendAbove(pl *plot.Plot, top float64) {
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Y.Max = top * 30
	pl.Y.Min = math.Min(pl.Y.Min, 1)
	if pl.Y.Min <= 0 {
		pl.Y.Min = 0.1
	}
}

// positiveMS is d in milliseconds, at least 0.01 so a log axis can show it.
// walSize prints a WAL volume in KiB, or in bytes below 10 KiB, where the
// CDC relays' figures are (a hundred-odd bytes per 1,000 events).
func walSize(bytes float64) string {
	if bytes < 10<<10 {
		return fmt.Sprintf("%.0f bytes", bytes)
	}
	return fmt.Sprintf("%.0f KiB", bytes/1024)
}

func positiveMS(d time.Duration) float64 {
	return math.Max(float64(d)/float64(time.Millisecond), 0.01)
}
