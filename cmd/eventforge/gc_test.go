package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

func TestSetGCPercentDefersToGOGC(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := debug.SetGCPercent(123)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "123")
	setGCPercent(apiGCPercent, logger)
	if got := debug.SetGCPercent(123); got != 123 {
		t.Fatalf("with GOGC=123 set, the GC percent became %d; the environment must win", got)
	}

	if err := os.Unsetenv("GOGC"); err != nil { // t.Setenv restores it
		t.Fatal(err)
	}
	setGCPercent(apiGCPercent, logger)
	if got := debug.SetGCPercent(123); got != apiGCPercent {
		t.Fatalf("without GOGC, the GC percent is %d, want %d", got, apiGCPercent)
	}
}
