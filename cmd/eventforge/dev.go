package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/consumer"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/schema"
)

type devCmd struct {
	stackFlags
	GRPCAddr string `name:"grpc-addr" help:"gRPC listen address." default:"127.0.0.1:9090"`
	HTTPAddr string `name:"http-addr" help:"HTTP listen address." default:"127.0.0.1:8080"`
}

// Run starts the local stack, migrates, and runs api, cdc and the
// fulfillment consumer until interrupted. PostgreSQL and Kafka keep running
// afterwards (`eventforge stack down` stops them).
func (c *devCmd) Run(env *runEnv) error {
	stackCfg := c.config()
	if stackCfg.StateDir == "" {
		stackCfg.StateDir = localstack.DefaultConfig().StateDir
	}
	release, err := lockDev(stackCfg.StateDir)
	if err != nil {
		return err
	}
	defer release()

	res, err := localstack.Up(env.ctx, stackCfg, env.logger)
	if err != nil {
		return err
	}
	if err := migrate(env, res.PostgresDSN, schema.Slot, false); err != nil {
		return err
	}

	apiCfg := api.DefaultConfig()
	apiCfg.DatabaseURL, apiCfg.GRPCAddr, apiCfg.HTTPAddr = res.PostgresDSN, c.GRPCAddr, c.HTTPAddr
	cdcCfg := cdc.DefaultConfig()
	cdcCfg.DatabaseURL, cdcCfg.KafkaBrokers = res.PostgresDSN, res.KafkaBootstrap
	consCfg := consumer.DefaultConfig()
	consCfg.DatabaseURL, consCfg.KafkaBrokers = res.PostgresDSN, res.KafkaBootstrap

	g, ctx := errgroup.WithContext(env.ctx)
	ready := make(chan api.Addrs, 1)
	g.Go(func() error { return api.RunNotify(ctx, apiCfg, env.logger.With("component", "api"), ready) })
	g.Go(func() error { return cdc.Run(ctx, cdcCfg, env.logger.With("component", "cdc")) })
	g.Go(func() error { return consumer.Run(ctx, consCfg, env.logger.With("component", "consumer")) })
	g.Go(func() error {
		select {
		case addrs := <-ready:
			fmt.Printf(`
EventForge is running.

  REST gateway   http://%[1]s/v1/orders
  gRPC           %[2]s   (eventforge.v1.OrderService)
  Health         http://%[1]s/healthz   http://%[1]s/readyz
  OpenAPI        http://%[1]s/openapi.json
  PostgreSQL     %[3]s
  Kafka          %[4]s   (topic eventforge.orders)

Try:
  curl -s -XPOST %[1]s/v1/orders -d '{"customer_id":"c-1","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":1999}]}'

Press Ctrl-C to stop EventForge; `+"`make stop`"+` stops PostgreSQL and Kafka.
`, addrs.HTTP, addrs.GRPC, res.PostgresDSN, res.KafkaBootstrap)
		case <-ctx.Done():
		}
		return nil
	})
	return g.Wait()
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
