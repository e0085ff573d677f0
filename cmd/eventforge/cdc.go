package main

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/cdc"
	"github.com/eventforge/eventforge/internal/metrics"
)

// runCDC runs the reader and, when metricsAddr is set, its /metrics endpoint;
// the endpoint stops with the reader.
func runCDC(env *runEnv, cfg cdc.Config, metricsAddr string) error {
	g, ctx := errgroup.WithContext(env.ctx)
	rctx, stop := context.WithCancel(ctx)
	g.Go(func() error {
		defer stop()
		return cdc.Run(ctx, cfg, env.logger)
	})
	g.Go(func() error { return metrics.Serve(rctx, metricsAddr, env.logger, nil) })
	return g.Wait()
}
