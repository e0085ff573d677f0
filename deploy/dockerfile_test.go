package deploy_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

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
	for _, need := range []string{"go.mod", "go.sum", "cmd", "api", "cdc", "consumer", "internal", "proto", "schema", "deploy/local", "deploy/prometheus", "console"} {
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
