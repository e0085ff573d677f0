// Command eventforge is EventForge's single binary: the order API, the CDC
// reader, the consumers, migrations, and a dev mode that starts a local real
// stack (PostgreSQL + Kafka) and runs everything in one process.
//
// Every flag has an EVENTFORGE_* environment fallback (e.g. --database-url
// and EVENTFORGE_DATABASE_URL); `eventforge <command> --help` lists them.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/cli"
	"github.com/eventforge/eventforge/internal/config"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/logging"
	"github.com/eventforge/eventforge/internal/pgbin"
	"github.com/eventforge/eventforge/internal/profiling"
	"github.com/eventforge/eventforge/internal/tracing"
)

// globals are the flags every command shares.
type globals struct {
	LogLevel   string           `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	Failpoints string           `name:"failpoints" help:"Arm failpoints, e.g. cdc.after_ack_before_confirm=crash (testing and drills only)."`
	PprofAddr  string           `name:"pprof-addr" help:"Serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (empty: off; keep it on loopback)."`
	Version    kong.VersionFlag `name:"version" env:"-" help:"Print the version and the commit the binary was built from, then exit."`
}

// kafkaFlags are the TLS and SASL settings of the Kafka clients
// (--kafka-*). Every command that talks to Kafka embeds them (a test holds
// each command with --kafka-brokers to it), and run installs them
// (kafkaconf.Configure) before the command runs.
type kafkaFlags struct {
	Kafka kafkaconf.Security `embed:"" group:"Kafka TLS and SASL"`
}

func (f *kafkaFlags) kafkaSecurity() kafkaconf.Security { return f.Kafka }

// tracingFlags are --otlp-endpoint and --trace-sample-ratio. The commands
// that create spans embed them (the api, cdc, the consumers, dev, and the
// outbox replays, which publish through cdc's sink), and run sets up
// tracing for them; other commands run without a tracer.
type tracingFlags struct {
	Tracing tracing.Config `embed:"" group:"Tracing"`
}

func (f *tracingFlags) tracingConfig() tracing.Config { return f.Tracing }

type commandLine struct {
	globals

	API      apiCmd      `cmd:"" name:"api" help:"Run the order service (gRPC + REST gateway)."`
	CDC      cdcCmd      `cmd:"" name:"cdc" help:"Run the CDC reader: replication slot → Kafka."`
	Consumer consumerCmd `cmd:"" name:"consumer" help:"Run an idempotent consumer."`
	Migrate  migrateCmd  `cmd:"" name:"migrate" help:"Apply database migrations and create the replication slot."`
	Dev      devCmd      `cmd:"" name:"dev" help:"Start the local stack and run api + cdc + consumer in one process."`
	Stack    stackCmd    `cmd:"" name:"stack" help:"Manage the local PostgreSQL + Kafka stack."`
	DLQ      dlqCmd      `cmd:"" name:"dlq" help:"Triage dead-lettered records: list, show, replay, purge."`
	Slot     slotCmd     `cmd:"" name:"slot" help:"Inspect or drop the CDC replication slot."`
	Outbox   outboxCmd   `cmd:"" name:"outbox" help:"Operate on the outbox: replay stored events."`
	Verify   verifyCmd   `cmd:"" name:"verify" help:"Audit durable state: lost events, duplicate effects, ordering."`
	Probe    probeCmd    `cmd:"" name:"probe" help:"Check an HTTP health endpoint (container health checks)."`
}

// parserOptions are the options of the command line parser. Flag defaults
// that are part of the event contract, and the registered consumers, reach
// the struct tags as ${variables} (config.Vars), the same ones each
// component's DefaultConfig reads its tags with.
func parserOptions() []kong.Option {
	return []kong.Option{
		kong.Name("eventforge"),
		kong.Description("EventForge: orders with a transactional outbox, CDC to Kafka and idempotent consumers."),
		kong.DefaultEnvars("EVENTFORGE"),
		config.Vars(registry.FlagVars(), flagVars()),
	}
}

// flagVars are the ${variables} of the flag tags only this binary's
// commands use: the --version line, the classes a dead letter can carry
// (--class of dlq list and replay) and the PostgreSQL versions of the local
// stack (--pg-version).
func flagVars() map[string]string {
	classes := make([]string, 0, len(engine.Classes()))
	for _, c := range engine.Classes() {
		classes = append(classes, string(c))
	}
	var versions []string
	for _, v := range pgbin.Supported() {
		versions = append(versions, strconv.Itoa(v))
	}
	return map[string]string{
		"version":                "eventforge " + cli.Version(),
		"error_classes":          strings.Join(classes, ","),
		"error_classes_in_words": strings.Join(classes, ", "),
		"pg_versions":            strings.Join(versions, ","),
		"pg_default":             strconv.Itoa(localstack.DefaultPGVersion),
	}
}

// runEnv is what every command's Run receives.
type runEnv struct {
	ctx    context.Context
	logger *slog.Logger
}

func main() {
	cli.Main("eventforge", run)
}

func run() error {
	var c commandLine
	parser, err := kong.New(&c, parserOptions()...)
	if err != nil {
		return err
	}
	kctx, err := cli.Parse(parser, os.Args[1:])
	if err != nil {
		return err
	}
	component := strings.Fields(kctx.Command())[0]
	logger, err := logging.New(os.Stderr, c.LogLevel)
	if err != nil {
		return err
	}
	logger = slog.New(tracing.LogHandler(logger.Handler())) // trace_id and span_id on lines logged within a span
	// dev runs several components and labels each itself.
	if component != "dev" {
		logger = logger.With("component", component)
	}
	slog.SetDefault(logger)
	// The settings the selected command embeds; flags that do not go
	// together are usage errors, as kong's own checks.
	selected := kctx.Selected()
	cmd := selected.Target.Addr().Interface()
	if k, ok := cmd.(interface{ kafkaSecurity() kafkaconf.Security }); ok {
		if err := kafkaconf.Configure(k.kafkaSecurity()); err != nil {
			return &cli.UsageError{Command: selected.FullPath(), Err: err}
		}
	}
	if tr, ok := cmd.(interface{ tracingConfig() tracing.Config }); ok {
		if err := tr.tracingConfig().Validate(); err != nil {
			return &cli.UsageError{Command: selected.FullPath(), Err: err}
		}
		shutdownTracing, err := tracing.Setup(context.Background(), tr.tracingConfig(), component, logger)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = shutdownTracing(sctx)
		}()
	}
	if err := armFailpoints(c.Failpoints, logger); err != nil {
		return err
	}

	ctx, stop := cli.StopContext()
	defer stop()
	profiles, err := profiling.Listen(c.PprofAddr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	go func() {
		if err := profiling.Serve(ctx, profiles, logger); err != nil {
			logger.Error("profiles endpoint stopped", "err", err)
		}
	}()
	return kctx.Run(&runEnv{ctx: ctx, logger: logger})
}

// armFailpoints arms the failpoints of --failpoints, or else of the
// environment (failpoint.EnvVar), and logs each one that fires.
func armFailpoints(flag string, logger *slog.Logger) error {
	if flag != "" {
		if err := failpoint.Arm(flag); err != nil {
			return fmt.Errorf("--failpoints: %w", err)
		}
	} else if err := failpoint.ArmFromEnv(); err != nil {
		return fmt.Errorf("%s: %w", failpoint.EnvVar, err)
	}
	if armed := failpoint.Armed(); len(armed) > 0 {
		logger.Warn("failpoints armed", "failpoints", armed)
		failpoint.OnFire = func(name string, action failpoint.Action) {
			logger.Warn("failpoint fired", "failpoint", name, "action", action.String())
		}
	}
	return nil
}
