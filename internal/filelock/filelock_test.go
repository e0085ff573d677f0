package filelock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// A held lock keeps a second taker waiting until the first unlocks; a taker
// whose context ends stops waiting with the context's error.
func TestLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	unlock, err := Lock(t.Context(), path, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path, "test", log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock while held: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := Lock(t.Context(), path, "test", log)
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
}
