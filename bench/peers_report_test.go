package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleRelay is a relay's figures over three rounds: drain rates by round,
// and at each rate the p50 and p99 of every latency (ms, by round), the
// share of the tails before the send and the CPU per 1,000 events.
type sampleRelay struct {
	name     string
	drain    [3]float64
	p50, p99 map[int][3]float64
	share    float64
	cpu      [3]float64
}

func (s sampleRelay) figures() relayFigures {
	f := relayFigures{Relay: s.name}
	msd := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for i, rate := range s.drain {
		f.Drains = append(f.Drains, relayDrain{Round: i + 1, Events: 200_000, EventsPerSec: rate, FirstRecordSecs: 0.2,
			PeakRSSBytes: 40 << 20, RelayCPUPer1000: 0.012, PostgresCPUPer1000: 0.010, WALBytesPer1000: 2048})
	}
	for _, rate := range []int{500, 2000} {
		for i := range 3 {
			l := latency{P50: msd(s.p50[rate][i]), P99: msd(s.p99[rate][i])}
			f.Latency = append(f.Latency, relayLatency{OfferedPerSec: rate, Round: i + 1, AchievedPerSec: float64(rate), Orders: rate * 10,
				CommitToAppend: l, CommitToRead: latency{P50: 2 * l.P50, P99: 2 * l.P99}, CommitToSent: latency{P50: time.Millisecond, P99: 5 * time.Millisecond},
				AppendTailBeforeSent: s.share, ReadTailBeforeSent: s.share / 2, RelayCPUPer1000: s.cpu[i], OtherCores: 0.01 * float64(i+1)})
		}
	}
	return f
}

func samplePeers() *peersResult {
	relays := []sampleRelay{
		{name: eventforgeName, drain: [3]float64{80_000, 70_000, 90_000},
			p50: map[int][3]float64{500: {3, 4, 5}, 2000: {4, 4, 4}}, p99: map[int][3]float64{500: {9, 30, 12}, 2000: {20, 20, 20}},
			share: 0.6, cpu: [3]float64{0.02, 0.03, 0.04}},
		{name: exactlyOnceName, drain: [3]float64{40_000, 35_000, 50_000},
			p50: map[int][3]float64{500: {50, 52, 55}, 2000: {60, 60, 60}}, p99: map[int][3]float64{500: {110, 120, 130}, 2000: {140, 140, 140}},
			share: 0.1, cpu: [3]float64{0.05, 0.05, 0.05}},
		{name: pollingName, drain: [3]float64{10_000, 10_000, 10_000},
			p50: map[int][3]float64{500: {60, 60, 60}, 2000: {70, 70, 70}}, p99: map[int][3]float64{500: {120, 120, 120}, 2000: {150, 150, 150}},
			share: 0.05, cpu: [3]float64{0.05, 0.05, 0.05}},
		{name: debeziumName, drain: [3]float64{8_000, 7_000, 10_000},
			p50: map[int][3]float64{500: {5, 5, 5}, 2000: {8, 8, 8}}, p99: map[int][3]float64{500: {10, 15, 24}, 2000: {40, 40, 40}},
			share: 0.5, cpu: [3]float64{0.1, 0.1, 0.1}},
	}
	p := &peersResult{Backlog: 200_000, Rounds: 3, Rates: []int{500, 2000}, WarmupOrders: 20_000, WarmupSecs: 5, WindowSecs: 10,
		Recvlogical: []recvlogicalRound{{Round: 1, EventsPerSec: 80_000}, {Round: 2, EventsPerSec: 70_000}, {Round: 3, EventsPerSec: 100_000}}}
	for _, s := range relays {
		p.Relays = append(p.Relays, s.figures())
	}
	return p
}

// rowOf returns the first line of text that starts with label (after the
// indent) at or after the line that contains after.
func rowOf(t *testing.T, text, after, label string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := 0
	for i, l := range lines {
		if strings.Contains(l, after) {
			start = i
			break
		}
	}
	for _, l := range lines[start:] {
		if strings.HasPrefix(strings.TrimSpace(l), label) {
			return l
		}
	}
	t.Fatalf("no row %q after %q in:\n%s", label, after, text)
	return ""
}

// cells splits a row into the cells after its label: the columns are
// separated by two or more spaces.
func cells(row, label string) []string {
	rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(row), label))
	var out []string
	for _, c := range strings.Split(rest, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

func TestPeersTableReportsMediansSpreadsAndRatiosByRound(t *testing.T) {
	var out bytes.Buffer
	res := &Results{Phases: []string{"peers"}, Peers: samplePeers()}
	res.printTable(&out)
	text := out.String()
	header := rowOf(t, text, "", "relay")
	if got := cells(header, "relay"); strings.Join(got, ",") != "EventForge,EventForge-exactly-once,polling,Debezium" {
		t.Fatalf("columns %q, want EventForge, EventForge-exactly-once, polling, Debezium", got)
	}
	for _, tt := range []struct{ after, label, want string }{
		// Drain: median, spread, ratio to pg_recvlogical and to Debezium
		// round by round (EventForge: 1, 1, 0.9 and 10, 10, 9).
		{"", "drain of 200000 events, events/s, median of 3 rounds", "80000,40000,10000,8000"},
		{"drain of", "min–max over the rounds", "70000–90000,35000–50000,10000–10000,7000–10000"},
		{"pg_recvlogical on the same backlog: 80000 events/s, median of 3 rounds (70000–100000)", "× pg_recvlogical, median of the rounds' ratios", "1.00×,0.50×,0.12×,0.10×"},
		{"drain of", "× Debezium, median of the rounds' ratios", "10.00×,5.00×,1.25×,1.00×"},
		{"drain of", "relay peak RSS", "40.0 MiB,40.0 MiB,40.0 MiB,40.0 MiB"},
		{"drain of", "WAL per 1,000 events", "2048 bytes,2048 bytes,2048 bytes,2048 bytes"},
		// At 500/s: EventForge's p99 of 9, 30, 12 ms against Debezium's 10,
		// 15, 24 is 0.9× round by round (the medians' ratio would be 0.8×).
		{"at 500 orders/s (warm-up: 20000 orders, then 5 s at the rate; 10 s measured), medians of 3 rounds", "commit → Kafka append, p50 / p99", "4.0 / 12.0 ms,52.0 / 120.0 ms,60.0 / 120.0 ms,5.0 / 15.0 ms"},
		{"at 500 orders/s", "min–max over the rounds", "3.0–5.0 / 9.0–30.0,50.0–55.0 / 110.0–130.0,60.0–60.0 / 120.0–120.0,5.0–5.0 / 10.0–24.0"},
		{"at 500 orders/s", "× Debezium, median of the rounds' ratios", "0.80× / 0.90×,10.40× / 8.00×,12.00× / 8.00×,1.00× / 1.00×"},
		{"at 500 orders/s", "commit → read by a read_committed reader, p50 / p99", "8.0 / 24.0 ms,104.0 / 240.0 ms,120.0 / 240.0 ms,10.0 / 30.0 ms"},
		{"at 500 orders/s", "commit → walsender sent (PostgreSQL's part), p50 / p99", "1.0 / 5.0 ms,1.0 / 5.0 ms,1.0 / 5.0 ms,1.0 / 5.0 ms"},
		{"at 500 orders/s", "p99 tail before the walsender sent, of append / of read", "60% / 30%,10% / 5%,5% / 2%,50% / 25%"},
		{"p99 tail before the walsender sent", "min–max over the rounds", "60–60% / 30–30%,10–10% / 5–5%,5–5% / 2–2%,50–50% / 25–25%"},
		{"at 500 orders/s", "relay CPU s per 1,000 events", "0.030,0.050,0.050,0.100"},
		{"at 500 orders/s", "achieved orders/s, orders measured", "500 / 5000,500 / 5000,500 / 5000,500 / 5000"},
		{"at 500 orders/s", "cores used by other processes, median / max", "0.02 / 0.03,0.02 / 0.03,0.02 / 0.03,0.02 / 0.03"},
		{"at 2000 orders/s", "commit → Kafka append, p50 / p99", "4.0 / 20.0 ms,60.0 / 140.0 ms,70.0 / 150.0 ms,8.0 / 40.0 ms"},
		{"at 2000 orders/s", "× Debezium, median of the rounds' ratios", "0.50× / 0.50×,7.50× / 3.50×,8.75× / 3.75×,1.00× / 1.00×"},
	} {
		got := cells(rowOf(t, text, tt.after, tt.label), tt.label)
		if strings.Join(got, ",") != tt.want {
			t.Errorf("row %q: cells %q, want %s", tt.label, got, tt.want)
		}
	}
	// relay CPU × Debezium at 500/s: 0.2, 0.3, 0.4 → 0.30×.
	at500 := text[strings.Index(text, "at 500 orders/s"):]
	cpuRatio := rowOf(t, at500, "relay CPU s per 1,000 events", "× Debezium, median of the rounds' ratios")
	if got := cells(cpuRatio, "× Debezium, median of the rounds' ratios"); len(got) == 0 || got[0] != "0.30×" {
		t.Errorf("relay CPU against Debezium: %q, want 0.30× first", got)
	}
	if strings.Contains(text, "1. PostgreSQL limit") {
		t.Errorf("a peers-only run printed the sections of phases it did not run:\n%s", text)
	}
}

func TestPeersTableSaysWhatWasNotMeasured(t *testing.T) {
	p := samplePeers()
	p.Relays = p.Relays[:3] // no Debezium
	p.Unavailable = map[string]string{debeziumName: "resolving its jars: offline"}
	var out bytes.Buffer
	(&Results{Phases: []string{"peers"}, Peers: p}).printTable(&out)
	text := out.String()
	if !strings.Contains(text, "Debezium: not measured — resolving its jars: offline") {
		t.Errorf("the table does not say why Debezium is missing:\n%s", text)
	}
	row := rowOf(t, text, "", "relay peak RSS")
	if strings.Count(row, "not measured") != 1 {
		t.Errorf("row %q: want one 'not measured' cell (Debezium)", row)
	}
	// Without Debezium, its ratios have no value.
	if got := cells(rowOf(t, text, "drain of", "× Debezium, median of the rounds' ratios"), "× Debezium, median of the rounds' ratios"); strings.Join(got, ",") != "-,-,-,not measured" {
		t.Errorf("ratios to a missing Debezium: %q", got)
	}
}

func TestPeersChartIsWritten(t *testing.T) {
	dir := t.TempDir()
	files, err := samplePeers().writePeersChart(filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v, want an SVG and a PNG", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".svg":
			for _, want := range []string{"<svg", "Drain rate", "pg_recvlogical 80000", "polling p99", "EventForge p50",
				"EventForge-exactly-once p99", "read_committed", "walsender sent", "WAL KiB", ">80000<", ">0.012<"} {
				if !bytes.Contains(b, []byte(want)) {
					t.Errorf("%s lacks %q", f, want)
				}
			}
		case ".png":
			if !bytes.HasPrefix(b, []byte("\x89PNG")) {
				t.Errorf("%s is not a PNG", f)
			}
		}
	}
}

func TestPeersCheckNamesMissingFigures(t *testing.T) {
	incomplete := &peersResult{Rounds: 3, Rates: []int{500}, Relays: []relayFigures{{Relay: pollingName,
		Drains: []relayDrain{{Round: 1, EventsPerSec: 1, PeakRSSBytes: 1, RelayCPUPer1000: 1}}, Latency: []relayLatency{{OfferedPerSec: 500, Round: 1}}}}}
	err := (&Results{Peers: incomplete}).check(map[string]bool{"peers": true})
	if err == nil {
		t.Fatal("incomplete peers figures passed the check")
	}
	for _, want := range []string{"pg_recvlogical reference drain of the peers (0 of 3 rounds)", "polling drain figures", "polling latency at 500/s",
		"EventForge (not measured)", "Debezium (not measured)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q does not name %q", err, want)
		}
	}
	// Every column must be measured: a relay left out fails the run.
	peers := samplePeers()
	peers.Relays = peers.Relays[:3]
	err = (&Results{Peers: peers}).check(map[string]bool{"peers": true})
	if err == nil || !strings.Contains(err.Error(), "Debezium (not measured)") {
		t.Errorf("peers without Debezium: %v; want Debezium named", err)
	}
	// A relay --peer-relays left out is not missing.
	peers.Skipped = []string{debeziumName}
	if err := (&Results{Peers: peers}).check(map[string]bool{"peers": true}); err != nil {
		t.Errorf("peers with Debezium left out by --peer-relays: %v", err)
	}
	if err := (&Results{Peers: samplePeers()}).check(map[string]bool{"peers": true}); err != nil {
		t.Errorf("complete peers figures: %v", err)
	}
	// A round without its window fails the check.
	short := samplePeers()
	short.Relays[0].Latency = short.Relays[0].Latency[1:]
	if err := (&Results{Peers: short}).check(map[string]bool{"peers": true}); err == nil || !strings.Contains(err.Error(), "EventForge latency at 500/s") {
		t.Errorf("a window missing: %v; want EventForge latency at 500/s named", err)
	}
}
