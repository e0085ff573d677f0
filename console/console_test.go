package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testkit"
)

// fakeProcs is a hand-written console.Processes.
type fakeProcs struct {
	mu         sync.Mutex
	restarts   []string
	components []Component
}

func (f *fakeProcs) Restart(_ context.Context, component, failpoints string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts = append(f.restarts, component+" "+failpoints)
	return nil
}

func (f *fakeProcs) StartExtra(context.Context, string, []string, string) (func(), error) {
	return func() {}, nil
}

func (f *fakeProcs) Components() []Component {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Component(nil), f.components...)
}

// newTestConsole builds a console without connections: enough for the
// routes that do not touch PostgreSQL or Kafka.
func newTestConsole(cfg Config, procs Processes, drills []drill) *Console {
	c := &Console{cfg: cfg, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), samples: newHistory(10), commits: newCommitIndex(10),
		wake: make(chan struct{}, 1)}
	if procs != nil {
		c.procs = procs
	}
	c.drills = newDrillRunner(c)
	if drills != nil {
		c.drills.drills = drills
	}
	c.handler = c.routes()
	return c
}

// serve runs the handler behind a real listener, so requests carry the
// server's local address as they do in production.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func do(t *testing.T, method, url, token, body string) (int, string, http.Header) {
	t.Helper()
	return testkit.Do(t, method, url, token, body)
}

func TestRoutesAccess(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DatabaseURL = "postgres://unused"
	withToken := cfg
	withToken.OpsToken = "s3cret"
	withDrills := cfg
	withDrills.EnableDrills = true

	tests := []struct {
		name   string
		cfg    Config
		procs  Processes
		method string
		path   string
		token  string
		want   int
	}{
		{name: "page without token config", cfg: cfg, method: "GET", path: "/ui/", want: 200},
		{name: "overview without token config", cfg: cfg, method: "GET", path: "/api/ops/overview", want: 200},
		{name: "drills off: list", cfg: cfg, method: "GET", path: "/api/ops/drills", want: 404},
		{name: "drills off: start", cfg: cfg, method: "POST", path: "/api/ops/drills/relay-crash/runs", want: 404},
		{name: "drills off: continue", cfg: cfg, method: "POST", path: "/api/ops/drills/runs/x/continue", want: 404},
		{name: "unknown ops path", cfg: cfg, method: "GET", path: "/api/ops/nope", want: 404},
		{name: "token: page stays public", cfg: withToken, method: "GET", path: "/ui/", want: 200},
		{name: "token: missing", cfg: withToken, method: "GET", path: "/api/ops/overview", want: 401},
		{name: "token: wrong", cfg: withToken, method: "GET", path: "/api/ops/overview", token: "nope", want: 401},
		{name: "token: missing on drills (not revealed)", cfg: withToken, method: "GET", path: "/api/ops/drills", want: 401},
		{name: "token: right", cfg: withToken, method: "GET", path: "/api/ops/overview", token: "s3cret", want: 200},
		{name: "token: right, drills off", cfg: withToken, method: "GET", path: "/api/ops/drills", token: "s3cret", want: 404},
		{name: "drills on: list", cfg: withDrills, method: "GET", path: "/api/ops/drills", want: 200},
		{name: "drills on, no supervisor", cfg: withDrills, method: "POST", path: "/api/ops/drills/relay-crash/runs", want: 409},
		{name: "drills on: unknown drill", cfg: withDrills, procs: &fakeProcs{}, method: "POST", path: "/api/ops/drills/nope/runs", want: 404},
		{name: "drills on: bad mode", cfg: withDrills, procs: &fakeProcs{}, method: "POST", path: "/api/ops/drills/relay-crash/runs", want: 400},
		{name: "drills on: unknown run", cfg: withDrills, method: "GET", path: "/api/ops/drills/runs/nope", want: 404},
		{name: "trace: not a UUID", cfg: cfg, method: "GET", path: "/api/ops/orders/xyz", want: 400},
		{name: "metrics: bad since", cfg: cfg, method: "GET", path: "/api/ops/metrics?since=x", want: 400},
		{name: "metrics", cfg: cfg, method: "GET", path: "/api/ops/metrics", want: 200},
		{name: "replay: bad body", cfg: cfg, method: "POST", path: "/api/ops/dlq/replay", want: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestConsole(tt.cfg, tt.procs, nil)
			body := ""
			if tt.name == "drills on: bad mode" {
				body = `{"mode":"sideways"}`
			}
			code, resp, hdr := do(t, tt.method, serve(t, c.Handler())+tt.path, tt.token, body)
			if code != tt.want {
				t.Fatalf("%s %s: %d (%s), want %d", tt.method, tt.path, code, resp, tt.want)
			}
			if code == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without a Bearer challenge: %v", hdr)
			}
		})
	}
}

func TestAssets(t *testing.T) {
	c := newTestConsole(DefaultConfig(), nil, nil)
	base := serve(t, c.Handler())
	tests := []struct {
		path, wantType, wantBody string
	}{
		{"/ui/", "text/html", "/ui/app.js"},
		{"/ui/index.html", "text/html", "/ui/app.js"},
		{"/ui/app.js", "javascript", ""},
		{"/ui/app.css", "text/css", ""},
		{"/ui/no/such/view", "text/html", "/ui/app.js"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body, hdr := do(t, "GET", base+tt.path, "", "")
			if code != 200 || !strings.Contains(hdr.Get("Content-Type"), tt.wantType) || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("%s: %d %s", tt.path, code, hdr.Get("Content-Type"))
			}
			csp := hdr.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
				t.Fatalf("%s: CSP %q does not confine the page to the server", tt.path, csp)
			}
		})
	}
	// The built bundle loads nothing from elsewhere.
	_, html, _ := do(t, "GET", base+"/ui/", "", "")
	for _, bad := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(html, bad) {
			t.Fatalf("index.html references %q", bad)
		}
	}
}

func TestDrillStepMode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableDrills = true
	var seen []string
	var mu sync.Mutex
	fake := drill{Name: "fake", Stages: []string{"one", "two", "three"}, run: func(ctx context.Context, d *drillRun) error {
		for _, id := range []string{"one", "two", "three"} {
			if err := d.step(ctx, func(_ context.Context, f map[string]any) error {
				mu.Lock()
				seen = append(seen, id)
				mu.Unlock()
				f["stage"] = id
				return nil
			}); err != nil {
				return err
			}
		}
		d.setCounters(Counters{LogicalEvents: 1, Deliveries: 2, BusinessChanges: 1})
		return nil
	}}
	c := newTestConsole(cfg, &fakeProcs{}, []drill{fake})
	base := serve(t, c.Handler())

	code, body, _ := do(t, "POST", base+"/api/ops/drills/fake/runs", "", `{"mode":"step"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %s", code, body)
	}
	run := runOf(t, c, body)
	if code, _, _ := do(t, "POST", base+"/api/ops/drills/fake/runs", "", `{"mode":"run"}`); code != http.StatusConflict {
		t.Fatalf("second run while one is active: %d, want 409", code)
	}
	waitState := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for run.snapshot().State != want {
			if time.Now().After(deadline) {
				t.Fatalf("state %s, want %s", run.snapshot().State, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := 1; i <= 2; i++ {
		waitState("paused")
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n != i {
			t.Fatalf("paused after %d stages, want %d", n, i)
		}
		if code, body, _ := do(t, "POST", base+"/api/ops/drills/runs/"+run.ID+"/continue", "", ""); code != 200 {
			t.Fatalf("continue: %d %s", code, body)
		}
	}
	waitState("done")
	snap := run.snapshot()
	if snap.Counters == nil || snap.Counters.Deliveries != 2 || snap.Stages[2].State != "done" || snap.Stages[2].Facts["stage"] != "three" {
		t.Fatalf("finished run: %+v", snap)
	}
	if code, _, _ := do(t, "POST", base+"/api/ops/drills/runs/"+run.ID+"/continue", "", ""); code != http.StatusConflict {
		t.Fatalf("continue after done: %d, want 409", code)
	}
	c.drills.shutdown()
}

func TestDrillFailureMarksStage(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableDrills = true
	failing := drill{Name: "failing", Stages: []string{"one", "two"}, run: func(ctx context.Context, d *drillRun) error {
		if err := d.step(ctx, func(context.Context, map[string]any) error { return nil }); err != nil {
			return err
		}
		return d.step(ctx, func(context.Context, map[string]any) error { return context.DeadlineExceeded })
	}}
	c := newTestConsole(cfg, &fakeProcs{}, []drill{failing})
	base := serve(t, c.Handler())
	code, body, _ := do(t, "POST", base+"/api/ops/drills/failing/runs", "", "")
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %s", code, body)
	}
	run := runOf(t, c, body)
	c.drills.wg.Wait()
	snap := run.snapshot()
	if snap.State != "failed" || snap.Stages[0].State != "done" || snap.Stages[1].State != "failed" || !strings.Contains(snap.Error, "stage two") {
		t.Fatalf("failed run: %+v", snap)
	}
	c.drills.mu.Lock()
	defer c.drills.mu.Unlock()
	if c.drills.active != nil {
		t.Fatal("a finished run stays active")
	}
}

// runOf finds the run whose start answer is body.
func runOf(t *testing.T, c *Console, body string) *drillRun {
	t.Helper()
	var started struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &started); err != nil || started.ID == "" {
		t.Fatalf("start answer %s: %v", body, err)
	}
	run, ok := c.drills.get(started.ID)
	if !ok {
		t.Fatalf("run %s unknown", started.ID)
	}
	return run
}

func TestOpsRequestsWakeTheSampler(t *testing.T) {
	c := newTestConsole(DefaultConfig(), nil, nil)
	if c.active() {
		t.Fatal("a console nobody asked is active")
	}
	base := serve(t, c.Handler())
	do(t, "GET", base+"/ui/", "", "")
	if c.active() {
		t.Fatal("loading the page alone woke the sampler")
	}
	do(t, "GET", base+"/api/ops/metrics", "", "")
	if !c.active() {
		t.Fatal("an ops request did not wake the sampler")
	}
	select {
	case <-c.wake:
	default:
		t.Fatal("no wake-up was sent")
	}
}

func TestLocalAddrIsServerAddr(t *testing.T) {
	// Drills create their order through the server's own address, taken
	// from the request; make sure it is the listener's.
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
	}))
	defer srv.Close()
	do(t, "GET", srv.URL, "", "")
	if "http://"+got != srv.URL {
		t.Fatalf("local addr %s, server %s", got, srv.URL)
	}
}

// TestVerifyConfigIsValid: the auditor the drills run gets a configuration
// it accepts, with every consumer of the console's default pipeline.
func TestVerifyConfigIsValid(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DatabaseURL = "postgres://eventforge@127.0.0.1:1/eventforge" // the api's, set by whoever mounts the console
	c := newTestConsole(cfg, nil, nil)
	vcfg := c.verifyConfig()
	if err := vcfg.Validate(); err != nil {
		t.Fatalf("the drills' verify config is refused: %v", err)
	}
	if len(vcfg.Consumers) == 0 || len(vcfg.Consumers) != len(c.cfg.Consumers) {
		t.Fatalf("verify audits consumers %v, the console has %v", vcfg.Consumers, c.cfg.Consumers)
	}
}
