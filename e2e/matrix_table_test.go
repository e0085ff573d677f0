package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/verify"
)

func TestWriteMatrixTable(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "g.md")
	if err := os.WriteFile(doc, []byte("intro\n"+matrixBegin+"\nold\n"+matrixEnd+"\noutro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := verify.Report{LogicalEvents: 1, Deliveries: 2, DuplicateDeliveries: 1, BusinessChanges: map[string]int{"fulfillment": 1}}
	results := []runResult{
		{window: "w1", passed: true, duration: 2 * time.Second, rep: rep, verified: true},
		{window: "w1", passed: false, duration: 3 * time.Second},
	}
	if err := writeMatrixTable(doc, 2, "0123456789ab", results); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(doc)
	s := string(got)
	for _, want := range []string{"intro\n", "\noutro\n", "commit 0123456789ab (2 runs per window", "| w1 | 1/2 | 1 | 2 | 1 | 1 | 0 | 0 | 0 | 0 | 3 s |"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "old") {
		t.Errorf("old table kept:\n%s", s)
	}
	if err := writeMatrixTable(filepath.Join(t.TempDir(), "missing.md"), 1, "0123456789ab", nil); err == nil {
		t.Error("missing document accepted")
	}
}
