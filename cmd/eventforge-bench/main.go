// Command eventforge-bench measures EventForge on the local stack (package
// bench): it runs the api, cdc and consumer as processes of the eventforge
// binary beside it and writes the figures, charts and logs. It is a binary
// of its own so that the production binary links no plotting library or
// fonts; `make bench` and `make bench-smoke` build and run it.
//
// `eventforge-bench polling-relay` runs the polling outbox relay the peers
// phase measures (package bench/polling); the benchmark starts it as a
// process of its own, so that its memory and CPU are its own.
//
// Every flag has an EVENTFORGE_* environment fallback, as eventforge's do.
package main

import (
	"log/slog"
	"os"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/bench"
	"github.com/eventforge/eventforge/bench/polling"
	"github.com/eventforge/eventforge/internal/cli"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/logging"
)

type relayCLI struct {
	LogLevel       string `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	polling.Config `embed:""`
}

type commandLine struct {
	LogLevel     string `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	bench.Config `embed:""`
}

func main() {
	cli.Main("eventforge-bench", run)
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == polling.Command {
		return runPollingRelay(os.Args[2:])
	}
	var c commandLine
	parser, err := kong.New(&c,
		kong.Name("eventforge-bench"),
		kong.Description("Measure EventForge's throughput, latency and memory on the local stack."),
		kong.DefaultEnvars("EVENTFORGE"),
	)
	if err != nil {
		return err
	}
	if _, err := cli.Parse(parser, os.Args[1:]); err != nil {
		return err
	}
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

// runPollingRelay parses the relay's flags from args and runs it until
// SIGTERM or Ctrl-C.
func runPollingRelay(args []string) error {
	c, err := parseRelay(args)
	if err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, c.LogLevel)
	if err != nil {
		return err
	}
	logger = logger.With("component", "polling-relay")
	ctx, stop := cli.StopContext()
	defer stop()
	return polling.Run(ctx, c.Config, logger)
}

// parseRelay parses the polling relay's flags; --help prints its usage and
// exits, and flags that do not parse are a usage error (cli.UsageError).
func parseRelay(args []string) (relayCLI, error) {
	var c relayCLI
	parser, err := kong.New(&c, kong.Name("eventforge-bench "+polling.Command),
		kong.Description("Run the polling outbox relay the benchmark's peers phase measures."),
		kong.DefaultEnvars("EVENTFORGE"), config.Vars())
	if err != nil {
		return c, err
	}
	if _, err := cli.Parse(parser, args); err != nil {
		return c, err
	}
	return c, nil
}
