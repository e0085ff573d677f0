// Package e2e holds EventForge's black-box suites: the real binary runs as
// separate OS processes (api, cdc, consumer) against the real local
// PostgreSQL + Kafka stack, and the tests assert durable state — rows,
// committed offsets, slot positions — never just HTTP answers.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binary is the eventforge binary built once for the whole suite, with the
// race detector when the suite runs with it (go test -race).
var binary string

// raceOptions are the race detector's options for every process the suite
// runs (GORACE, inherited by their children): the first data race ends the
// process, so a race fails the test that ran it instead of going unnoticed.
const raceOptions = "halt_on_error=1"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "eventforge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "eventforge")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
		// Processes started with os.Environ() inherit it; options the
		// caller set in GORACE come last and win.
		if err := os.Setenv("GORACE", strings.TrimSpace(raceOptions+" "+os.Getenv("GORACE"))); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	build := exec.Command("go", append(args, "../cmd/eventforge")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building eventforge:", err)
		return 1
	}
	return m.Run()
}

// TestBinaryBuildMode: the binary under test carries the race detector
// exactly when this test binary does, and its processes get raceOptions.
func TestBinaryBuildMode(t *testing.T) {
	out, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", binary, err)
	}
	if built := strings.Contains(string(out), "\tbuild\t-race=true\n"); built != raceEnabled {
		t.Fatalf("binary built with -race: %v; the test binary runs with it: %v", built, raceEnabled)
	}
	if raceEnabled && !strings.HasPrefix(os.Getenv("GORACE"), raceOptions) {
		t.Fatalf("GORACE=%q for the processes under test, want it to start with %q", os.Getenv("GORACE"), raceOptions)
	}
}
