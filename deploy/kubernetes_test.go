package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

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
