package main

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/internal/metrics"
)

// runCDC runs the reader and, when metricsAddr is set, its /metrics endpoint
// with /readyz reporting the reader's health (cdc.Health); the endpoint
// stops with the reader.
func runCDC(env *runEnv, cfg cdc.Config, metricsAddr string) error {
	g, ctx := errgroup.WithContext(env.ctx)
	rctx, stop := context.WithCancel(ctx)
	health := &cdc.Health{}
	g.Go(func() error {
		defer stop()
		return cdc.Run(ctx, cfg, env.logger, cdc.WithHealth(health))
	})
	g.Go(func() error { return metrics.ServeReady(rctx, metricsAddr, env.logger, nil, health.Ready) })
	return g.Wait()
}
