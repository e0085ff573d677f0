// Package deploy_test cross-checks the deployment files against the binary
// and the documentation. Compose is loaded by compose-go (the loader of
// Docker Compose v2: schema, interpolation, consistency) and the kustomize
// base rendered by `kubectl kustomize`; on what they produce, every flag,
// EVENTFORGE_* variable and port that compose, the kustomize base and the
// Dockerfile use exists in `eventforge <command> --help`, and the console
// runs only with an ops token from a secret; Prometheus scrapes what runs; every metric
// the alert rules and the Grafana dashboard query is one docs/metrics.md
// lists (the e2e metrics test checks that list against live scrapes); every
// alert has a runbook in docs/operations.md and promtool cases that fire it
// and keep it quiet. No Docker engine or cluster is needed.
package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	composecli "github.com/compose-spec/compose-go/v2/cli"
	composetypes "github.com/compose-spec/compose-go/v2/types"
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

// --- compose -----------------------------------------------------------------

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Expose      []string          `yaml:"expose"`
	Volumes     []string          `yaml:"volumes"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

const (
	eventforgeImage = "eventforge:local"
	composePath     = "compose/compose.yaml"
)

// composeEnv is the environment the tests load compose with: what compose
// requires from whoever runs it.
var composeEnv = map[string]string{
	"EVENTFORGE_OPS_TOKEN":      "ops-token-from-the-environment",
	"EVENTFORGE_PAGE_TOKEN_KEY": "page-token-key-from-the-environment-32",
}

// parseCompose loads a compose file with compose-go, the loader of Docker
// Compose v2: it checks the file against the Compose schema, interpolates
// ${VARIABLES} from env only (required ones fail when missing), merges
// anchors and checks consistency (services, networks and volumes that
// references name exist). Relative bind sources stay as written.
func parseCompose(path string, env map[string]string) (*composetypes.Project, error) {
	vars := make([]string, 0, len(env))
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	opts, err := composecli.NewProjectOptions([]string{path},
		composecli.WithWorkingDirectory(filepath.Dir(path)),
		composecli.WithEnv(vars),
		composecli.WithInterpolation(true),
		composecli.WithConsistency(true),
		composecli.WithResolvedPaths(false),
	)
	if err != nil {
		return nil, fmt.Errorf("compose options for %s: %w", path, err)
	}
	return opts.LoadProject(context.Background())
}

// composeServices is what the cross-checks read of a loaded project.
func composeServices(p *composetypes.Project) composeFile {
	c := composeFile{Services: map[string]composeService{}}
	for name, svc := range p.Services {
		s := composeService{
			Image:       svc.Image,
			Command:     []string(svc.Command),
			Environment: map[string]string{},
			Expose:      []string(svc.Expose),
		}
		for k, v := range svc.Environment {
			if v != nil {
				s.Environment[k] = *v
			} else {
				s.Environment[k] = ""
			}
		}
		for _, port := range svc.Ports {
			s.Ports = append(s.Ports, fmt.Sprintf("%s:%d", port.Published, port.Target))
		}
		for _, v := range svc.Volumes {
			s.Volumes = append(s.Volumes, v.Source+":"+v.Target)
		}
		if svc.HealthCheck != nil {
			s.Healthcheck.Test = []string(svc.HealthCheck.Test)
		}
		c.Services[name] = s
	}
	return c
}

// loadCompose loads compose/compose.yaml with compose-go and composeEnv.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	p, err := parseCompose(composePath, composeEnv)
	if err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	c := composeServices(p)
	if len(c.Services) == 0 {
		t.Fatalf("%s: no services", composePath)
	}
	return c
}

// containerPorts lists the container side of ports and expose entries.
func (s composeService) containerPorts() []string {
	var ps []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		ps = append(ps, parts[len(parts)-1])
	}
	return append(ps, s.Expose...)
}

// listenPorts are the ports of the service's EVENTFORGE_*_ADDR variables.
func listenPorts(r reporter, where string, env map[string]string) map[string]string {
	r.Helper()
	ports := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "EVENTFORGE_") && strings.HasSuffix(k, "_ADDR") && v != "" {
			ports[k] = addrPort(r, where+" "+k, v)
		}
	}
	return ports
}

func TestComposeUsesWhatTheBinaryDocuments(t *testing.T) {
	checkCompose(t, t, loadCompose(t))
}

// checkCompose cross-checks the eventforge services of c against the
// binary's --help, the Dockerfile and the files they mount; findings go to
// r.
func checkCompose(t *testing.T, r reporter, c composeFile) {
	r.Helper()
	entrypoint := dockerEntrypoint(t)
	for name, s := range c.Services {
		if s.Image != eventforgeImage {
			continue
		}
		if len(s.Command) == 0 {
			r.Errorf("service %s: no command", name)
			continue
		}
		spec := help(t, s.Command[0])
		checkArgs(r, "service "+name, spec, s.Command[1:])
		for k := range s.Environment {
			if !strings.HasPrefix(k, "EVENTFORGE_") {
				r.Errorf("service %s: variable %s is not an EVENTFORGE_* setting", name, k)
			} else if !spec.envs[k] {
				r.Errorf("service %s: %s is not in `eventforge %s --help`", name, k, s.Command[0])
			}
		}
		listen := listenPorts(r, "service "+name, s.Environment)
		declared := s.containerPorts()
		for k, p := range listen {
			if !slices.Contains(declared, p) {
				r.Errorf("service %s: %s listens on %s, which ports/expose do not declare (%v)", name, k, p, declared)
			}
		}
		for _, p := range declared {
			if !slices.Contains(mapValues(listen), p) {
				r.Errorf("service %s: port %s is declared but no EVENTFORGE_*_ADDR listens on it", name, p)
			}
		}
		if hc := s.Healthcheck.Test; len(hc) > 0 {
			if len(hc) != 4 || hc[0] != "CMD" || hc[1] != entrypoint || hc[2] != "probe" {
				r.Errorf("service %s: healthcheck %v, want [CMD %s probe URL]", name, hc, entrypoint)
				continue
			}
			help(t, "probe")
			u, err := url.Parse(hc[3])
			if err != nil || !slices.Contains(mapValues(listen), u.Port()) {
				r.Errorf("service %s: healthcheck URL %s is not on a port the service listens on (%v)", name, hc[3], listen)
			}
			if u != nil && u.Path != "/healthz" && u.Path != "/readyz" {
				r.Errorf("service %s: healthcheck path %s, want /healthz or /readyz", name, u.Path)
			}
		}
		if s.Command[0] == "api" && s.Environment["EVENTFORGE_CONSOLE"] == "true" && s.Environment["EVENTFORGE_OPS_TOKEN"] == "" {
			r.Errorf("service %s: the console is on without EVENTFORGE_OPS_TOKEN", name)
		}
		if s.Command[0] == "api" && s.Environment["EVENTFORGE_PAGE_TOKEN_KEY"] == "" {
			r.Errorf("service %s: no EVENTFORGE_PAGE_TOKEN_KEY: replicas would sign page tokens with keys of their own", name)
		}
		if ep := s.Environment["EVENTFORGE_OTLP_ENDPOINT"]; ep != "" {
			u, err := url.Parse(ep)
			if err != nil {
				r.Errorf("service %s: EVENTFORGE_OTLP_ENDPOINT %q: %v", name, ep, err)
			} else if col, ok := c.Services[u.Hostname()]; !ok || !slices.Contains(col.containerPorts(), u.Port()) {
				r.Errorf("service %s: EVENTFORGE_OTLP_ENDPOINT %s names no service port", name, ep)
			}
		}
	}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
					r.Errorf("service %s: volume source %s: %v", name, src, err)
				}
			}
		}
	}
}

func TestComposeTopology(t *testing.T) {
	c := loadCompose(t)
	count := map[string]int{}
	kafka := 0
	for _, s := range c.Services {
		if s.Image == eventforgeImage && len(s.Command) > 0 {
			count[s.Command[0]]++
		}
		if strings.HasPrefix(s.Image, "apache/kafka:4") && strings.Contains(s.Environment["KAFKA_PROCESS_ROLES"], "controller") {
			kafka++
		}
	}
	if count["api"] != 2 || count["cdc"] != 2 || count["consumer"] != 3 || count["migrate"] != 1 {
		t.Errorf("eventforge services by command %v, want api 2, cdc 2, consumer 3, migrate 1", count)
	}
	if kafka != 3 {
		t.Errorf("%d KRaft Kafka brokers, want 3", kafka)
	}
	pg, ok := c.Services["postgres"]
	if !ok || !strings.HasPrefix(pg.Image, "postgres:16") || !slices.Contains(pg.Command, "wal_level=logical") {
		t.Errorf("postgres service %+v: want image postgres:16 started with wal_level=logical", pg)
	}
	for _, name := range []string{"prometheus", "grafana", "otel-collector"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("no %s service", name)
		}
	}
}

func TestPrometheusScrapesEveryComponent(t *testing.T) {
	c := loadCompose(t)
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &cfg)
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				s, ok := c.Services[host]
				if !ok {
					t.Errorf("job %s: target %s is no compose service", sc.JobName, target)
					continue
				}
				if !slices.Contains(s.containerPorts(), port) {
					t.Errorf("job %s: target %s: the service does not expose %s", sc.JobName, target, port)
				}
				if s.Image == eventforgeImage {
					want := metricsPort(t, host, s)
					if port != want {
						t.Errorf("job %s: target %s, but %s serves /metrics on %s", sc.JobName, target, host, want)
					}
				}
				scraped[host] = true
			}
		}
	}
	for name, s := range c.Services {
		if s.Image == eventforgeImage && len(s.Command) > 0 && s.Command[0] != "migrate" && !scraped[name] {
			t.Errorf("service %s is not scraped by deploy/prometheus/prometheus.yml", name)
		}
	}
}

// metricsPort is where an eventforge service serves /metrics: the api on
// its HTTP port, the others on --metrics-addr.
func metricsPort(t *testing.T, name string, s composeService) string {
	t.Helper()
	key := "EVENTFORGE_METRICS_ADDR"
	if s.Command[0] == "api" {
		key = "EVENTFORGE_HTTP_ADDR"
	}
	addr := s.Environment[key]
	if addr == "" {
		t.Errorf("service %s: %s not set, /metrics is off", name, key)
		return ""
	}
	return addrPort(t, name, addr)
}

// --- Dockerfile ----------------------------------------------------------------

type instruction struct{ cmd, args string }

// stages parses the Dockerfile into its build stages' instructions
// (continuation lines joined, comments dropped).
func stages(t *testing.T) [][]instruction {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]instruction
	var line string
	for _, raw := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && line == "") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			line += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		line += trimmed
		cmd, args, _ := strings.Cut(line, " ")
		line = ""
		if cmd == "" {
			continue
		}
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			out = append(out, nil)
		}
		if len(out) == 0 {
			t.Fatalf("Dockerfile: %s before FROM", in.cmd)
		}
		out[len(out)-1] = append(out[len(out)-1], in)
	}
	return out
}

func dockerEntrypoint(t *testing.T) string {
	t.Helper()
	st := stages(t)
	for _, in := range st[len(st)-1] {
		if in.cmd == "ENTRYPOINT" {
			var ep []string
			if err := yaml.Unmarshal([]byte(in.args), &ep); err != nil || len(ep) != 1 {
				t.Fatalf("Dockerfile: ENTRYPOINT %s: want the exec form with the binary alone", in.args)
			}
			return ep[0]
		}
	}
	t.Fatal("Dockerfile: no ENTRYPOINT in the final stage")
	return ""
}

func TestDockerfile(t *testing.T) {
	st := stages(t)
	if len(st) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build", len(st))
	}
	build, final := st[0], st[len(st)-1]
	joined := func(ins []instruction) string {
		var b strings.Builder
		for _, in := range ins {
			fmt.Fprintf(&b, "%s %s\n", in.cmd, in.args)
		}
		return b.String()
	}
	if !strings.Contains(joined(build), "CGO_ENABLED=1") || !strings.Contains(joined(build), "go build") ||
		!strings.Contains(joined(build), "./cmd/eventforge") {
		t.Errorf("build stage must build ./cmd/eventforge with CGO_ENABLED=1 (librdkafka):\n%s", joined(build))
	}
	var user string
	var exposed []string
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("final stage USER %q: want a non-root user", user)
	}
	ep := dockerEntrypoint(t)
	if !strings.Contains(joined(final), "COPY --from=") || !strings.Contains(joined(final), ep) {
		t.Errorf("final stage must copy the binary from the build stage to %s", ep)
	}
	help(t) // the image's default command

	// Every port a deployment listens on is exposed by the image.
	used := map[string]string{}
	for name, s := range loadCompose(t).Services {
		if s.Image == eventforgeImage {
			for _, p := range listenPorts(t, name, s.Environment) {
				used[p] = "compose service " + name
			}
		}
	}
	for _, c := range kubeContainers(t) {
		for _, p := range c.Ports {
			used[fmt.Sprint(p.ContainerPort)] = "kubernetes container " + c.Name
		}
	}
	for p, where := range used {
		if !slices.Contains(exposed, p) {
			t.Errorf("%s listens on %s, which the Dockerfile does not EXPOSE (%v)", where, p, exposed)
		}
	}

	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Fields(string(ignore))
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore must exclude .git")
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd", "api", "cdc", "consumer", "internal", "proto", "schema", "deploy/local", "console"} {
		for _, p := range patterns {
			if strings.HasPrefix(p, "#") {
				continue
			}
			p = strings.Trim(p, "/")
			if p == need || strings.HasPrefix(need, p+"/") {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, need)
			}
		}
	}
}

// --- Kubernetes --------------------------------------------------------------

type kubeContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Args    []string `yaml:"args"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	StartupProbe   *probe `yaml:"startupProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
}

type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type podTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		SecurityContext struct {
			RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		} `yaml:"securityContext"`
		Containers []kubeContainer `yaml:"containers"`
	} `yaml:"spec"`
}

type kubeObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		ServiceSelector map[string]string `yaml:"-"`
		Template        podTemplate       `yaml:"template"`
		ScaleTargetRef  struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MaxReplicas int `yaml:"maxReplicas"`
		Ports       []struct {
			Name       string `yaml:"name"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
	raw map[string]any
}

const kubeBase = "kubernetes/base"

// kustomizeVersion is the kustomize that kubectl v1.32 embeds; without a
// kubectl on the PATH the tests run this one through the Go module proxy.
const kustomizeVersion = "sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"

var (
	renderMu    sync.Mutex
	renderCache = map[string][]byte{}
)

// kustomize renders the kustomization in dir as `kubectl kustomize dir` does
// (the same kustomize, run with `go run` when kubectl is missing).
func kustomize(dir string) ([]byte, error) {
	var cmd *exec.Cmd
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		cmd = exec.Command(kubectl, "kustomize", dir)
	} else {
		cmd = exec.Command("go", "run", kustomizeVersion, "build", dir)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return out, nil
}

// kubeObjects renders the base with kustomize and decodes every object.
func kubeObjects(t *testing.T) []kubeObject {
	t.Helper()
	renderMu.Lock()
	out, ok := renderCache[kubeBase]
	if !ok {
		var err error
		if out, err = kustomize(kubeBase); err != nil {
			renderMu.Unlock()
			t.Fatalf("rendering %s: %v", kubeBase, err)
		}
		renderCache[kubeBase] = out
	}
	renderMu.Unlock()
	objs, err := decodeObjects(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", kubeBase, err)
	}
	if len(objs) == 0 {
		t.Fatalf("kubectl kustomize %s rendered no objects", kubeBase)
	}
	return objs
}

func decodeAll(t *testing.T, path string) []kubeObject {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := decodeObjects(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// decodeObjects decodes a stream of Kubernetes objects.
func decodeObjects(r io.Reader) ([]kubeObject, error) {
	dec := yaml.NewDecoder(r)
	var objs []kubeObject
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		var o kubeObject
		if err := node.Decode(&o); err != nil {
			return nil, err
		}
		if err := node.Decode(&o.raw); err != nil {
			return nil, err
		}
		if o.Kind == "Service" {
			if spec, ok := o.raw["spec"].(map[string]any); ok {
				if sel, ok := spec["selector"].(map[string]any); ok {
					o.Spec.ServiceSelector = map[string]string{}
					for k, v := range sel {
						o.Spec.ServiceSelector[k] = fmt.Sprint(v)
					}
				}
			}
		}
		if o.Kind == "" || o.Metadata.Name == "" {
			return nil, fmt.Errorf("object without kind or name: %v", o.raw)
		}
		objs = append(objs, o)
	}
}

func kubeContainers(t *testing.T) []kubeContainer {
	t.Helper()
	var cs []kubeContainer
	for _, o := range kubeObjects(t) {
		cs = append(cs, o.Spec.Template.Spec.Containers...)
	}
	return cs
}

func TestKustomizeBaseUsesWhatTheBinaryDocuments(t *testing.T) {
	checkKustomize(t, t, kubeObjects(t))
}

// checkKustomize cross-checks the rendered objects against the binary's
// --help, secret.example.yaml and each other; findings go to r.
func checkKustomize(t *testing.T, r reporter, objs []kubeObject) {
	r.Helper()
	configMaps := map[string]map[string]string{}
	for _, o := range objs {
		if o.Kind == "ConfigMap" {
			configMaps[o.Metadata.Name] = o.Data
		}
	}
	secretKeys := map[string]bool{}
	for _, o := range decodeAll(t, filepath.Join(kubeBase, "secret.example.yaml")) {
		for k := range o.StringData {
			secretKeys[o.Metadata.Name+"/"+k] = true
		}
	}
	byKind := map[string][]kubeObject{}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	for _, o := range objs {
		if o.Kind != "Deployment" && o.Kind != "Job" {
			continue
		}
		where := o.Kind + " " + o.Metadata.Name
		tpl := o.Spec.Template
		if nr := tpl.Spec.SecurityContext.RunAsNonRoot; nr == nil || !*nr {
			r.Errorf("%s: pod securityContext.runAsNonRoot must be true", where)
		}
		for _, c := range tpl.Spec.Containers {
			// kustomization.yaml's images: sets the tag.
			if name, _, _ := strings.Cut(c.Image, ":"); name != "eventforge" || len(c.Args) == 0 {
				r.Errorf("%s: container %s: image %s, want image eventforge with a subcommand in args", where, c.Name, c.Image)
				continue
			}
			spec := help(t, c.Args[0])
			checkArgs(r, where, spec, c.Args[1:])
			env := map[string]string{}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef == nil {
					continue
				}
				data, ok := configMaps[ef.ConfigMapRef.Name]
				if !ok {
					r.Errorf("%s: envFrom ConfigMap %s is not in the base", where, ef.ConfigMapRef.Name)
				}
				for k, v := range data {
					env[k] = v
				}
			}
			fromSecret := map[string]bool{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
				if e.ValueFrom == nil {
					continue
				}
				if ref := e.ValueFrom.SecretKeyRef; ref != nil {
					fromSecret[e.Name] = true
					if !secretKeys[ref.Name+"/"+ref.Key] {
						r.Errorf("%s: %s references secret %s key %s, which secret.example.yaml does not define", where, e.Name, ref.Name, ref.Key)
					}
				}
				if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
					if _, ok := configMaps[ref.Name][ref.Key]; !ok {
						r.Errorf("%s: %s references ConfigMap %s key %s, which does not exist", where, e.Name, ref.Name, ref.Key)
					}
				}
			}
			if c.Args[0] == "api" && env["EVENTFORGE_CONSOLE"] == "true" && !fromSecret["EVENTFORGE_OPS_TOKEN"] {
				r.Errorf("%s: the console is on, but EVENTFORGE_OPS_TOKEN does not come from a Secret (secretKeyRef)", where)
			}
			if c.Args[0] == "api" && !fromSecret["EVENTFORGE_PAGE_TOKEN_KEY"] {
				r.Errorf("%s: EVENTFORGE_PAGE_TOKEN_KEY does not come from a Secret (secretKeyRef): replicas would sign page tokens with keys of their own", where)
			}
			for k := range env {
				if !spec.envs[k] {
					r.Errorf("%s: %s is not in `eventforge %s --help`", where, k, c.Args[0])
				}
			}
			listen := listenPorts(r, where, env)
			portNames := map[string]string{}
			for _, p := range c.Ports {
				port := fmt.Sprint(p.ContainerPort)
				portNames[p.Name] = port
				if !slices.Contains(mapValues(listen), port) {
					r.Errorf("%s: containerPort %s: no EVENTFORGE_*_ADDR listens on it (%v)", where, port, listen)
				}
			}
			for k, p := range listen {
				if !slices.Contains(mapValues(portNames), p) {
					r.Errorf("%s: %s listens on %s, which the container does not declare", where, k, p)
				}
			}
			if o.Kind == "Job" {
				continue
			}
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				r.Errorf("%s: liveness and readiness probes are required", where)
			}
			for _, pr := range []*probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if pr == nil {
					continue
				}
				if pr.HTTPGet == nil || (pr.HTTPGet.Path != "/healthz" && pr.HTTPGet.Path != "/readyz") {
					r.Errorf("%s: probe %+v: want httpGet on /healthz or /readyz", where, pr)
					continue
				}
				if _, ok := portNames[fmt.Sprint(pr.HTTPGet.Port)]; !ok && !slices.Contains(mapValues(portNames), fmt.Sprint(pr.HTTPGet.Port)) {
					r.Errorf("%s: probe port %v is not a container port", where, pr.HTTPGet.Port)
				}
			}
			if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
				r.Errorf("%s: cpu and memory requests are required", where)
			}
			if ann := tpl.Metadata.Annotations; ann["prometheus.io/scrape"] == "true" {
				want := listen["EVENTFORGE_METRICS_ADDR"]
				if c.Args[0] == "api" {
					want = listen["EVENTFORGE_HTTP_ADDR"]
				}
				if ann["prometheus.io/port"] != want || ann["prometheus.io/path"] != "/metrics" {
					r.Errorf("%s: scrape annotations %v, want /metrics on port %s", where, ann, want)
				}
			}
		}
		if o.Kind != "Deployment" {
			continue
		}
		if !subset(o.Spec.Selector.MatchLabels, tpl.Metadata.Labels) {
			r.Errorf("%s: selector %v does not match the pod labels %v", where, o.Spec.Selector.MatchLabels, tpl.Metadata.Labels)
		}
		pdb := false
		for _, p := range byKind["PodDisruptionBudget"] {
			pdb = pdb || (len(p.Spec.Selector.MatchLabels) > 0 && subset(p.Spec.Selector.MatchLabels, tpl.Metadata.Labels))
		}
		if !pdb {
			r.Errorf("%s: no PodDisruptionBudget selects its pods", where)
		}
		var hpa *kubeObject
		for i, h := range byKind["HorizontalPodAutoscaler"] {
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == o.Metadata.Name {
				hpa = &byKind["HorizontalPodAutoscaler"][i]
			}
		}
		switch cmd := tpl.Spec.Containers[0].Args[0]; cmd {
		case "cdc":
			if o.Spec.Replicas == nil || *o.Spec.Replicas != 2 || hpa != nil {
				r.Errorf("%s: cdc runs exactly 2 replicas (active + standby) and no HPA", where)
			}
		case "api", "consumer":
			if hpa == nil {
				r.Errorf("%s: no HorizontalPodAutoscaler", where)
			} else if cmd == "consumer" && hpa.Spec.MaxReplicas > topicPartitions(t) {
				r.Errorf("%s: HPA max %d replicas exceeds the topic's %d partitions", where, hpa.Spec.MaxReplicas, topicPartitions(t))
			}
		}
	}
	for _, s := range byKind["Service"] {
		matched := false
		for _, d := range byKind["Deployment"] {
			if len(s.Spec.ServiceSelector) == 0 || !subset(s.Spec.ServiceSelector, d.Spec.Template.Metadata.Labels) {
				continue
			}
			matched = true
			for _, sp := range s.Spec.Ports {
				found := false
				for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
					found = found || p.Name == fmt.Sprint(sp.TargetPort) || fmt.Sprint(p.ContainerPort) == fmt.Sprint(sp.TargetPort)
				}
				if !found {
					r.Errorf("Service %s: targetPort %v is not a port of %s", s.Metadata.Name, sp.TargetPort, d.Metadata.Name)
				}
			}
		}
		if !matched {
			r.Errorf("Service %s selects no Deployment", s.Metadata.Name)
		}
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler", "PodDisruptionBudget"} {
		if len(byKind[kind]) == 0 {
			r.Errorf("the base has no %s", kind)
		}
	}
}

// topicPartitions is the partition count compose creates the order topic
// with: consumer replicas beyond it add no parallelism.
func topicPartitions(t *testing.T) int {
	t.Helper()
	cmd := loadCompose(t).Services["kafka-topics"].Command
	i := slices.Index(cmd, "--partitions")
	if i < 0 || i+1 >= len(cmd) {
		t.Fatal("compose kafka-topics: no --partitions")
	}
	var n int
	if _, err := fmt.Sscan(cmd[i+1], &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func mapValues(m map[string]string) []string {
	vs := make([]string, 0, len(m))
	for _, v := range m {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return vs
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
