package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func (res *Results) writeJSON(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) string        { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// printTable prints every figure with its target where the benchmark has one.
func (res *Results) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	kind := "full"
	if res.Smoke {
		kind = "smoke (tiny sizes: figures mean nothing)"
	}
	p("EventForge bench\t%s, %d CPUs, %s, %.0f s", kind, res.CPUs, res.GoVersion, res.ElapsedSecs)
	p("\t")
	ran := map[string]bool{}
	for _, ph := range res.Phases {
		ran[ph] = true
	}
	if !slices.ContainsFunc(res.Phases, func(ph string) bool { return ph != "peers" && ph != "growth" }) {
		// Only the phases that run when named: their sections alone.
		_ = tw.Flush()
		if ran["peers"] {
			res.printPeersSection(w)
		}
		if ran["growth"] {
			res.printGrowthSection(w)
		}
		return
	}
	if len(res.Phases) < 5 {
		p("phases run\t%v (the others are not: their figures are missing)", res.Phases)
	}
	p("1. PostgreSQL limit (pgbench, order tx)\t%.0f commits/s (best of %v clients: %d)", res.PGLimit.BestCommitsPerSec, keys(res.PGLimit.ByClients), res.PGLimit.BestClients)
	p("2. API gRPC, closed loop, %d clients\t%.0f orders/s, p50 %s, p99 %s, errors %d — %.0f%% of the limit (target ≥ 70%%), api %.0f µs CPU per order (target ≤ 100)",
		res.APIClients, res.APIGRPC.PerSecond, ms(res.APIGRPC.P50), ms(res.APIGRPC.P99), res.APIGRPC.Errors, 100*res.GRPCRatio, res.APIGRPCCPU)
	p("   API REST, closed loop, %d clients\t%.0f orders/s, p50 %s, p99 %s, errors %d — %.0f%% of the limit, api %.0f µs CPU per order",
		res.APIClients, res.APIREST.PerSecond, ms(res.APIREST.P50), ms(res.APIREST.P99), res.APIREST.Errors, 100*res.RESTRatio, res.APIRESTCPU)
	for _, l := range []struct {
		name string
		res  loadResult
	}{{"gRPC", res.APIGRPC}, {"REST", res.APIREST}} {
		if l.res.FirstError != "" {
			p("   first %s error\t%s", l.name, l.res.FirstError)
		}
	}
	p("3. CDC drain of %d events\t%.0f events/s in %.1f s (target ≥ 50,000), peak RSS %s (target ≤ 64 MiB)",
		res.Drain.Events, res.Drain.EventsPerSec, res.Drain.Seconds, mib(res.Drain.PeakRSSBytes))
	if res.Drain.RecvlogicalPerSec > 0 {
		p("   same backlog, pg_recvlogical to /dev/null\t%.0f events/s in %.1f s — the reader drained at %.2f× its rate",
			res.Drain.RecvlogicalPerSec, res.Drain.RecvlogicalSeconds, res.Drain.EventsPerSec/res.Drain.RecvlogicalPerSec)
	}
	p("4. End to end (open loop)\t")
	for _, r := range res.EndToEnd {
		p("   %d orders/s offered (%.0f achieved, %d late, create p99 %s)\tcommit→ack p50 %s p95 %s p99 %s max %s | commit→applied p50 %s p95 %s p99 %s max %s | max slot lag %s",
			r.OfferedPerSec, r.Load.PerSecond, r.Load.Late, ms(r.Load.P99), ms(r.CommitToAck.P50), ms(r.CommitToAck.P95), ms(r.CommitToAck.P99), ms(r.CommitToAck.Max),
			ms(r.CommitToApplied.P50), ms(r.CommitToApplied.P95), ms(r.CommitToApplied.P99), ms(r.CommitToApplied.Max), mib(r.MaxSlotLagBytes))
	}
	p("   target\tcommit→applied p99 ≤ 100 ms at 1,000 orders/s")
	p("5. Consumer apply, batching off\t%.0f events/s (%d events, %.1f s), peak RSS %s",
		res.Apply.Off.EventsPerSec, res.Apply.Off.Events, res.Apply.Off.Seconds, mib(res.Apply.Off.PeakRSSBytes))
	if res.Apply.OnMeasured {
		p("   Consumer apply, batching on (%d)\t%.0f events/s (%d events, %.1f s), peak RSS %s (target ≤ 128 MiB) — target ≥ the PostgreSQL limit (%.0f)",
			res.Apply.On.BatchSize, res.Apply.On.EventsPerSec, res.Apply.On.Events, res.Apply.On.Seconds, mib(res.Apply.On.PeakRSSBytes), res.PGLimit.BestCommitsPerSec)
	} else {
		p("   Consumer apply, batching on\tnot measured: the consumer has no batching option")
	}
	res.printComponents(p)
	p("7. CPU by phase (cores used of %d)\t", res.CPUs)
	for _, pc := range res.CPU {
		p("   %s\t%s", pc.Phase, pc)
	}
	_ = tw.Flush()
	if ran["peers"] {
		res.printPeersSection(w)
	}
	if ran["growth"] {
		res.printGrowthSection(w)
	}
}

// printComponents prints each component's memory and CPU per order in the
// end-to-end phase, over several rates split into per order and at any
// rate, without a target: the relay's CPU is read against the relays that
// do the same job, measured by the peers phase of the same run.
func (res *Results) printComponents(p func(format string, args ...any)) {
	p("6. Components (end-to-end phase)\t")
	for _, name := range []string{"api", "cdc", "consumer"} {
		c := res.Components[name]
		if c.Fit == nil {
			p("   %s\tpeak RSS %s, %.2f CPU s per 1,000 orders", name, mib(c.PeakRSSBytes), c.CPUSecondsPer1000)
			continue
		}
		p("   %s\tpeak RSS %s, %.2f CPU s per 1,000 orders — over the rates, %s",
			name, mib(c.PeakRSSBytes), c.CPUSecondsPer1000, c.Fit.describe(1000, "s per added 1,000 orders"))
	}
	res.printRelayAgainstPeers(p)
}

// printRelayAgainstPeers prints, at each rate of the peers phase, the
// reader's CPU per 1,000 events against Debezium's and the polling relay's
// in the same run, as medians over the rounds and the median of the
// rounds' ratios.
func (res *Results) printRelayAgainstPeers(p func(format string, args ...any)) {
	var ef *relayFigures
	if res.Peers != nil {
		ef = res.Peers.figures(eventforgeName)
	}
	if ef == nil || len(ef.Latency) == 0 {
		p("   cdc against its peers\tnot measured in this run (the peers phase measures it: --phases …,peers)")
		return
	}
	cpu := func(f *relayFigures, rate int) byRound {
		return f.latencyRounds(rate, func(l relayLatency) float64 { return l.RelayCPUPer1000 })
	}
	for _, rate := range res.Peers.rates() {
		line := fmt.Sprintf("EventForge %.3f", cpu(ef, rate).median())
		for _, name := range []string{debeziumName, pollingName} {
			peer := res.Peers.figures(name)
			if peer == nil {
				continue
			}
			if r, ok := cpu(ef, rate).ratioTo(cpu(peer, rate)); ok {
				line += fmt.Sprintf(", %s %.3f (EventForge %.2f× of it)", name, cpu(peer, rate).median(), r)
			}
		}
		p("   cdc against its peers at %d orders/s\trelay CPU s per 1,000 events, medians of %d rounds: %s", rate, res.Peers.Rounds, line)
	}
}

func keys(m map[int]float64) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// writeCharts draws latency percentiles against offered load and
// throughput over time, and the peers' chart when the phase ran, as SVG and
// PNG, and returns the files written.
func (res *Results) writeCharts(prefix string) ([]string, error) {
	var files []string
	if res.Peers != nil {
		peers, err := res.Peers.writePeersChart(prefix)
		if err != nil {
			return nil, err
		}
		files = append(files, peers...)
	}
	if res.Growth != nil {
		growth, err := res.Growth.writeGrowthChart(prefix)
		if err != nil {
			return nil, err
		}
		files = append(files, growth...)
	}
	if len(res.EndToEnd) == 0 && len(res.Throughput) == 0 {
		return files, nil
	}

	lat, err := res.latencyChart()
	if err != nil {
		return nil, err
	}

	tp := plot.New()
	tp.Title.Text = "Throughput over time (end-to-end phase)"
	tp.X.Label.Text = "seconds since the phase started"
	tp.Y.Label.Text = "orders per second"
	created := make(plotter.XYs, len(res.Throughput))
	applied := make(plotter.XYs, len(res.Throughput))
	for i, pt := range res.Throughput {
		created[i].X, created[i].Y = float64(pt.Second), float64(pt.Created)
		applied[i].X, applied[i].Y = float64(pt.Second), float64(pt.Applied)
	}
	if err := plotutil.AddLines(tp, "created", created, "applied", applied); err != nil {
		return nil, err
	}
	tp.Legend.Top = true

	for name, p := range map[string]*plot.Plot{"latency": lat, "throughput": tp} {
		for _, ext := range []string{"svg", "png"} {
			path := fmt.Sprintf("%s-%s.%s", prefix, name, ext)
			if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
				return nil, fmt.Errorf("drawing %s: %w", path, err)
			}
			files = append(files, path)
		}
	}
	return files, nil
}

// targetAppliedP99 is the commit → applied p99 target at 1,000 orders/s.
const targetAppliedP99 = 100 * time.Millisecond

// latencyChart draws commit → applied p50, p95 and p99 and commit → Kafka
// ack p99 against the offered load, latency on a log axis (so that tens of
// milliseconds and seconds both read), ticked at the loads offered, with the
// p99 target drawn and the legend above the data.
func (res *Results) latencyChart() (*plot.Plot, error) {
	lat := plot.New()
	lat.Title.Text = "Commit → applied latency vs offered load"
	lat.X.Label.Text = "offered load (orders/s)"
	lat.Y.Label.Text = "latency (ms, log)"
	var rates []int
	top := positiveMS(targetAppliedP99)
	for _, r := range res.EndToEnd {
		rates = append(rates, r.OfferedPerSec)
		top = math.Max(top, positiveMS(r.CommitToApplied.P99))
	}
	loadLatencyAxes(lat, rates)
	series := func(get func(rateResult) time.Duration) plotter.XYs {
		pts := make(plotter.XYs, len(res.EndToEnd))
		for i, r := range res.EndToEnd {
			pts[i].X, pts[i].Y = float64(r.OfferedPerSec), positiveMS(get(r))
		}
		return pts
	}
	if err := plotutil.AddLinePoints(lat,
		"applied p50", series(func(r rateResult) time.Duration { return r.CommitToApplied.P50 }),
		"applied p95", series(func(r rateResult) time.Duration { return r.CommitToApplied.P95 }),
		"applied p99", series(func(r rateResult) time.Duration { return r.CommitToApplied.P99 }),
		"Kafka ack p99", series(func(r rateResult) time.Duration { return r.CommitToAck.P99 }),
	); err != nil {
		return nil, err
	}
	if len(rates) > 0 {
		y := positiveMS(targetAppliedP99)
		target, err := plotter.NewLine(plotter.XYs{{X: lat.X.Min, Y: y}, {X: lat.X.Max, Y: y}})
		if err != nil {
			return nil, err
		}
		target.Color = color.Gray{Y: 96}
		target.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		lat.Add(target)
		lat.Legend.Add("target: applied p99 ≤ 100 ms at 1,000/s", target)
	}
	legendAbove(lat, top)
	return lat, nil
}

// check reports every figure the run failed to produce, so a harness that
// rots fails loudly instead of printing zeros. ran names the phases run.
func (res *Results) check(ran map[string]bool) error {
	var missing []string
	need := func(phase string, ok bool, what string) {
		if ran[phase] && !ok {
			missing = append(missing, what)
		}
	}
	need("postgres", res.PGLimit.BestCommitsPerSec > 0, "PostgreSQL limit")
	need("api", res.APIGRPC.Requests > 0 && res.APIGRPC.P99 > 0, "API gRPC throughput and latency")
	need("api", res.APIREST.Requests > 0 && res.APIREST.P99 > 0, "API REST throughput and latency")
	need("api", res.APIGRPCCPU > 0 && res.APIRESTCPU > 0, "api CPU per order")
	need("drain", res.Drain.Events > 0 && res.Drain.EventsPerSec > 0 && res.Drain.PeakRSSBytes > 0, "CDC drain rate and peak RSS")
	need("drain", res.Drain.RecvlogicalPerSec > 0, "pg_recvlogical reference drain")
	need("apply", res.Apply.Off.Events > 0 && res.Apply.Off.EventsPerSec > 0, "consumer apply rate")
	need("e2e", len(res.EndToEnd) > 0, "end-to-end phases")
	for _, r := range res.EndToEnd {
		need("e2e", r.Orders > 0 && r.CommitToAck.P99 > 0 && r.CommitToApplied.P99 > 0, fmt.Sprintf("end-to-end latency at %d/s", r.OfferedPerSec))
	}
	for _, name := range []string{"api", "cdc", "consumer"} {
		c := res.Components[name]
		need("e2e", c.PeakRSSBytes > 0 && c.CPUSeconds > 0, name+" peak RSS and CPU")
	}
	need("e2e", len(res.Throughput) > 0, "throughput over time")
	if res.Peers != nil {
		for _, m := range res.Peers.missing() {
			need("peers", false, m)
		}
	}
	need("growth", res.Growth != nil && len(res.Growth.Drains) > 0, "growth drains")
	need("growth", res.Growth != nil && len(res.Growth.Apply) > 0, "growth apply grid")
	if res.Growth != nil {
		for _, d := range res.Growth.Drains {
			need("growth", d.EventsPerSec > 0 && d.PeakRSSBytes > 0, fmt.Sprintf("drain of %d events", d.Events))
		}
		for _, a := range res.Growth.Apply {
			need("growth", a.EventsPerSec > 0, fmt.Sprintf("apply with %d partitions × %d workers", a.Partitions, a.Workers))
		}
	}
	need("postgres", len(res.CPU) > 0, "CPU by phase")
	need("api", len(res.CPU) > 0, "CPU by phase")
	if len(missing) > 0 {
		return fmt.Errorf("figures missing: %v", missing)
	}
	return nil
}
