package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/internal/childproc"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// supervisor runs components of `eventforge dev` as child processes of the
// same binary and restarts a child that dies, so a crash failpoint kills
// only that child. It implements console.Processes for the drills.
type supervisor struct {
	binary string
	logger *slog.Logger
	output io.Writer
	// stopTimeout bounds the graceful stop (SIGTERM to the child) before
	// SIGKILL to its process group.
	stopTimeout time.Duration
	// minBackoff and maxBackoff bound the wait before restarting a child
	// that died.
	minBackoff, maxBackoff time.Duration

	mu       sync.Mutex
	children map[string]*child
	order    []string
	wg       sync.WaitGroup
}

// childSpec is how to run one component.
type childSpec struct {
	name string
	args []string // after the binary: e.g. cdc --database-url ...
	env  []string // extra environment entries
	// initialFailpoints arm the first process only.
	initialFailpoints string
}

type child struct {
	spec    childSpec
	state   console.Component
	restart chan string // failpoints for the next process
}

func newSupervisor(binary string, output io.Writer, logger *slog.Logger) *supervisor {
	return &supervisor{binary: binary, output: output, logger: logger, stopTimeout: 15 * time.Second,
		minBackoff: 250 * time.Millisecond, maxBackoff: 5 * time.Second, children: map[string]*child{}}
}

// add registers a component; start runs them.
func (s *supervisor) add(spec childSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.children[spec.name] = &child{spec: spec, state: console.Component{Name: spec.name}, restart: make(chan string, 1)}
	s.order = append(s.order, spec.name)
}

// run starts every component and keeps them running until ctx is
// cancelled; it then stops them all (SIGTERM, then SIGKILL to each one's
// process group) and returns.
func (s *supervisor) run(ctx context.Context) {
	s.mu.Lock()
	for _, name := range s.order {
		ch := s.children[name]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.keep(ctx, ch)
		}()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// keep runs one child until ctx ends, restarting it when it dies or when a
// restart is requested.
func (s *supervisor) keep(ctx context.Context, ch *child) {
	backoff := s.minBackoff
	failpoints := ch.spec.initialFailpoints
	for ctx.Err() == nil {
		started := time.Now()
		p, err := s.start(ch, failpoints)
		if err != nil {
			s.logger.Error("starting component", "component", ch.spec.name, "err", err)
		} else {
			select {
			case <-p.Exited():
				s.exited(ch, p.Err())
				if ctx.Err() != nil {
					return
				}
				s.logger.Warn("component exited; restarting", "component", ch.spec.name, "exit", describeExit(p.Err()), "backoff", backoff)
			case failpoints = <-ch.restart:
				p.Stop(s.stopTimeout)
				s.exited(ch, p.Err())
				s.logger.Info("component restarted on request", "component", ch.spec.name, "failpoints", failpoints)
				backoff = s.minBackoff
				continue
			case <-ctx.Done():
				p.Stop(s.stopTimeout)
				s.exited(ch, p.Err())
				return
			}
		}
		failpoints = "" // armed for one process only
		if time.Since(started) > 30*time.Second {
			backoff = s.minBackoff
		}
		select {
		case <-ctx.Done():
			return
		case failpoints = <-ch.restart:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.maxBackoff)
	}
}

// start runs one process of ch with childproc: in a process group of its
// own, so a terminal's Ctrl-C reaches the supervisor only, which then
// stops the children in order; Stop's SIGKILL, when the grace runs out,
// goes to that whole group. The child dies with the supervisor, even if
// the supervisor is killed.
func (s *supervisor) start(ch *child, failpoints string) (*childproc.Process, error) {
	cmd := exec.Command(s.binary, ch.spec.args...)
	env := make([]string, 0, len(os.Environ())+len(ch.spec.env)+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, ch.spec.env...)
	if failpoints != "" {
		env = append(env, failpoint.EnvVar+"="+failpoints)
	}
	cmd.Env = env
	p, err := childproc.StartOutput(cmd, s.output)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", ch.spec.name, err)
	}
	s.mu.Lock()
	ch.state.PID, ch.state.Running, ch.state.Failpoints = cmd.Process.Pid, true, failpoints
	ch.state.Starts++
	s.mu.Unlock()
	s.logger.Info("component started", "component", ch.spec.name, "pid", cmd.Process.Pid, "failpoints", failpoints)
	return p, nil
}

func (s *supervisor) exited(ch *child, err error) {
	now := time.Now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.state.PID, ch.state.Running, ch.state.Failpoints = 0, false, ""
	ch.state.LastExit, ch.state.LastExitAt = describeExit(err), &now
	ch.state.LastExitCode, ch.state.LastExitSignal = exitCodeOrSignal(err)
}

// exitCodeOrSignal returns how a process ended: its exit status, or the
// signal that killed it (code -1 then).
func exitCodeOrSignal(err error) (int, string) {
	var ee *exec.ExitError
	if err == nil {
		return 0, ""
	}
	if !errors.As(err, &ee) {
		return -1, ""
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, sigName(ws.Signal())
	}
	return ee.ExitCode(), ""
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + sigName(ws.Signal())
		}
		return ee.Error()
	}
	return err.Error()
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// Restart implements console.Processes.
func (s *supervisor) Restart(ctx context.Context, component, failpoints string) error {
	s.mu.Lock()
	ch, ok := s.children[component]
	var before int
	if ok {
		before = ch.state.Starts
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("no component %q", component)
	}
	select {
	case ch.restart <- failpoints:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		s.mu.Lock()
		started := ch.state.Starts > before && ch.state.Running && ch.state.Failpoints == failpoints
		s.mu.Unlock()
		if started {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to restart: %w", component, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartExtra implements console.Processes.
func (s *supervisor) StartExtra(_ context.Context, component string, extraArgs []string, failpoints string) (func(), error) {
	s.mu.Lock()
	base, ok := s.children[component]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no component %q", component)
	}
	spec := base.spec
	spec.name = component + "-extra"
	spec.args = append(append([]string{}, spec.args...), extraArgs...)
	spec.env = append(append([]string{}, spec.env...), "EVENTFORGE_METRICS_ADDR=") // no second metrics listener
	extra := &child{spec: spec, state: console.Component{Name: spec.name}}
	p, err := s.start(extra, failpoints)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.Stop(s.stopTimeout)
			s.logger.Info("extra component stopped", "component", spec.name, "exit", describeExit(p.Err()))
		})
	}, nil
}

// Components implements console.Processes.
func (s *supervisor) Components() []console.Component {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]console.Component, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.children[name].state)
	}
	return out
}
