package main

import (
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/api"
	"github.com/eventforge/eventforge/console"
)

// runAPIWithConsole runs the order service with the console mounted on its
// HTTP mux (/ui/ and /api/ops/). procs is the dev supervisor (nil for
// `eventforge api --console`); ready, if not nil, receives the api's
// addresses. The caller has checked consCfg.CheckExposure.
func runAPIWithConsole(env *runEnv, apiCfg api.Config, consCfg console.Config, procs console.Processes, ready chan<- api.Addrs) error {
	consCfg.DatabaseURL = apiCfg.DatabaseURL
	env.logger.Info("console enabled", "path", "/ui/", "drills", consCfg.EnableDrills, "ops_token_set", consCfg.OpsToken != "",
		"kafka_brokers", consCfg.KafkaBrokers, "topic", consCfg.Topic, "slot", consCfg.Slot, "consumers", consCfg.Consumers,
		"metrics_sources", consCfg.MetricsSources)
	cons, err := console.New(env.ctx, consCfg, procs, env.logger.With("component", "console"))
	if err != nil {
		return err
	}
	apiCfg.Handlers = map[string]http.Handler{}
	for _, p := range console.Patterns {
		apiCfg.Handlers[p] = cons.Handler()
	}
	g, ctx := errgroup.WithContext(env.ctx)
	g.Go(func() error { return cons.Run(ctx) })
	g.Go(func() error { return api.Run(ctx, apiCfg, env.logger, api.NotifyReady(ready)) })
	return g.Wait()
}
