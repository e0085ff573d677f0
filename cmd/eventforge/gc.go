package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// apiGCPercent is the api's garbage collection target when GOGC is not set.
// The api keeps a live heap of a few MiB and allocates tens of KiB per
// order (decoded requests, encoded statements, the JSON payload), all of it
// short-lived. Go's default (GOGC=100, a 4 MiB minimum heap goal) then
// collects every few MiB: dozens of cycles a second at a few thousand
// orders/s, each scanning every goroutine's stack. At 400 the collector
// runs a quarter as often, for a larger heap (the api's peak RSS in
// make bench's closed loops rose from about 50 to about 70 MiB); with the
// gRPC stream workers, the api's CPU per order in the gRPC closed loop fell
// by a fifth or more (docs/bench.md).
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
