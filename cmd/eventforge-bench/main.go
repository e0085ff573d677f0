// Command eventforge-bench measures EventForge on the local stack (package
// bench): it runs the api, cdc and consumer as processes of the eventforge
// binary beside it and writes the figures, charts and logs. It is a binary
// of its own so that the production binary links no plotting library or
// fonts; `make bench` and `make bench-smoke` build and run it.
//
// Every flag has an EVENTFORGE_* environment fallback, as eventforge's do.
package main

import (
	"log/slog"
	"os"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/bench"
	"github.com/eventforge/eventforge/internal/cli"
	"github.com/eventforge/eventforge/internal/logging"
)

type commandLine struct {
	LogLevel     string `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	bench.Config `embed:""`
}

func main() {
	cli.Main("eventforge-bench", run)
}

func run() error {
	var c commandLine
	kong.Parse(&c,
		kong.Name("eventforge-bench"),
		kong.Description("Measure EventForge's throughput, latency and memory on the local stack."),
		kong.DefaultEnvars("EVENTFORGE"),
		kong.UsageOnError(),
	)
	logger, err := logging.New(os.Stderr, c.LogLevel)
	if err != nil {
		return err
	}
	logger = logger.With("component", "bench")
	slog.SetDefault(logger)
	ctx, stop := cli.StopContext()
	defer stop()
	return bench.Run(ctx, c.Config, logger)
}
