// Package deploy_test cross-checks the deployment files against the binary
// and the documentation. Compose is loaded by compose-go (the loader of
// Docker Compose v2: schema, interpolation, consistency) and the kustomize
// base rendered by `kubectl kustomize`; on what they produce, every flag,
// EVENTFORGE_* variable and port that compose, the kustomize base and the
// Dockerfile use exists in `eventforge <command> --help`, and the console
// runs only with an ops token from a secret; Prometheus scrapes what runs;
// every registered consumer (consumer/registry) runs in compose and in the
// kustomize base, is scraped and shown by the consoles, and its tables are
// granted to the component roles by the migrations; every metric
// the alert rules and the Grafana dashboard query is one docs/metrics.md
// lists (the e2e metrics test checks that list against live scrapes); every
// alert has a runbook in docs/operations.md and promtool cases that fire it
// and keep it quiet. No Docker engine or cluster is needed; the grants are
// checked on a database of the local stack (internal/testenv).
package deploy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// binary is the eventforge binary built once for the package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "eventforge-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "eventforge")
	build := exec.Command("go", "build", "-o", binary, "../cmd/eventforge")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building eventforge:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cliSpec is what `eventforge <command> --help` documents.
type cliSpec struct {
	flags map[string]bool // without the leading --
	envs  map[string]bool // EVENTFORGE_*
}

var (
	helpMu    sync.Mutex
	helpCache = map[string]*cliSpec{}
	flagRE    = regexp.MustCompile(`(?m)(?:^|\s)--([a-z0-9][a-z0-9-]*)`)
	envRE     = regexp.MustCompile(`\$(EVENTFORGE_[A-Z0-9_]+)`)
)

// help returns the flags and variables of `eventforge <command...> --help`;
// it fails the test when the command does not exist.
func help(t *testing.T, command ...string) *cliSpec {
	t.Helper()
	key := strings.Join(command, " ")
	helpMu.Lock()
	defer helpMu.Unlock()
	if s, ok := helpCache[key]; ok {
		return s
	}
	out, err := exec.Command(binary, append(command, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("eventforge %s --help: %v\n%s", key, err, out)
	}
	s := &cliSpec{flags: map[string]bool{}, envs: map[string]bool{}}
	for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
		s.flags[m[1]] = true
	}
	for _, m := range envRE.FindAllStringSubmatch(string(out), -1) {
		s.envs[m[1]] = true
	}
	helpCache[key] = s
	return s
}

// reporter receives the findings of a cross-check: the test itself, or a
// recorder when a test shows that a broken manifest is caught.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder is a reporter that keeps the findings.
type recorder struct{ found []string }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.found = append(r.found, fmt.Sprintf(format, args...))
}

// checkArgs reports flags in args (after the subcommand) that the command
// does not document.
func checkArgs(r reporter, where string, spec *cliSpec, args []string) {
	r.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !spec.flags[name] {
			r.Errorf("%s: flag --%s is not in `eventforge %s --help`", where, name, "…")
		}
	}
}

// addrPort returns the port of a listen address such as 0.0.0.0:9464.
func addrPort(r reporter, where, addr string) string {
	r.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		r.Errorf("%s: listen address %q: %v", where, addr, err)
	}
	return port
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestRolesSQLIsDocumented keeps the roles SQL in docs/operations.md equal
// to the script compose runs.
func TestRolesSQLIsDocumented(t *testing.T) {
	script, err := os.ReadFile("compose/initdb/sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	statements := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				out = append(out, l)
			}
		}
		return out
	}
	_, after, ok := strings.Cut(string(doc), "## PostgreSQL roles")
	_, block, ok2 := strings.Cut(after, "```sql\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/operations.md: no sql block under "## PostgreSQL roles"`)
	}
	if got, want := statements(block), statements(string(script)); !slices.Equal(got, want) {
		t.Errorf("docs/operations.md roles SQL differs from compose/initdb/sql/roles.sql:\n%s\nwant:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
