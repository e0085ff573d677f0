package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/consumer/registry"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/freeport"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/promserver"
)

type devCmd struct {
	stackFlags
	GRPCAddr     string `name:"grpc-addr" help:"gRPC listen address." default:"127.0.0.1:9090"`
	HTTPAddr     string `name:"http-addr" help:"HTTP listen address (REST, health, console)." default:"127.0.0.1:8080"`
	DatabaseURL  string `name:"database-url" log:"url" help:"Use this PostgreSQL instead of starting the local stack (with --kafka-brokers)."`
	KafkaBrokers string `name:"kafka-brokers" help:"Use this Kafka instead of starting the local stack (with --database-url)."`
	Slot         string `name:"slot" help:"Replication slot of the CDC reader." default:"${slot}"`
	Topic        string `name:"topic" help:"Topic of the order events." default:"${topic}"`
	GroupPrefix  string `name:"group-prefix" help:"Consumer groups are <prefix><consumer name>." default:"eventforge-"`
	OpsToken     string `name:"ops-token" log:"secret" help:"Require this bearer token on the console's ops API (required when --http-addr is not a loopback address)."`
	kafkaFlags
	tracingFlags
}

// Validate refuses flags that do not go together, while kong parses the
// command line (usage errors).
func (c *devCmd) Validate() error {
	if c.OpsToken == "" && !console.Loopback(c.HTTPAddr) {
		return fmt.Errorf("dev serves the console and its drills on --http-addr %s, which is not a loopback address: "+
			"set --ops-token (EVENTFORGE_OPS_TOKEN) or listen on 127.0.0.1", c.HTTPAddr)
	}
	if (c.DatabaseURL == "") != (c.KafkaBrokers == "") {
		return errors.New("--database-url and --kafka-brokers go together")
	}
	return nil
}

// Run starts the local stack (unless --database-url and --kafka-brokers
// name one), migrates, runs the api with the console (drills on) in this
// process, and supervises cdc and every consumer as child processes of the
// same binary: a child that dies is restarted. PostgreSQL and Kafka keep
// running afterwards (`eventforge stack down` stops them).
func (c *devCmd) Run(env *runEnv) error {
	external := c.DatabaseURL != ""
	lockDir := c.lockDir(external)
	release, err := lockDev(lockDir)
	if err != nil {
		return err
	}
	defer release()
	setGCPercent(apiGCPercent, env.logger) // this process serves the api; cdc and consumers are children

	dsn, brokers := c.DatabaseURL, c.KafkaBrokers
	if !external {
		stackCfg := c.config()
		stackCfg.StateDir = lockDir
		res, err := localstack.Up(env.ctx, stackCfg, env.logger)
		if err != nil {
			return err
		}
		dsn, brokers = res.PostgresDSN, res.KafkaBootstrap
	}
	if err := migrate(env, dsn, c.Slot, false); err != nil {
		return err
	}
	binary, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the eventforge binary: %w", err)
	}

	consCfg := console.DefaultConfig()
	consCfg.Enabled, consCfg.EnableDrills, consCfg.OpsToken, consCfg.KafkaBrokers = true, true, c.OpsToken, brokers
	consCfg.Topic, consCfg.Slot = c.Topic, c.Slot
	consCfg.Consumers, consCfg.MetricsSources = map[string]string{}, map[string]string{}

	sup := newSupervisor(binary, os.Stderr, env.logger.With("component", "supervisor"))
	targets, err := c.addChildren(sup, &consCfg, dsn, brokers)
	if err != nil {
		return err
	}

	apiCfg := api.DefaultConfig()
	apiCfg.DatabaseURL, apiCfg.GRPCAddr, apiCfg.HTTPAddr = dsn, c.GRPCAddr, c.HTTPAddr

	g, ctx := errgroup.WithContext(env.ctx)
	ready := make(chan api.Addrs, 1)
	g.Go(func() error {
		return runAPIWithConsole(&runEnv{ctx: ctx, logger: env.logger.With("component", "api")}, apiCfg, consCfg, sup, ready)
	})
	g.Go(func() error {
		sup.run(ctx)
		return nil
	})
	g.Go(func() error {
		select {
		case addrs := <-ready:
			targets[promserver.Job("api")] = []string{addrs.HTTP}
			if err := writeMonitorTargets(lockDir, targets); err != nil {
				env.logger.Warn("writing the monitor's targets", "err", err)
			}
			printBanner(addrs, dsn, brokers, consCfg.MetricsSources, c.Topic)
		case <-ctx.Done():
		}
		return nil
	})
	return g.Wait()
}

// addChildren adds cdc and every consumer to sup, each exporting its
// metrics on a free loopback address that consCfg lists, and reading dev's
// Kafka security and tracing settings from its environment. It returns
// those addresses by scrape job (promserver.Job).
func (c *devCmd) addChildren(sup *supervisor, consCfg *console.Config, dsn, brokers string) (map[string][]string, error) {
	targets := map[string][]string{}
	// Failpoints given to dev arm each child's first process.
	initial := os.Getenv(failpoint.EnvVar)
	settings := append(flagEnv(c.Kafka), flagEnv(c.Tracing)...)
	addChild := func(name string, args ...string) error {
		addr, err := freeport.Addr()
		if err != nil {
			return err
		}
		env := append(slices.Clone(settings), "EVENTFORGE_METRICS_ADDR="+addr)
		sup.add(childSpec{name: name, args: args, env: env, initialFailpoints: initial})
		job := promserver.Job(args[0]) // the command: cdc or consumer
		targets[job] = append(targets[job], addr)
		consCfg.MetricsSources[name] = "http://" + addr + "/metrics"
		return nil
	}
	if err := addChild("cdc", "cdc", "--database-url", dsn, "--kafka-brokers", brokers, "--slot", c.Slot, "--topic", "order="+c.Topic); err != nil {
		return nil, err
	}
	for _, name := range devConsumers() {
		group := c.GroupPrefix + name
		consCfg.Consumers[name] = group
		if err := addChild("consumer-"+name, "consumer", "--database-url", dsn, "--kafka-brokers", brokers,
			"--name", name, "--group", group, "--topics", c.Topic); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

// writeMonitorTargets writes the metrics addresses of dev's components,
// by scrape job, where the Prometheus of `eventforge stack monitor` on the
// state dir stateDir reads them; a monitor that runs picks them up at once.
func writeMonitorTargets(stateDir string, targets map[string][]string) error {
	for job, addrs := range targets {
		if err := promserver.WriteTargets(localstack.MonitorDir(stateDir), job, addrs); err != nil {
			return err
		}
	}
	return nil
}

// flagEnv returns, for each flag of the struct flags that holds a value, its
// EVENTFORGE_* variable set to that value (kong.DefaultEnvars' names): the
// environment of a child process that is to run with the same settings.
func flagEnv(flags any) []string {
	v := reflect.ValueOf(flags)
	var env []string
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("name")
		if name == "" || v.Field(i).IsZero() {
			continue
		}
		key := "EVENTFORGE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		env = append(env, fmt.Sprintf("%s=%v", key, v.Field(i).Interface()))
	}
	return env
}

// lockDir is the directory of dev's lock: the local stack's state
// directory, or one per database and slot for an external stack.
func (c *devCmd) lockDir(external bool) string {
	if external {
		sum := sha256.Sum256([]byte(c.DatabaseURL + "\x00" + c.Slot))
		return filepath.Join(os.TempDir(), "eventforge-dev-"+hex.EncodeToString(sum[:6]))
	}
	if c.StateDir == "" {
		return localstack.DefaultConfig().StateDir
	}
	return c.StateDir
}

// printBanner tells the user where dev's endpoints are.
func printBanner(addrs api.Addrs, dsn, brokers string, metricsSources map[string]string, topic string) {
	fmt.Printf(`
EventForge is running.

  Console        http://%[1]s/ui/
  REST gateway   http://%[1]s/v1/orders
  gRPC           %[2]s   (eventforge.v1.OrderService)
  Health         http://%[1]s/healthz   http://%[1]s/readyz
  OpenAPI        http://%[1]s/openapi.json
  Metrics        http://%[1]s/metrics   %[5]s
  PostgreSQL     %[3]s
  Kafka          %[4]s   (topic %[6]s)

Try:
  curl -s -XPOST %[1]s/v1/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: try-1' -d '{"customer_id":"c-1","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":1999}]}'

Press Ctrl-C to stop EventForge; `+"`make stop`"+` stops PostgreSQL and Kafka.
`, addrs.HTTP, addrs.GRPC, dsn, brokers, metricsList(metricsSources), topic)
}

// devConsumers lists the consumers dev runs: every registered one.
func devConsumers() []string {
	return registry.Names()
}

func metricsList(sources map[string]string) string {
	parts := make([]string, 0, len(sources))
	for _, name := range sortedNames(sources) {
		parts = append(parts, name+" "+sources[name])
	}
	return strings.Join(parts, "   ")
}

func sortedNames(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// lockDev makes sure one dev process runs per state dir: a second one would
// compete for the ports and the replication slot.
func lockDev(stateDir string) (release func(), err error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	path := filepath.Join(stateDir, "dev.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another `eventforge dev` (pid %s) already runs on this stack; stop it first (Ctrl-C in its terminal) — the stack itself is shared and untouched", strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
