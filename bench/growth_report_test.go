package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleGrowth() *growthResult {
	return &growthResult{
		Drains: []growthDrain{
			{Events: 10_000, Seconds: 0.5, EventsPerSec: 20_000, PeakRSSBytes: 40 << 20},
			{Events: 100_000, Seconds: 3.2, EventsPerSec: 31_250, PeakRSSBytes: 60 << 20},
		},
		Apply: []growthApply{
			{Partitions: 1, Workers: 1, Events: 100_000, Seconds: 20, EventsPerSec: 5_000},
			{Partitions: 2, Workers: 1, Events: 100_000, Seconds: 19, EventsPerSec: 5_263},
			{Partitions: 2, Workers: 2, Events: 100_000, Seconds: 11, EventsPerSec: 9_091},
		},
	}
}

func TestGrowthSectionListsEveryRun(t *testing.T) {
	var out bytes.Buffer
	res := &Results{Phases: []string{"growth"}, Growth: sampleGrowth()}
	res.printTable(&out)
	text := out.String()
	for _, want := range []string{
		"CDC drain of 10000 events", "20000 events/s", "40.0 MiB",
		"CDC drain of 100000 events", "31250 events/s", "60.0 MiB",
		"1 partitions × 1 workers", "5000 events/s",
		"2 partitions × 2 workers", "9091 events/s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "PostgreSQL limit") {
		t.Errorf("a growth-only run printed the other phases:\n%s", text)
	}
}

func TestGrowthChartIsWritten(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "run")
	files, err := sampleGrowth().writeGrowthChart(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v, want an SVG and a PNG", files)
	}
	b, err := os.ReadFile(prefix + "-growth.svg")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CDC drain rate", "Reader peak RSS", "Consumer apply rate", "2 partitions", ">100000<"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestGrowthCheckNamesMissingFigures(t *testing.T) {
	ran := map[string]bool{"growth": true}
	if err := (&Results{}).check(ran); err == nil || !strings.Contains(err.Error(), "growth drains") {
		t.Fatalf("check of a growth run without figures: %v, want growth drains missing", err)
	}
	g := sampleGrowth()
	g.Apply[1].EventsPerSec = 0
	err := (&Results{Growth: g}).check(ran)
	if err == nil || !strings.Contains(err.Error(), "2 partitions × 1 workers") {
		t.Fatalf("check with a zero apply rate: %v, want it named", err)
	}
	if err := (&Results{Growth: sampleGrowth()}).check(ran); err != nil {
		t.Fatalf("check of a complete growth run: %v", err)
	}
}
