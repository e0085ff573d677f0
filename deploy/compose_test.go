package deploy_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	composecli "github.com/compose-spec/compose-go/v2/cli"
	composetypes "github.com/compose-spec/compose-go/v2/types"
)

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
	if count["api"] != 2 || count["cdc"] != 2 || count["migrate"] != 1 {
		t.Errorf("eventforge services by command %v, want api 2, cdc 2, migrate 1", count)
	}
	// Every registered consumer runs (TestManifestsRunEveryConsumer); one
	// of them in two services, as the header says.
	scaled := false
	for _, services := range composeConsumers(c) {
		scaled = scaled || len(services) >= 2
	}
	if !scaled {
		t.Errorf("no consumer runs in two services: %v", composeConsumers(c))
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
