package promserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"
)

// Program is the Prometheus server program, as Debian's package prometheus
// installs it.
const Program = "prometheus"

// InstallHint is the command that installs Program (and promtool).
const InstallHint = "sudo apt-get install --no-install-recommends prometheus (or `make prometheus-deps` as root)"

// Binary returns the path of Program, or an error that says how to install
// it.
func Binary() (string, error) {
	path, err := exec.LookPath(Program)
	if err != nil {
		return "", fmt.Errorf("the Prometheus server is missing (%w): run %s", err, InstallHint)
	}
	return path, nil
}

// Command returns the command that serves Prometheus on addr (host:port)
// with the configuration Write wrote into dir, keeping its data in
// dir/DataDir. It logs to stderr.
func Command(bin, dir, addr string) *exec.Cmd {
	return exec.Command(bin,
		"--config.file="+filepath.Join(dir, ConfigFile),
		"--storage.tsdb.path="+filepath.Join(dir, DataDir),
		"--storage.tsdb.retention.time=7d",
		"--web.listen-address="+addr,
	)
}

// WaitReady waits until the Prometheus at url answers /-/ready, and fails
// when ctx ends first or exited (nil: not asked) reports that the process
// is gone.
func WaitReady(ctx context.Context, url string, exited func() bool) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if exited != nil && exited() {
			return errors.New("prometheus exited before it was ready")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for prometheus at %s: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
