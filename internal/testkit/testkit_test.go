package testkit

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The certificate serves TLS on 127.0.0.1 to a client that trusts Pool.
func TestSelfSignedCertServesTLS(t *testing.T) {
	c := SelfSignedCert(t, t.TempDir(), "eventforge-test")
	pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.Pool}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting Pool: %v", err)
	}
	resp.Body.Close()
}

// Run reports the exit code and both streams, apart and interleaved.
func TestRun(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	res := Run(t, sh, "-c", "echo out; echo err >&2; exit 3")
	if res.Code != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("got %+v", res)
	}
	if !strings.Contains(res.Combined, "out\n") || !strings.Contains(res.Combined, "err\n") {
		t.Fatalf("combined output %q lacks a stream", res.Combined)
	}
	if got := RunExit(t, 0, sh, "-c", "echo fine").Stdout; got != "fine\n" {
		t.Fatalf("RunExit stdout %q", got)
	}
}

func TestMetricsDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.md")
	doc := "# Metrics\n\n| name | type | labels | component | meaning |\n|---|---|---|---|---|\n" +
		"| `eventforge_consumer_events_total` | counter | `result`, `consumer` | consumer | events |\n" +
		"| `eventforge_cdc_up` | gauge | — | cdc | up |\n" +
		"| `eventforge_api_requests` | histogram |  | api | calls |\n" +
		"| not_a_metric | counter | | api | skipped |\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got := MetricsDoc(t, path)
	want := map[string]MetricDoc{
		"eventforge_consumer_events_total": {Kind: "counter", Labels: []string{"consumer", "result"}, Component: "consumer"},
		"eventforge_cdc_up":                {Kind: "gauge", Component: "cdc"},
		"eventforge_api_requests":          {Kind: "histogram", Component: "api"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MetricsDoc = %+v, want %+v", got, want)
	}
	if real := MetricsDoc(t, "../../docs/metrics.md"); len(real) < 10 {
		t.Errorf("docs/metrics.md: %d rows, want the whole table", len(real))
	}
}

func TestStackDir(t *testing.T) {
	dir := StackDir(t, "eventforge-testkit-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, want a directory with mode 0755", dir, fi.Mode())
	}
	if filepath.Dir(dir) != "/var/tmp" || !strings.HasPrefix(filepath.Base(dir), "eventforge-testkit-") {
		t.Errorf("%s is not a new eventforge-testkit-* directory in /var/tmp", dir)
	}
}

func TestErrorContains(t *testing.T) {
	boom := errors.New("starting kafka: port 9092 in use")
	tests := []struct {
		name string
		err  error
		want string
		ok   bool
	}{
		{"no error wanted, none", nil, "", true},
		{"no error wanted, one", boom, "", false},
		{"error wanted, none", nil, "in use", false},
		{"error wanted, matching", boom, "in use", true},
		{"error wanted, other", boom, "refused", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorContains(tt.err, tt.want); got != tt.ok {
				t.Errorf("ErrorContains(%v, %q) = %v, want %v", tt.err, tt.want, got, tt.ok)
			}
		})
	}
}
