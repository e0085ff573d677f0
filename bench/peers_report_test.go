package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func samplePeers() *peersResult {
	lat := func(rate int, p50, p99 time.Duration) relayLatency {
		return relayLatency{OfferedPerSec: rate, AchievedPerSec: float64(rate), Orders: rate * 30, CommitToAppend: latency{P50: p50, P99: p99}}
	}
	contended := lat(2000, 70*time.Millisecond, 150*time.Millisecond)
	contended.OtherCores = 0.31
	return &peersResult{Backlog: 200_000, RecvlogicalPerSec: 80_000, Relays: []relayFigures{
		{Relay: "EventForge", Drain: relayDrain{Events: 200_000, Seconds: 2.5, EventsPerSec: 80_000, FirstRecordSecs: 0.1, PeakRSSBytes: 40 << 20,
			RelayCPUPer1000: 0.012, PostgresCPUPer1000: 0.010, WALBytesPer1000: 2048},
			Latency: []relayLatency{lat(500, 3*time.Millisecond, 9*time.Millisecond), lat(2000, 4*time.Millisecond, 20*time.Millisecond)}},
		{Relay: "polling", Drain: relayDrain{Events: 200_000, Seconds: 20, EventsPerSec: 10_000, FirstRecordSecs: 0.2, PeakRSSBytes: 30 << 20,
			RelayCPUPer1000: 0.05, PostgresCPUPer1000: 0.2, WALBytesPer1000: 300 * 1024},
			Latency: []relayLatency{lat(500, 60*time.Millisecond, 120*time.Millisecond), contended}},
	}}
}

func TestPeersTableHasAColumnPerRelay(t *testing.T) {
	var out bytes.Buffer
	res := &Results{Phases: []string{"peers"}, Peers: samplePeers()}
	res.Peers.Unavailable = map[string]string{"Debezium": "resolving its jars: offline"}
	res.printTable(&out)
	text := out.String()
	lines := strings.Split(text, "\n")
	var header string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "relay" && f[1] == "EventForge" {
			header = l
		}
	}
	for _, col := range []string{"EventForge", "polling", "Debezium"} {
		if !strings.Contains(header, col) {
			t.Errorf("header %q has no column %s", header, col)
		}
	}
	for _, want := range []string{
		"80000", "10000", // drain rates
		"1.00×", "0.12×", // ratios to pg_recvlogical
		"40.0 MiB", "30.0 MiB",
		"0.012", "0.200", // relay CPU, PostgreSQL CPU
		"2048 bytes", "300 KiB", // WAL: bytes below 10 KiB
		"commit → Kafka append at 500 orders/s", "commit → Kafka append at 2000 orders/s",
		"3.0 ms / 9.0 ms", "70.0 ms / 150.0 ms",
		"cores used by other processes meanwhile", "0.31",
		"Debezium: not measured — resolving its jars: offline",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "1. PostgreSQL limit") {
		t.Errorf("a peers-only run printed the sections of phases it did not run:\n%s", text)
	}
	// Each row has a cell per relay: Debezium's say so.
	for _, l := range lines {
		if strings.Contains(l, "relay peak RSS") && strings.Count(l, "not measured") != 1 {
			t.Errorf("row %q: want one 'not measured' cell (Debezium)", l)
		}
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
			for _, want := range []string{"<svg", "Drain rate", "pg_recvlogical 80000", "polling p99", "EventForge p50", "WAL KiB", ">10000<", ">0.012<"} {
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
	res := Results{Peers: &peersResult{Relays: []relayFigures{{Relay: "polling", Latency: []relayLatency{{OfferedPerSec: 500}}}}}}
	err := res.check(map[string]bool{"peers": true})
	if err == nil {
		t.Fatal("empty peers figures passed the check")
	}
	for _, want := range []string{"pg_recvlogical reference drain of the peers", "polling drain figures", "polling latency at 500/s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error %q does not name %q", err, want)
		}
	}
	// Every column must be measured: a relay left out fails the run.
	peers := samplePeers()
	err = (&Results{Peers: peers}).check(map[string]bool{"peers": true})
	if err == nil || !strings.Contains(err.Error(), "Debezium (not measured)") {
		t.Errorf("peers without Debezium: %v; want Debezium named", err)
	}
	// A relay --peer-relays left out is not missing.
	peers.Skipped = []string{"Debezium"}
	if err := (&Results{Peers: peers}).check(map[string]bool{"peers": true}); err != nil {
		t.Errorf("peers with Debezium left out by --peer-relays: %v", err)
	}
	peers.Skipped = nil
	dbz := peers.Relays[1]
	dbz.Relay = "Debezium"
	peers.Relays = append(peers.Relays, dbz)
	if err := (&Results{Peers: peers}).check(map[string]bool{"peers": true}); err != nil {
		t.Errorf("complete peers figures: %v", err)
	}
}
