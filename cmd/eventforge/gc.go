package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// apiGCPercent is the api's garbage collection target when GOGC is not set.
// The api keeps a small live heap and allocates on every order (decoded
// requests, encoded statements, the JSON payload), all of it short-lived.
// Go's default (GOGC=100, a 4 MiB minimum heap goal) then collects many
// times a second under load, each cycle scanning every goroutine's stack.
// At 400 the collector runs about a quarter as often, for a larger heap;
// docs/bench.md (*Stream workers and the collector's target*) has what
// that saved and what it cost.
const apiGCPercent = 400

// setGCPercent sets the collector's target to percent unless the operator
// chose one with GOGC, which always wins.
func setGCPercent(percent int, logger *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		logger.Debug("GOGC set by the environment", "gogc", v)
		return
	}
	debug.SetGCPercent(percent)
}
