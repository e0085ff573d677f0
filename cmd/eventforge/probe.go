package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeCmd checks an HTTP health endpoint, for container health checks in
// images without a shell or curl (deploy/compose): exit status 0 when the
// URL answers 2xx within the timeout, 1 otherwise.
type probeCmd struct {
	URL     string        `arg:"" name:"url" log:"url" help:"URL to GET, e.g. http://127.0.0.1:8080/readyz."`
	Timeout time.Duration `name:"timeout" help:"How long to wait for the answer." default:"3s"`
}

func (c *probeCmd) Run(env *runEnv) error {
	ctx, cancel := context.WithTimeout(env.ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return fmt.Errorf("probing %s: %w", c.URL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probing %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("probing %s: %s", c.URL, resp.Status)
	}
	return nil
}
