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
	"testing"
)

// binary is the eventforge binary built once for the whole suite.
var binary string

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
	build := exec.Command("go", "build", "-o", binary, "../cmd/eventforge")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building eventforge:", err)
		return 1
	}
	return m.Run()
}
