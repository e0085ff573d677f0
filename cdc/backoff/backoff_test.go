package backoff

import (
	"context"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Max: time.Second}
	var last time.Duration
	for range 10 {
		last = b.Next(0)
		if last > time.Second {
			t.Fatalf("backoff %v exceeds the cap", last)
		}
	}
	if last < 500*time.Millisecond {
		t.Fatalf("backoff after 10 failures = %v, want at least half the cap", last)
	}
	if got := b.Next(2 * time.Minute); got > 250*time.Millisecond {
		t.Fatalf("backoff after a long run = %v, want a fresh start", got)
	}
}

func TestJitterAndSleep(t *testing.T) {
	for range 100 {
		if d := Jitter(time.Second); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("Jitter(1s) = %v, want within 20%%", d)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context reported the wait passed")
	}
	if !Sleep(t.Context(), time.Millisecond) {
		t.Fatal("Sleep of 1ms did not report the wait passed")
	}
}
