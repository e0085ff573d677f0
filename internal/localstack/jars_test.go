package localstack

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveJarsKeepsTheJarsOfTheSamePom checks that a class path resolved
// from the same pom is reused without running Maven, and that another pom
// runs it (here a program that fails, so nothing is replaced).
func TestResolveJarsKeepsTheJarsOfTheSamePom(t *testing.T) {
	dir := t.TempDir()
	libs := filepath.Join(dir, "libs")
	if err := os.MkdirAll(libs, 0o755); err != nil {
		t.Fatal(err)
	}
	pom := []byte("<project/>")
	if err := os.WriteFile(filepath.Join(libs, pomHashFile), []byte(pomHash(pom)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := resolveJars(t.Context(), dir, libs, pom, "/bin/false", log); err != nil {
		t.Errorf("same pom: %v", err)
	}
	err := resolveJars(t.Context(), dir, libs, []byte("<project><!-- changed --></project>"), "/bin/false", log)
	if err == nil || !strings.Contains(err.Error(), "running mvn") {
		t.Errorf("changed pom: got %v, want the failing mvn's error", err)
	}
	if _, err := os.Stat(filepath.Join(libs, pomHashFile)); err != nil {
		t.Errorf("a failed resolution removed the old class path: %v", err)
	}
}

// TestResolveJarsRefusesStackDirectories checks that a class path name can
// name no directory the stack keeps its services in.
func TestResolveJarsRefusesStackDirectories(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, name := range []string{"", "kafka", "pg", "pg17", "../debezium", "a/b"} {
		if _, err := ResolveJars(t.Context(), Config{StateDir: t.TempDir()}, name, []byte("<project/>"), log); err == nil ||
			!strings.Contains(err.Error(), "class path name") {
			t.Errorf("name %q: got %v, want a refusal", name, err)
		}
	}
}
