package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/childproc"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
)

// proc is one eventforge process under test.
type proc struct {
	*childproc.Process
	t    testing.TB
	name string
}

// artifactsDir is where process logs of a test are kept
// (e2e/artifacts/<test>/), for reading after a failure.
func artifactsDir(t testing.TB) string {
	dir := filepath.Join("artifacts", strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// anyExit, as eventforge's wantExit, takes whatever exit code the command
// ends with; the caller reads it from the result.
const anyExit = -1

// eventforge runs `eventforge <args...>` to completion (testkit.Run) and
// returns its output and exit code; the test fails unless it exits with
// wantExit. It is the one way the e2e tests run a command of the binary;
// start runs a component.
func eventforge(t testing.TB, wantExit int, args ...string) testkit.Result {
	t.Helper()
	if wantExit == anyExit {
		return testkit.Run(t, binary, args...)
	}
	return testkit.RunExit(t, wantExit, binary, args...)
}

// start runs `eventforge <args...>` with extra environment entries. The
// process is stopped (SIGTERM, then SIGKILL) at cleanup.
func start(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, env, exec.Command(binary, args...))
}

// startIn is start in the network namespace of host.
func startIn(t testing.TB, host *testenv.NetHost, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, env, host.Command(binary, args...))
}

// startCmd runs cmd (the binary, directly or through a wrapper that execs
// it) as start does.
func startCmd(t testing.TB, name string, env []string, cmd *exec.Cmd) *proc {
	t.Helper()
	logPath := filepath.Join(artifactsDir(t), name+".log")
	cmd.Env = append(os.Environ(), env...)
	raceLog := ""
	if raceEnabled {
		// Race reports go to <dir>/race.<pid> (the process's children,
		// under a supervisor, write theirs there too). GORACE splits its
		// options at spaces, commas and colons, which test names hold, so
		// the directory is a fresh one of a plain name, not the artifacts
		// directory.
		dir, err := os.MkdirTemp("", "eventforge-race-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		raceLog = filepath.Join(dir, "race")
		cmd.Env = append(cmd.Env, "GORACE="+os.Getenv("GORACE")+" log_path="+raceLog)
	}
	cp, err := childproc.Start(cmd, logPath)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &proc{Process: cp, t: t, name: name}
	t.Cleanup(func() {
		p.stop()
		if reports := raceReports(t, raceLog); reports != "" {
			t.Errorf("%s: the race detector reported a data race (%s.*):\n%s", name, raceLog, reports)
		}
		if t.Failed() {
			t.Logf("--- %s log (%s), last lines:\n%s", name, logPath, p.tail(40))
		}
	})
	return p
}

// raceReports returns the race detector's reports written under the
// log_path prefix raceLog (none when raceLog is empty).
func raceReports(t testing.TB, raceLog string) string {
	if raceLog == "" {
		return ""
	}
	files, err := filepath.Glob(raceLog + ".*")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		report, err := os.ReadFile(f)
		if err != nil {
			t.Errorf("reading race report %s: %v", f, err)
			continue
		}
		fmt.Fprintf(&b, "--- %s\n%s", f, report)
	}
	return b.String()
}

// stop sends SIGTERM and waits; SIGKILL after 15 s.
func (p *proc) stop() { p.Stop(15 * time.Second) }

// waitExit waits for the process to end by itself and returns its error.
func (p *proc) waitExit(timeout time.Duration) error {
	select {
	case <-p.Exited():
		return p.Err()
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", p.name, timeout)
	}
}

// killedBySIGKILL reports whether the process died of SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// pipeline is one test's set of processes on its own testenv.Env.
type pipeline struct {
	env      *testenv.Env
	grpcAddr string
	httpAddr string
}

func newPipeline(t testing.TB) *pipeline {
	return newPipelineOn(t, testenv.New(t))
}

// newPipelineOn is newPipeline on an environment made elsewhere (e.g. with
// its topic on a private Kafka cluster).
func newPipelineOn(t testing.TB, env *testenv.Env) *pipeline {
	return &pipeline{env: env, grpcAddr: testkit.FreeAddr(t), httpAddr: testkit.FreeAddr(t)}
}

// startAPI starts the api on the pipeline's addresses and waits until it is
// ready; env adds environment variables (e.g. the OTLP endpoint).
func (pl *pipeline) startAPI(t testing.TB, env ...string) *proc {
	t.Helper()
	p := pl.apiProc(t, "api", env, pl.env.DatabaseURL)
	pl.waitAPIReady(t, p)
	return p
}

// apiProc starts an api process named name on the pipeline's addresses,
// connected to dsn, with extra flags, and does not wait for it.
func (pl *pipeline) apiProc(t testing.TB, name string, env []string, dsn string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"api", "--database-url", dsn, "--grpc-addr", pl.grpcAddr, "--http-addr", pl.httpAddr}, extra...)
	return start(t, name, env, args...)
}

// waitAPIReady waits until the api answers /readyz on the pipeline's HTTP
// address, failing the test if p exits first.
func (pl *pipeline) waitAPIReady(t testing.TB, p *proc) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "api ready", func() error {
		select {
		case <-p.Exited():
			return fmt.Errorf("api exited: %v", p.Err())
		default:
		}
		return httpReady(pl.httpAddr)
	})
}

// startCDC starts a reader on the test's slot and topic. env may arm
// failpoints (EVENTFORGE_FAILPOINTS=...); extra flags are appended.
func (pl *pipeline) startCDC(t testing.TB, name string, env []string, extra ...string) *proc {
	args := append([]string{"cdc",
		"--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--slot", pl.env.Slot, "--topic", "order=" + pl.env.Topic, "--status-interval", "500ms",
		"--log-level", "debug"}, extra...)
	return start(t, name, env, args...)
}

// startConsumer starts the fulfillment consumer on the test's topic and
// group. env may arm failpoints; extra flags are appended.
func (pl *pipeline) startConsumer(t testing.TB, name string, env []string, extra ...string) *proc {
	args := append([]string{"consumer",
		"--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--name", "fulfillment", "--group", pl.env.Group, "--topics", pl.env.Topic,
		"--commit-interval", "200ms", "--log-level", "debug"}, extra...)
	return start(t, name, env, args...)
}
