// Package failpoint provides named points in EventForge's code where a test or
// a drill can make a process crash, fail or stall at an exact moment of the
// delivery path — for example after Kafka acknowledged an event and before the
// CDC reader confirmed its LSN.
//
// A point never selects a code path: code meets it only through Eval, on the
// path production takes, so arming a point adds its action at that moment and
// changes nothing else. There is no way to ask whether a point is armed.
//
// Points are inert unless armed. They are armed only from a specification
// string, normally the EVENTFORGE_FAILPOINTS environment variable or the
// --failpoints flag:
//
//	cdc.after_ack_before_confirm=crash
//	consumer.before_db_commit=2*error;api.before_commit=delay(250ms)
//
// Each term is name=[count*]action. Actions: crash (the process kills itself
// with SIGKILL, so no deferred code, flush or shutdown hook runs), error (Eval
// returns ErrInjected), delay(duration) (Eval sleeps, honouring ctx). A count
// limits how many times the point fires; without one it fires every time.
package failpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvVar is the environment variable read by ArmFromEnv.
const EnvVar = "EVENTFORGE_FAILPOINTS"

// ErrInjected is returned by Eval when an armed point's action is error.
var ErrInjected = errors.New("failpoint: injected error")

// Action is what an armed point does when reached.
type Action int

// Actions a point can be armed with.
const (
	Crash Action = iota + 1
	Error
	Delay
)

func (a Action) String() string {
	switch a {
	case Crash:
		return "crash"
	case Error:
		return "error"
	case Delay:
		return "delay"
	}
	return "unknown"
}

// Term is one armed point.
type Term struct {
	Name   string
	Action Action
	Delay  time.Duration // for Delay
	Count  int           // remaining firings; 0 means unlimited
}

var (
	mu    sync.Mutex
	armed map[string]*Term
	// exit terminates the process for Crash; replaced in tests.
	exit = func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		os.Exit(137) // not reached: SIGKILL cannot be caught
	}
	// OnFire, when set, is called (with the point's name) just before a point
	// fires, e.g. to log it. It must not block.
	OnFire func(name string, action Action)
)

// Parse reads a specification (see the package doc) into terms.
func Parse(spec string) ([]Term, error) {
	var terms []Term
	for _, raw := range strings.Split(spec, ";") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		name, action, ok := strings.Cut(raw, "=")
		name, action = strings.TrimSpace(name), strings.TrimSpace(action)
		if !ok || name == "" || action == "" {
			return nil, fmt.Errorf("failpoint term %q: want name=[count*]action", raw)
		}
		t := Term{Name: name}
		if n, rest, ok := strings.Cut(action, "*"); ok {
			count, err := strconv.Atoi(n)
			if err != nil || count < 1 {
				return nil, fmt.Errorf("failpoint term %q: count %q is not a positive integer", raw, n)
			}
			t.Count, action = count, rest
		}
		switch {
		case action == "crash":
			t.Action = Crash
		case action == "error":
			t.Action = Error
		case strings.HasPrefix(action, "delay(") && strings.HasSuffix(action, ")"):
			d, err := time.ParseDuration(action[len("delay(") : len(action)-1])
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("failpoint term %q: delay wants a positive duration", raw)
			}
			t.Action, t.Delay = Delay, d
		default:
			return nil, fmt.Errorf("failpoint term %q: unknown action %q (crash, error, delay(d))", raw, action)
		}
		terms = append(terms, t)
	}
	return terms, nil
}

// Arm replaces the set of armed points with those in spec. An empty spec
// disarms everything.
func Arm(spec string) error {
	terms, err := Parse(spec)
	if err != nil {
		return err
	}
	m := make(map[string]*Term, len(terms))
	for i := range terms {
		m[terms[i].Name] = &terms[i]
	}
	mu.Lock()
	armed = m
	mu.Unlock()
	return nil
}

// ArmFromEnv arms the points named in EVENTFORGE_FAILPOINTS, if set.
func ArmFromEnv() error {
	return Arm(os.Getenv(EnvVar))
}

// Armed lists the armed points as name=action, for the start-up log.
func Armed() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(armed))
	for _, t := range armed {
		out = append(out, t.Name+"="+t.Action.String())
	}
	return out
}

// IsArmed reports whether the point name is armed, for a caller whose path
// around the point costs more only when it can fire.
func IsArmed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := armed[name]
	return ok
}

// Eval is placed at a named point. When the point is not armed it returns nil
// at the cost of one map lookup under a mutex. When armed it crashes the
// process, returns ErrInjected, or sleeps, as configured.
func Eval(ctx context.Context, name string) error {
	mu.Lock()
	t, ok := armed[name]
	if !ok {
		mu.Unlock()
		return nil
	}
	if t.Count > 0 {
		t.Count--
		if t.Count == 0 {
			delete(armed, name)
		}
	}
	term := *t
	mu.Unlock()

	if OnFire != nil {
		OnFire(name, term.Action)
	}
	switch term.Action {
	case Crash:
		exit()
	case Error:
		return fmt.Errorf("%s: %w", name, ErrInjected)
	case Delay:
		timer := time.NewTimer(term.Delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
