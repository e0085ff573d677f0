package deploy_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/consumer/registry"
)

// The manifests that must know every registered consumer, as the findings
// name them (paths from the repository root).
const (
	composeManifest    = "deploy/compose/compose.yaml"
	prometheusManifest = "deploy/prometheus/prometheus.yml"
	kubeBaseDir        = "deploy/kubernetes/base"
	consumerScrapeJob  = "eventforge-consumer"
)

// deployment is what the consumer checks read of the manifests.
type deployment struct {
	compose composeFile
	// scrapes maps each Prometheus job to its targets (host:port).
	scrapes map[string][]string
	// kube is the kustomize base as rendered, resources the files its
	// kustomization.yaml lists, and files which of them defines each
	// object ("Kind/name" → file name).
	kube      []kubeObject
	resources []string
	files     map[string]string
}

// loadDeployment loads compose (compose-go), prometheus.yml and the
// kustomize base (rendered by kustomize) as the other deploy tests do.
func loadDeployment(t *testing.T) deployment {
	t.Helper()
	d := deployment{compose: loadCompose(t), scrapes: map[string][]string{}, kube: kubeObjects(t), files: map[string]string{}}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &prom)
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			d.scrapes[sc.JobName] = append(d.scrapes[sc.JobName], st.Targets...)
		}
	}
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, filepath.Join(kubeBase, "kustomization.yaml"), &kust)
	d.resources = kust.Resources
	for _, f := range kust.Resources {
		for _, o := range decodeAll(t, filepath.Join(kubeBase, f)) {
			d.files[o.Kind+"/"+o.Metadata.Name] = f
		}
	}
	return d
}

// TestManifestsRunEveryConsumer walks the registry (consumer/registry):
// every registered consumer runs in compose and in the kustomize base, the
// console of every api names its group (and, in compose, charts its
// /metrics), and Prometheus scrapes it. A finding names the file that lacks
// the consumer and what to add; TestConsumerTablesAreGranted checks the
// grants of its tables.
func TestManifestsRunEveryConsumer(t *testing.T) {
	checkConsumers(t, loadDeployment(t), registry.All())
}

// TestManifestsMissingAConsumerAreNamed: a consumer the manifests do not
// know is reported in each of them, by file.
func TestManifestsMissingAConsumerAreNamed(t *testing.T) {
	var all recorder
	checkConsumers(&all, loadDeployment(t), append(registry.All(), registry.Consumer{Name: "billing"}))
	var r recorder // the findings about billing
	for _, f := range all.found {
		if strings.Contains(f, "billing") {
			r.found = append(r.found, f)
		}
	}
	for _, want := range []string{
		composeManifest + `: no service runs consumer "billing"`,
		composeManifest + ": service api-1: EVENTFORGE_CONSOLE_CONSUMER lacks billing=eventforge-billing",
		composeManifest + ": service api-1: EVENTFORGE_CONSOLE_METRICS lacks consumer-billing=",
		prometheusManifest + `: no target of job eventforge-consumer is a service of consumer "billing"`,
		kubeBaseDir + "/consumer-billing.yaml: missing",
		kubeBaseDir + "/api.yaml: Deployment eventforge-api: EVENTFORGE_CONSOLE_CONSUMER lacks billing=eventforge-billing",
	} {
		found := slices.ContainsFunc(r.found, func(f string) bool { return strings.HasPrefix(f, want) })
		if !found {
			t.Errorf("no finding starts with %q; found:\n%s", want, strings.Join(r.found, "\n"))
		}
	}
	if n := len(r.found); n != 8 {
		t.Errorf("%d findings, want 8 (compose: the service and both apis' two lists; Prometheus; Kubernetes: the file and the api's list):\n%s",
			n, strings.Join(r.found, "\n"))
	}
}

// checkConsumers reports, for each of consumers, every manifest that lacks
// it.
func checkConsumers(r reporter, d deployment, consumers []registry.Consumer) {
	r.Helper()
	running := composeConsumers(d.compose)
	for _, c := range consumers {
		group := registry.DefaultGroup(c.Name)
		services := running[c.Name]
		if len(services) == 0 {
			r.Errorf("%s: no service runs consumer %q: add one with command [consumer] and EVENTFORGE_NAME: %s, e.g. consumer-%s-1 (as consumer-ledger-1)",
				composeManifest, c.Name, c.Name, c.Name)
		}
		checkComposeConsole(r, d.compose, c.Name, group, services)
		checkScraped(r, d, c.Name, services)
		checkKubeConsumer(r, d, c.Name, group)
	}
}

// composeConsumers maps each consumer name to the eventforge services of
// compose that run it (command consumer; --name or EVENTFORGE_NAME, else
// the default consumer), sorted.
func composeConsumers(c composeFile) map[string][]string {
	out := map[string][]string{}
	for name, s := range c.Services {
		if s.Image != eventforgeImage || len(s.Command) == 0 || s.Command[0] != "consumer" {
			continue
		}
		consumer := flagOrEnv(s.Command[1:], s.Environment, "name")
		if consumer == "" {
			consumer = registry.DefaultName
		}
		out[consumer] = append(out[consumer], name)
	}
	for _, services := range out {
		slices.Sort(services)
	}
	return out
}

// flagOrEnv is the value of --flag in args, or else of its EVENTFORGE_*
// variable in env.
func flagOrEnv(args []string, env map[string]string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v
		}
		if a == "--"+flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return env["EVENTFORGE_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))]
}

// pairs parses a map flag's value as the binary does: name=value pairs
// separated by ';'.
func pairs(s string) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
			out[k] = v
		}
	}
	return out
}

// checkComposeConsole reports a compose api whose console does not name
// the consumer's group or chart the /metrics of one of its services.
func checkComposeConsole(r reporter, c composeFile, consumer, group string, services []string) {
	r.Helper()
	for _, name := range sortedServices(c) {
		s := c.Services[name]
		if s.Image != eventforgeImage || len(s.Command) == 0 || s.Command[0] != "api" || s.Environment["EVENTFORGE_CONSOLE"] != "true" {
			continue
		}
		if got, ok := pairs(s.Environment["EVENTFORGE_CONSOLE_CONSUMER"])[consumer]; !ok || got != group {
			r.Errorf("%s: service %s: EVENTFORGE_CONSOLE_CONSUMER lacks %s=%s (x-api-console), so its console does not show consumer %q",
				composeManifest, name, consumer, group, consumer)
		}
		source, ok := pairs(s.Environment["EVENTFORGE_CONSOLE_METRICS"])["consumer-"+consumer]
		u, err := url.Parse(source)
		if !ok || err != nil || !slices.Contains(services, u.Hostname()) || u.Path != "/metrics" {
			has := ""
			if ok {
				has = fmt.Sprintf("; it has consumer-%s=%s", consumer, source)
			}
			r.Errorf("%s: service %s: EVENTFORGE_CONSOLE_METRICS lacks consumer-%s=http://<a service of consumer %s>:<its metrics port>/metrics (x-api-console%s)",
				composeManifest, name, consumer, consumer, has)
		}
	}
}

// checkScraped reports a consumer none of whose compose services
// Prometheus scrapes.
func checkScraped(r reporter, d deployment, consumer string, services []string) {
	r.Helper()
	for _, targets := range d.scrapes {
		for _, target := range targets {
			if host, _, err := net.SplitHostPort(target); err == nil && slices.Contains(services, host) {
				return
			}
		}
	}
	suggest := fmt.Sprintf("consumer-%s-1:<its metrics port>", consumer)
	if len(services) > 0 {
		if _, port, err := net.SplitHostPort(d.compose.Services[services[0]].Environment["EVENTFORGE_METRICS_ADDR"]); err == nil {
			suggest = services[0] + ":" + port
		}
	}
	r.Errorf("%s: no target of job %s is a service of consumer %q: add %s to its targets",
		prometheusManifest, consumerScrapeJob, consumer, suggest)
}

// checkKubeConsumer reports a consumer no Deployment of the rendered base
// runs, naming the file to add or the kustomization entry missing, and an
// api whose console does not name the consumer's group.
func checkKubeConsumer(r reporter, d deployment, consumer, group string) {
	r.Helper()
	configMaps := map[string]map[string]string{}
	for _, o := range d.kube {
		if o.Kind == "ConfigMap" {
			configMaps[o.Metadata.Name] = o.Data
		}
	}
	runs := false
	for _, o := range d.kube {
		if o.Kind != "Deployment" || len(o.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		ct := o.Spec.Template.Spec.Containers[0]
		if len(ct.Args) == 0 {
			continue
		}
		env := containerEnv(ct, configMaps)
		switch ct.Args[0] {
		case "consumer":
			name := flagOrEnv(ct.Args[1:], env, "name")
			runs = runs || name == consumer || (name == "" && consumer == registry.DefaultName)
		case "api":
			if env["EVENTFORGE_CONSOLE"] != "true" {
				continue
			}
			if got, ok := pairs(env["EVENTFORGE_CONSOLE_CONSUMER"])[consumer]; !ok || got != group {
				r.Errorf("%s/%s: Deployment %s: EVENTFORGE_CONSOLE_CONSUMER lacks %s=%s, so its console does not show consumer %q",
					kubeBaseDir, d.files["Deployment/"+o.Metadata.Name], o.Metadata.Name, consumer, group, consumer)
			}
		}
	}
	if runs {
		return
	}
	file := "consumer-" + consumer + ".yaml"
	switch _, err := os.Stat(filepath.Join(kubeBase, file)); {
	case err != nil:
		r.Errorf("%s/%s: missing: add it (Deployment eventforge-consumer-%s with args [consumer] and EVENTFORGE_NAME %s, "+
			"its HorizontalPodAutoscaler and PodDisruptionBudget, as consumer-ledger.yaml) and list it under resources in %s/kustomization.yaml",
			kubeBaseDir, file, consumer, consumer, kubeBaseDir)
	case !slices.Contains(d.resources, file):
		r.Errorf("%s/kustomization.yaml: resources lack %s, so no Deployment runs consumer %q", kubeBaseDir, file, consumer)
	default:
		r.Errorf("%s/%s: no Deployment runs consumer %q (args [consumer], EVENTFORGE_NAME %s)", kubeBaseDir, file, consumer, consumer)
	}
}

// containerEnv is a container's environment: its envFrom ConfigMaps, then
// its env values.
func containerEnv(c kubeContainer, configMaps map[string]map[string]string) map[string]string {
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			for k, v := range configMaps[ef.ConfigMapRef.Name] {
				env[k] = v
			}
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// sortedServices lists the services of c by name.
func sortedServices(c composeFile) []string {
	names := make([]string, 0, len(c.Services))
	for name := range c.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
