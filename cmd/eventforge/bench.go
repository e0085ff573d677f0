package main

import "github.com/eventforge/eventforge/bench"

type benchCmd struct {
	bench.Config `embed:""`
}

func (c *benchCmd) Run(env *runEnv) error {
	return bench.Run(env.ctx, c.Config, env.logger)
}
