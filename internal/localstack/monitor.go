package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/eventforge/eventforge/internal/filelock"
	"github.com/eventforge/eventforge/internal/freeport"
	"github.com/eventforge/eventforge/internal/promserver"
)

const (
	// promReadyTimeout bounds how long Monitor waits for Prometheus to
	// answer after starting it.
	promReadyTimeout = 60 * time.Second
	// promStopTimeout is how long Down waits after SIGTERM before it kills
	// Prometheus.
	promStopTimeout = 30 * time.Second
)

// MonitorDir is the directory of the Prometheus that Monitor runs for the
// state dir stateDir: its configuration, its data, and the targets files
// (promserver.WriteTargets) that `eventforge dev` writes for its
// components, whichever of the two starts first.
func MonitorDir(stateDir string) string { return filepath.Join(stateDir, "prometheus") }

// MonitorResult is what Monitor did.
type MonitorResult struct {
	// URL is where Prometheus answers, e.g. http://127.0.0.1:40123.
	URL string
	// Dir is its directory (MonitorDir).
	Dir string
	// Started is true when this call started it, false when it was
	// already running.
	Started bool
}

// Monitor makes sure a real Prometheus runs for cfg's state dir with the
// shipped jobs and alert rules (promserver.Write), scraping the targets
// `eventforge dev` writes into MonitorDir, on a free loopback port, with
// its data in MonitorDir. It is idempotent and keeps running after the
// calling process exits; Down stops it with the rest of the stack. A
// missing prometheus program is an error that says how to install it.
func Monitor(ctx context.Context, cfg Config, log *slog.Logger) (MonitorResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return MonitorResult{}, fmt.Errorf("validating local stack config: %w", err)
	}
	l := newLayout(cfg.StateDir)
	res := MonitorResult{Dir: l.promDir}
	if err := os.MkdirAll(l.promDir, 0o755); err != nil {
		return res, fmt.Errorf("creating %s: %w", l.promDir, err)
	}
	unlock, err := filelock.Lock(ctx, l.lock, "state dir", log)
	if err != nil {
		return res, err
	}
	defer unlock()
	if pid := prometheusPID(l); pid != 0 {
		addr, _ := os.ReadFile(l.promAddr)
		res.URL = "http://" + strings.TrimSpace(string(addr))
		log.Info("prometheus already running", "pid", pid, "url", res.URL)
		return res, promserver.WaitReady(ctx, res.URL, func() bool { return !alive(pid) })
	}
	bin, err := promserver.Binary()
	if err != nil {
		return res, err
	}
	if err := promserver.Write(l.promDir, promserver.Options{}); err != nil {
		return res, fmt.Errorf("writing the prometheus configuration: %w", err)
	}
	addr, err := freeport.Addr()
	if err != nil {
		return res, err
	}
	pid, err := startPrometheus(l, bin, addr)
	if err != nil {
		return res, fmt.Errorf("starting prometheus: %w", err)
	}
	res.URL, res.Started = "http://"+addr, true
	wctx, cancel := context.WithTimeout(ctx, promReadyTimeout)
	defer cancel()
	if err := promserver.WaitReady(wctx, res.URL, func() bool { return !alive(pid) }); err != nil {
		return res, withLogs(err, l.promLog)
	}
	log.Info("prometheus started", "pid", pid, "url", res.URL, "dir", l.promDir)
	return res, nil
}

// startPrometheus starts Prometheus detached in its own session, with
// output to its log, and records its pid and address.
func startPrometheus(l layout, bin, addr string) (int, error) {
	out, err := os.OpenFile(l.promLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", l.promLog, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "\n=== starting prometheus at %s ===\n", time.Now().UTC().Format(time.RFC3339))
	cmd := promserver.Command(bin, l.promDir, addr)
	cmd.Dir = l.promDir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it if it exits while this process lives
	if err := os.WriteFile(l.promAddr, []byte(addr+"\n"), 0o644); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 0, err
	}
	if err := os.WriteFile(l.promPID, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 0, err
	}
	return pid, nil
}

// prometheusPID returns the pid of this state dir's live Prometheus, or 0.
func prometheusPID(l layout) int {
	pid := readPID(l.promPID)
	if !alive(pid) || !strings.Contains(cmdline(pid), filepath.Join(l.promDir, promserver.ConfigFile)) {
		return 0 // gone, or the pid was reused by another process
	}
	return pid
}

// stopPrometheus stops this state dir's Prometheus: SIGTERM, then SIGKILL
// after promStopTimeout. It does nothing when none runs.
func stopPrometheus(ctx context.Context, l layout, log *slog.Logger) error {
	pid := prometheusPID(l)
	if pid == 0 {
		return nil
	}
	if err := signalGroup(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping prometheus (pid %d): %w", pid, err)
	}
	if !waitExit(ctx, pid, promStopTimeout) {
		log.Warn("prometheus did not stop in time, killing it", "pid", pid)
		if err := signalGroup(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing prometheus (pid %d): %w", pid, err)
		}
		if !waitExit(context.WithoutCancel(ctx), pid, 10*time.Second) {
			return errors.New("killing prometheus: still alive")
		}
	}
	log.Info("prometheus stopped", "pid", pid)
	return nil
}
