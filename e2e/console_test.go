package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	"github.com/eventforge/eventforge/verify"
)

// chromiumPath is the Debian chromium the browser tests drive (never a
// downloaded browser); `make test` installs it.
const chromiumPath = "/usr/bin/chromium"

// startDev runs `eventforge dev` on the test's own database, slot, topic and
// groups of the shared stack: the api with the console (drills on) in the
// dev process, cdc and the consumers as its supervised children.
func startDev(t *testing.T, env *testenv.Env, extra ...string) (httpAddr string, dev *proc) {
	t.Helper()
	httpAddr = testkit.FreeAddr(t)
	prefix := strings.TrimSuffix(env.Group, "fulfillment")
	args := append([]string{"dev", "--database-url", env.DatabaseURL, "--kafka-brokers", env.Endpoints.KafkaBootstrap,
		"--slot", env.Slot, "--topic", env.Topic, "--group-prefix", prefix,
		"--http-addr", httpAddr, "--grpc-addr", testkit.FreeAddr(t)}, extra...)
	p := start(t, "dev", nil, args...)
	testenv.Eventually(t, 60*time.Second, "dev ready", func() error {
		select {
		case <-p.Exited():
			return fmt.Errorf("dev exited: %v", p.Err())
		default:
		}
		return httpReady(httpAddr)
	})
	t.Cleanup(func() {
		if err := testenv.DeleteTopics(env.Endpoints.KafkaBootstrap, env.Topic+".dlq"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return httpAddr, p
}

// syscallKill0 reports whether pid exists (signal 0).
func syscallKill0(pid int) error {
	return syscall.Kill(pid, 0)
}

// browserSummary is the last line the browser script prints.
type browserSummary struct {
	PathOrder string `json:"path_order"`
	Drills    map[string]struct {
		OrderID  string         `json:"order_id"`
		Counters map[string]int `json:"counters"`
	} `json:"drills"`
	Requests int      `json:"requests"`
	Foreign  []string `json:"foreign"`
	Shots    []string `json:"screenshots"`
}

// runBrowser runs e2e/console_browser.cjs (playwright-core driving Debian
// chromium) against base and returns its summary.
func runBrowser(t *testing.T, base, token string) browserSummary {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing: `make test` installs it (apt-get install chromium), or install it yourself: %v", chromiumPath, err)
	}
	modules, err := filepath.Abs("../web/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed in web/node_modules: run `make web-deps` (part of `make test`): %v", err)
	}
	artifacts, err := filepath.Abs(artifactsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "console_browser.cjs")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "CONSOLE_URL=http://"+base, "ARTIFACTS="+artifacts, "CHROMIUM="+chromiumPath, "OPS_TOKEN="+token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node: %v", err)
	}
	var last string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log("browser:", line)
		last = line
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("browser test failed: %v\n%s", err, stderr.String())
	}
	var sum browserSummary
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "SUMMARY ")), &sum); err != nil {
		t.Fatalf("browser test printed no summary (last line %q): %v", last, err)
	}
	return sum
}

// TestConsoleBrowser drives the console in real headless Chromium against a
// real pipeline: a real order followed through every step, each drill run
// with its counters, the DLQ table and its replay, the language toggle and
// phone width, the ops token asked for by the page, with screenshots of every view; no request leaves the
// EventForge server. Then it checks the drills' orders in durable state
// with the delivery auditor, independently of the page.
func TestConsoleBrowser(t *testing.T) {
	env := testenv.New(t)
	const token = "browser-test-token"
	addr, _ := startDev(t, env, "--ops-token", token)
	sum := runBrowser(t, addr, token)

	if len(sum.Foreign) > 0 || sum.Requests == 0 {
		t.Errorf("the page made %d requests, %d outside the EventForge server: %v", sum.Requests, len(sum.Foreign), sum.Foreign)
	}
	for _, shot := range sum.Shots {
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
			t.Errorf("screenshot %s missing or blank: %v", shot, err)
		}
	}

	cfg := verify.DefaultConfig()
	cfg.DatabaseURL, cfg.KafkaBrokers, cfg.Topic, cfg.Slot = env.DatabaseURL, env.Endpoints.KafkaBootstrap, env.Topic, env.Slot
	cfg.Consumers = map[string]string{"fulfillment": env.Group}
	audit := func(orderID string) *verify.OrderReport {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rep, err := verify.AuditOrder(ctx, cfg, orderID)
		if err != nil {
			t.Fatalf("auditing order %s: %v", orderID, err)
		}
		return rep
	}
	want := map[string]struct{ logical, deliveries, changes, dlq int }{
		"relay-crash":          {1, 2, 1, 0},
		"consumer-crash":       {1, 1, 1, 0},
		"concurrent-duplicate": {1, 1, 1, 0},
		"dlq-replay":           {1, 2, 1, 1},
	}
	if rep := audit(sum.PathOrder); rep.LogicalEvents != 1 || rep.Deliveries != 1 || rep.BusinessChanges["fulfillment"] != 1 || !rep.Committed["fulfillment"] {
		t.Errorf("the delivery path's order %s: %+v; want 1 event, 1 delivery, 1 change, offset committed", sum.PathOrder, rep)
	}
	for name, w := range want {
		d, ok := sum.Drills[name]
		if !ok {
			t.Errorf("drill %s did not run", name)
			continue
		}
		rep := audit(d.OrderID)
		if rep.LogicalEvents != w.logical || rep.Deliveries < w.deliveries || rep.BusinessChanges["fulfillment"] != w.changes ||
			rep.Marks["fulfillment"] != 1 || rep.DeadLettered["fulfillment"] != w.dlq {
			t.Errorf("drill %s, order %s, durable state: %+v; want %d logical, ≥%d deliveries, %d change, 1 mark, %d in the DLQ",
				name, d.OrderID, rep, w.logical, w.deliveries, w.changes, w.dlq)
		}
		if d.Counters["logical_events"] != w.logical || d.Counters["business_changes"] != w.changes {
			t.Errorf("drill %s: page showed %v", name, d.Counters)
		}
	}
}

// TestConsoleAccess: without --console the api serves neither the console
// nor the ops API (404), and --console on a non-loopback address without
// --ops-token refuses to start; drill endpoints answer 404 unless
// --enable-drills; with --ops-token the ops API answers 401 without the
// token (the front end itself stays reachable to ask for it); drills under
// a plain api (no supervisor) are refused with 409.
func TestConsoleAccess(t *testing.T) {
	pl := newPipeline(t)
	base := []string{"api", "--database-url", pl.env.DatabaseURL, "--kafka-brokers", pl.env.Endpoints.KafkaBootstrap,
		"--console-topic", pl.env.Topic, "--console-slot", pl.env.Slot, "--console-consumer", "fulfillment=" + pl.env.Group}
	for i, open := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--console", "--http-addr", "0.0.0.0:0"}},
		{nil, []string{"--console", "--http-addr", ":0"}},
		{[]string{"EVENTFORGE_CONSOLE=true"}, []string{"--http-addr", "0.0.0.0:0"}},
	} {
		args := append(append(append([]string{}, base...), open.args...), "--grpc-addr", testkit.FreeAddr(t))
		p := start(t, fmt.Sprintf("api-open-%d", i), open.env, args...)
		err := p.waitExit(60 * time.Second)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v eventforge %s: %v, want exit status 2 (a usage error)", open.env, strings.Join(args, " "), err)
		}
		if out, _ := os.ReadFile(p.Log); !strings.Contains(string(out), "not a loopback address") || !strings.Contains(string(out), "--ops-token") {
			t.Errorf("%v eventforge %s: refused without naming --ops-token and the address:\n%s", open.env, strings.Join(args, " "), out)
		}
	}
	startAPI := func(name string, extra ...string) string {
		httpAddr := testkit.FreeAddr(t)
		args := append(append(append([]string{}, base...), "--http-addr", httpAddr, "--grpc-addr", testkit.FreeAddr(t)), extra...)
		p := start(t, name, nil, args...)
		testenv.Eventually(t, 30*time.Second, name+" ready", func() error {
			select {
			case <-p.Exited():
				return fmt.Errorf("%s exited: %v", name, p.Err())
			default:
			}
			return httpReady(httpAddr)
		})
		return "http://" + httpAddr
	}
	status := func(method, url, token string) int {
		t.Helper()
		code, _, _ := testkit.Do(t, method, url, token, `{"mode":"run"}`)
		return code
	}

	closed := startAPI("api-closed", "--ops-token", "s3cret", "--enable-drills")
	plain := startAPI("api-plain", "--console")
	guarded := startAPI("api-token", "--console", "--ops-token", "s3cret")
	drills := startAPI("api-drills", "--console", "--enable-drills")
	tests := []struct {
		name, method, url, token string
		want                     int
	}{
		{"console page without --console", "GET", closed + "/ui/", "", 404},
		{"ops API without --console", "GET", closed + "/api/ops/overview", "s3cret", 404},
		{"DLQ replay without --console", "POST", closed + "/api/ops/dlq/replay", "s3cret", 404},
		{"drill list without --console", "GET", closed + "/api/ops/drills", "s3cret", 404},
		{"health without --console", "GET", closed + "/healthz", "", 200},
		{"console page", "GET", plain + "/ui/", "", 200},
		{"ops API open without a token configured", "GET", plain + "/api/ops/overview", "", 200},
		{"drill list without --enable-drills", "GET", plain + "/api/ops/drills", "", 404},
		{"drill start without --enable-drills", "POST", plain + "/api/ops/drills/relay-crash/runs", "", 404},
		{"drill run without --enable-drills", "GET", plain + "/api/ops/drills/runs/abc", "", 404},
		{"console page with a token configured", "GET", guarded + "/ui/", "", 200},
		{"ops API without the token", "GET", guarded + "/api/ops/overview", "", 401},
		{"ops API with a wrong token", "GET", guarded + "/api/ops/metrics", "wrong", 401},
		{"DLQ replay without the token", "POST", guarded + "/api/ops/dlq/replay", "", 401},
		{"ops API with the token", "GET", guarded + "/api/ops/overview", "s3cret", 200},
		{"drills with the token but not enabled", "GET", guarded + "/api/ops/drills", "s3cret", 404},
		{"drill list with --enable-drills", "GET", drills + "/api/ops/drills", "", 200},
		{"drill start without a supervisor", "POST", drills + "/api/ops/drills/relay-crash/runs", "", 409},
		{"unknown drill", "POST", drills + "/api/ops/drills/no-such-drill/runs", "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status(tt.method, tt.url, tt.token); got != tt.want {
				t.Fatalf("%s %s: %d, want %d", tt.method, tt.url, got, tt.want)
			}
		})
	}
}

// TestConsoleDevLifecycle: dev prints its URLs (the console's among them),
// supervises cdc and the consumers as child processes, refuses a second dev
// on the same database and slot, and stops cleanly on SIGINT, taking its
// children with it.
func TestConsoleDevLifecycle(t *testing.T) {
	env := testenv.New(t)
	addr, dev := startDev(t, env)
	testenv.Eventually(t, 30*time.Second, "URLs printed", func() error {
		b, _ := os.ReadFile(dev.Log)
		if !strings.Contains(string(b), "Console        http://"+addr+"/ui/") {
			return fmt.Errorf("no console URL in the output yet")
		}
		return nil
	})
	var overview struct {
		Components []struct {
			Name    string `json:"name"`
			PID     int    `json:"pid"`
			Running bool   `json:"running"`
		} `json:"components"`
	}
	testenv.Eventually(t, 30*time.Second, "cdc and consumers running", func() error {
		resp, err := http.Get("http://" + addr + "/api/ops/overview")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&overview); err != nil {
			return err
		}
		running := map[string]bool{}
		for _, c := range overview.Components {
			running[c.Name] = c.Running && c.PID > 0
		}
		if !running["cdc"] || !running["consumer-fulfillment"] || !running["consumer-ledger"] {
			return fmt.Errorf("components %+v", overview.Components)
		}
		return nil
	})

	second := start(t, "dev-second", nil, "dev", "--database-url", env.DatabaseURL, "--kafka-brokers", env.Endpoints.KafkaBootstrap,
		"--slot", env.Slot, "--topic", env.Topic, "--http-addr", testkit.FreeAddr(t), "--grpc-addr", testkit.FreeAddr(t))
	if err := second.waitExit(30 * time.Second); err == nil {
		t.Fatal("a second dev on the same database and slot started")
	}
	if b, _ := os.ReadFile(second.Log); !strings.Contains(string(b), "already runs") {
		t.Fatalf("second dev did not say why it refused:\n%s", b)
	}

	if err := dev.Cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := dev.waitExit(60 * time.Second); err != nil {
		t.Fatalf("dev after SIGINT: %v, want a clean exit", err)
	}
	for _, c := range overview.Components {
		if err := syscallKill0(c.PID); err == nil {
			t.Errorf("child %s (pid %d) still runs after dev stopped", c.Name, c.PID)
		}
	}
}
