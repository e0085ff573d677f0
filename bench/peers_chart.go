package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writePeersChart draws the peers' figures as one chart of eight panels,
// every round a point and the median a bar or a line, written as
// prefix-peers.svg and prefix-peers.png.
func (p *peersResult) writePeersChart(prefix string) ([]string, error) {
	drainPanel := func(title string, get func(relayDrain) float64) *plot.Plot {
		return p.barPanel(title, func(f *relayFigures) byRound { return f.drainRounds(get) })
	}
	rate := drainPanel("Drain rate (events/s)", func(d relayDrain) float64 { return d.EventsPerSec })
	if recv := p.recvlogicalRounds(); len(recv) > 0 {
		floor := plotter.NewFunction(func(float64) float64 { return recv.median() })
		floor.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		rate.Add(floor)
		rate.Legend.Add("pg_recvlogical "+barLabel(recv.median()), floor)
		rate.Legend.Top, rate.Legend.Left = true, true
		_, hi := recv.spread()
		rate.Y.Max = math.Max(rate.Y.Max, hi) * 1.3
	}
	appendPanel, err := p.latencyPanel("Commit → Kafka append (ms, log)", func(l relayLatency) latency { return l.CommitToAppend })
	if err != nil {
		return nil, err
	}
	readPanel, err := p.latencyPanel("Commit → read_committed read (ms, log)", func(l relayLatency) latency { return l.CommitToRead })
	if err != nil {
		return nil, err
	}
	share, err := p.sharePanel()
	if err != nil {
		return nil, err
	}
	panels := [][]*plot.Plot{
		{rate, drainPanel("Relay peak RSS (MiB)", func(d relayDrain) float64 { return float64(d.PeakRSSBytes) / (1 << 20) }), appendPanel, readPanel},
		{
			drainPanel("Relay CPU s per 1,000 events (drain)", func(d relayDrain) float64 { return d.RelayCPUPer1000 }),
			drainPanel("PostgreSQL CPU s per 1,000 events", func(d relayDrain) float64 { return d.PostgresCPUPer1000 }),
			drainPanel("WAL KiB per 1,000 events", func(d relayDrain) float64 { return d.WALBytesPer1000 / 1024 }),
			share,
		},
	}
	return writePanels(prefix+"-peers", panels, 17*vg.Inch, 8*vg.Inch)
}

// barPanel draws one bar per measured relay at the median of its rounds,
// each round a point on it.
func (p *peersResult) barPanel(title string, rounds func(*relayFigures) byRound) *plot.Plot {
	pl := plot.New()
	pl.Title.Text = title
	var names []string
	var medians plotter.Values
	var points plotter.XYs
	for i := range p.Relays {
		b := rounds(&p.Relays[i])
		names = append(names, strings.Replace(p.Relays[i].Relay, "-", "\n", 1))
		medians = append(medians, finite(b.median()))
		for _, v := range b.values() {
			points = append(points, plotter.XY{X: float64(i), Y: v})
		}
	}
	bars, err := plotter.NewBarChart(medians, vg.Points(28))
	if err == nil {
		bars.Color = color.RGBA{R: 150, G: 180, B: 220, A: 255}
		pl.Add(bars)
		pl.NominalX(names...)
	}
	if sc, err := plotter.NewScatter(points); err == nil {
		sc.Color = color.RGBA{R: 30, G: 50, B: 110, A: 255}
		sc.Radius = vg.Points(2.5)
		pl.Add(sc)
	}
	// Each bar carries its median, so a bar too short to see still reads.
	xys := plotter.XYLabels{}
	for i, v := range medians {
		xys.XYs = append(xys.XYs, plotter.XY{X: float64(i), Y: v})
		xys.Labels = append(xys.Labels, barLabel(v))
	}
	if labels, err := plotter.NewLabels(xys); err == nil {
		for i := range labels.TextStyle {
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{X: vg.Points(14), Y: vg.Points(3)}
		pl.Add(labels)
	}
	pl.Y.Min = 0
	pl.Y.Tick.Marker = plainTicks{}
	// Headroom above the tallest bar or round for the labels.
	for _, pt := range append(points, xys.XYs...) {
		pl.Y.Max = math.Max(pl.Y.Max, pt.Y*1.2)
	}
	return pl
}

// jitter spreads the relays' points at one rate apart on a log axis.
func jitter(rate, i, n int) float64 {
	return float64(rate) * math.Pow(1.06, float64(i)-float64(n-1)/2)
}

// latencyPanel draws, for each relay, the p99 (filled) and p50 (hollow) of
// every round against the offered load, with lines through the medians
// (p50 dashed), latency on a log axis.
func (p *peersResult) latencyPanel(title string, get func(relayLatency) latency) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "offered orders/s"
	loadLatencyAxes(pl, p.rates())
	top := 1.0
	for i := range p.Relays {
		f := &p.Relays[i]
		for _, q := range []struct {
			name string
			of   func(latency) time.Duration
			dash bool
		}{{"p99", func(l latency) time.Duration { return l.P99 }, false}, {"p50", func(l latency) time.Duration { return l.P50 }, true}} {
			var line, rounds plotter.XYs
			for _, rate := range p.rates() {
				b := f.latencyRounds(rate, func(l relayLatency) float64 { return positiveMS(q.of(get(l))) })
				if len(b) == 0 {
					continue
				}
				x := jitter(rate, i, len(p.Relays))
				line = append(line, plotter.XY{X: x, Y: b.median()})
				for _, v := range b.values() {
					rounds = append(rounds, plotter.XY{X: x, Y: v})
					top = math.Max(top, v)
				}
			}
			if len(line) == 0 {
				continue
			}
			if err := addRoundSeries(pl, f.Relay+" "+q.name, i, line, rounds, q.dash); err != nil {
				return nil, err
			}
		}
	}
	legendAbove(pl, top)
	return pl, nil
}

// addRoundSeries adds a line through the medians and a point per round, in
// the relay's colour; dashed lines get hollow points.
func addRoundSeries(pl *plot.Plot, name string, i int, medians, rounds plotter.XYs, dashed bool) error {
	line, err := plotter.NewLine(medians)
	if err != nil {
		return err
	}
	points, err := plotter.NewScatter(rounds)
	if err != nil {
		return err
	}
	line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
	points.Shape = draw.CircleGlyph{}
	if dashed {
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		points.Shape = draw.RingGlyph{}
	}
	pl.Add(line, points)
	pl.Legend.Add(name, line, points)
	return nil
}

// sharePanel draws, for each relay, the share of its read p99 tail spent
// before the walsender sent the commit, every round a point.
func (p *peersResult) sharePanel() (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = "p99 tail (read) before the walsender sent (%)"
	pl.X.Label.Text = "offered orders/s"
	loadLatencyAxes(pl, p.rates())
	pl.Y.Scale, pl.Y.Tick.Marker = plot.LinearScale{}, plainTicks{}
	pl.Y.Min, pl.Y.Max = 0, 130
	for i := range p.Relays {
		f := &p.Relays[i]
		var line, rounds plotter.XYs
		for _, rate := range p.rates() {
			b := f.latencyRounds(rate, func(l relayLatency) float64 { return 100 * l.ReadTailBeforeSent })
			if len(b) == 0 {
				continue
			}
			x := jitter(rate, i, len(p.Relays))
			line = append(line, plotter.XY{X: x, Y: b.median()})
			for _, v := range b.values() {
				rounds = append(rounds, plotter.XY{X: x, Y: v})
			}
		}
		if len(line) == 0 {
			continue
		}
		if err := addRoundSeries(pl, f.Relay, i, line, rounds, false); err != nil {
			return nil, err
		}
	}
	pl.Legend.Top, pl.Legend.Left = true, true
	return pl, nil
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
func positiveMS(d time.Duration) float64 {
	return math.Max(float64(d)/float64(time.Millisecond), 0.01)
}
