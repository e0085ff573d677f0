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
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/cli"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/logging"
	"github.com/eventforge/eventforge/internal/profiling"
	"github.com/eventforge/eventforge/internal/tracing"
)

// globals are the flags every command shares.
type globals struct {
	LogLevel   string `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	Failpoints string `name:"failpoints" help:"Arm failpoints, e.g. cdc.after_ack_before_confirm=crash (testing and drills only)."`
	PprofAddr  string `name:"pprof-addr" help:"Serve Go runtime profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (empty: off; keep it on loopback)."`

	// Tracing is --otlp-endpoint and --trace-sample-ratio.
	Tracing tracing.Config `embed:""`

	// Kafka is the --kafka-* TLS and SASL settings of the Kafka clients.
	Kafka kafkaconf.Security `embed:""`
}

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
// that are part of the event contract are named in package contract and
// reach the struct tags as ${variables}.
func parserOptions() []kong.Option {
	return []kong.Option{
		kong.Name("eventforge"),
		kong.Description("EventForge: orders with a transactional outbox, CDC to Kafka and idempotent consumers."),
		kong.DefaultEnvars("EVENTFORGE"),
		kong.UsageOnError(),
		kong.Vars{
			"database_url":    contract.DatabaseURL,
			"kafka_brokers":   contract.KafkaBrokers,
			"topic":           contract.Topic,
			"slot":            contract.Slot,
			"publication":     contract.Publication,
			"aggregate_order": contract.AggregateOrder,
			// the consumers (consumer/registry): the choices of `eventforge
			// consumer --name`, the help of `eventforge dlq --consumer`
			"consumer_names":          strings.Join(registry.Names(), ","),
			"consumer_names_in_words": registry.NamesInWords(),
			"consumer_default":        registry.DefaultName,
			"console_consumers":       consoleConsumers(),
		},
	}
}

// consoleConsumers is the default of --console-consumer: every registered
// consumer with its default group, as name=group pairs.
func consoleConsumers() string {
	pairs := make([]string, 0, len(registry.Names()))
	for _, name := range registry.Names() {
		pairs = append(pairs, name+"="+registry.DefaultGroup(name))
	}
	return strings.Join(pairs, ";")
}

// runEnv is what every command's Run receives.
type runEnv struct {
	ctx    context.Context
	logger *slog.Logger
	// kafka is the --kafka-* security settings, for the startup lines.
	kafka kafkaconf.Security
}

func main() {
	cli.Main("eventforge", run)
}

func run() error {
	var c commandLine
	kctx := kong.Parse(&c, parserOptions()...)
	logger, err := logging.New(os.Stderr, c.LogLevel)
	if err != nil {
		return err
	}
	logger = slog.New(tracing.LogHandler(logger.Handler())) // trace_id and span_id on lines logged within a span
	// dev runs several components and labels each itself.
	if component := strings.Fields(kctx.Command())[0]; component != "dev" {
		logger = logger.With("component", component)
	}
	slog.SetDefault(logger)
	if err := kafkaconf.Configure(c.Kafka); err != nil {
		return err
	}
	shutdownTracing, err := tracing.Setup(context.Background(), c.Tracing, strings.Fields(kctx.Command())[0], logger)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()

	if c.Failpoints != "" {
		if err := failpoint.Arm(c.Failpoints); err != nil {
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
	return kctx.Run(&runEnv{ctx: ctx, logger: logger, kafka: c.Kafka})
}
