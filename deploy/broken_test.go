package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// edit is one change that breaks a copy of a manifest.
type edit struct {
	file     string // relative to the copied directory
	old, new string // old must occur in the file
}

// brokenCopy copies dir to a temporary directory and applies e there.
func brokenCopy(t *testing.T, dir string, e edit) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		if ent.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if ent.Name() == e.file {
			if !strings.Contains(string(b), e.old) {
				t.Fatalf("%s no longer contains %q: update the broken copy", filepath.Join(dir, e.file), e.old)
			}
			b = []byte(strings.Replace(string(b), e.old, e.new, 1))
		}
		if err := os.WriteFile(filepath.Join(dst, ent.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestComposeOpsTokenComesFromTheEnvironment: every api runs the console
// with the token of the environment compose runs in, and compose refuses
// the file when that variable or the page-token key is missing or empty.
func TestComposeOpsTokenComesFromTheEnvironment(t *testing.T) {
	apis := 0
	for name, s := range loadCompose(t).Services {
		if s.Image != eventforgeImage || s.Command[0] != "api" {
			continue
		}
		apis++
		if s.Environment["EVENTFORGE_CONSOLE"] != "true" || s.Environment["EVENTFORGE_OPS_TOKEN"] != composeEnv["EVENTFORGE_OPS_TOKEN"] {
			t.Errorf("service %s: EVENTFORGE_CONSOLE=%q EVENTFORGE_OPS_TOKEN=%q, want the console on with the token of the environment",
				name, s.Environment["EVENTFORGE_CONSOLE"], s.Environment["EVENTFORGE_OPS_TOKEN"])
		}
	}
	if apis == 0 {
		t.Fatal("no api service")
	}
	for _, name := range []string{"EVENTFORGE_OPS_TOKEN", "EVENTFORGE_PAGE_TOKEN_KEY"} {
		for _, value := range []string{"", "unset"} {
			env := maps.Clone(composeEnv)
			if value == "unset" {
				delete(env, name)
			} else {
				env[name] = value
			}
			if _, err := parseCompose(composePath, env); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("loading with %s %s: %v, want an error naming %s", name, value, err, name)
			}
		}
	}
}

// TestComposeBrokenCopiesAreRejected: compose-go rejects copies of
// compose.yaml broken in ways the schema, the YAML syntax or the
// consistency checks catch, and the cross-check with the binary rejects
// copies that parse but ask the binary for what it does not offer.
func TestComposeBrokenCopiesAreRejected(t *testing.T) {
	file := filepath.Base(composePath)
	parse := []struct {
		name string
		edit edit
	}{
		{"unknown service key", edit{file, `    command: ["api"]`, `    comand: ["api"]`}},
		{"port that is no port", edit{file, `ports: ["8080:8080", "9090:9090"]`, `ports: ["8080:http"]`}},
		{"dependency on a missing service", edit{file, `depends_on: [prometheus]`, `depends_on: [prometheus-2]`}},
		{"YAML syntax", edit{file, "services:\n", "services:\n  broken: [\n"}},
		{"interval that is no duration", edit{file, "interval: 10s", "interval: often"}},
	}
	for _, tt := range parse {
		t.Run(tt.name, func(t *testing.T) {
			dir := brokenCopy(t, filepath.Dir(composePath), tt.edit)
			if _, err := parseCompose(filepath.Join(dir, file), composeEnv); err == nil {
				t.Fatalf("compose-go loaded a copy with %q replaced by %q", tt.edit.old, tt.edit.new)
			}
		})
	}
	cross := []struct {
		name, want string
		edit       edit
	}{
		{"variable the binary does not read", "EVENTFORGE_OPS_TOKENS is not in",
			edit{file, "  EVENTFORGE_CONSOLE: \"true\"\n", "  EVENTFORGE_CONSOLE: \"true\"\n  EVENTFORGE_OPS_TOKENS: x\n"}},
		{"console without a token", "console is on without EVENTFORGE_OPS_TOKEN",
			edit{file, "EVENTFORGE_OPS_TOKEN: ${EVENTFORGE_OPS_TOKEN:?", "EVENTFORGE_OPS_TOKEN: ${EVENTFORGE_OPS_TOKEN_UNSET:+"}},
		{"listen port not declared", "listens on 8181",
			edit{file, "EVENTFORGE_HTTP_ADDR: 0.0.0.0:8080", "EVENTFORGE_HTTP_ADDR: 0.0.0.0:8181"}},
	}
	for _, tt := range cross {
		t.Run(tt.name, func(t *testing.T) {
			dir := brokenCopy(t, filepath.Dir(composePath), tt.edit)
			p, err := parseCompose(filepath.Join(dir, file), composeEnv)
			if err != nil {
				t.Fatalf("compose-go: %v", err)
			}
			var r recorder
			checkCompose(t, &r, composeServices(p))
			if !containsFinding(r.found, tt.want) {
				t.Fatalf("the cross-check did not report %q; it reported %q", tt.want, r.found)
			}
		})
	}
}

// TestKustomizeBrokenCopiesAreRejected: kustomize rejects copies of the
// base broken in ways it catches, and the cross-check rejects rendered
// copies that ask the binary for what it does not offer or carry the ops
// token outside a Secret.
func TestKustomizeBrokenCopiesAreRejected(t *testing.T) {
	render := []struct {
		name string
		edit edit
	}{
		{"missing resource", edit{"kustomization.yaml", "  - api.yaml\n", "  - api.yaml\n  - no-such-file.yaml\n"}},
		{"unknown kustomization field", edit{"kustomization.yaml", "resources:", "resourcez:"}},
		{"YAML syntax in a resource", edit{"api.yaml", "kind: Deployment", "kind: [Deployment"}},
		{"two objects with one name", edit{"api.yaml", "name: eventforge-api\nspec:\n  minAvailable", "name: eventforge-api\nspec:\n  minAvailable: 1\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: eventforge-api\nspec:\n  minAvailable"}},
	}
	for _, tt := range render {
		t.Run(tt.name, func(t *testing.T) {
			dir := brokenCopy(t, kubeBase, tt.edit)
			if out, err := kustomize(dir); err == nil {
				t.Fatalf("kustomize rendered a copy with %q replaced by %q:\n%s", tt.edit.old, tt.edit.new, out)
			}
		})
	}
	cross := []struct {
		name, want string
		edit       edit
	}{
		{"ops token as a literal", "EVENTFORGE_OPS_TOKEN does not come from a Secret",
			edit{"api.yaml", "valueFrom: {secretKeyRef: {name: eventforge-ops, key: ops-token}}", "value: hard-coded"}},
		{"secret key nobody creates", "references secret eventforge-ops key token",
			edit{"api.yaml", "key: ops-token}", "key: token}"}},
		{"variable the binary does not read", "EVENTFORGE_CONSOLES is not in",
			edit{"api.yaml", "- name: EVENTFORGE_CONSOLE\n", "- name: EVENTFORGE_CONSOLES\n              value: \"true\"\n            - name: EVENTFORGE_CONSOLE\n"}},
	}
	for _, tt := range cross {
		t.Run(tt.name, func(t *testing.T) {
			dir := brokenCopy(t, kubeBase, tt.edit)
			out, err := kustomize(dir)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeObjects(strings.NewReader(string(out)))
			if err != nil {
				t.Fatal(err)
			}
			var r recorder
			checkKustomize(t, &r, objs)
			if !containsFinding(r.found, tt.want) {
				t.Fatalf("the cross-check did not report %q; it reported %q", tt.want, r.found)
			}
		})
	}
}

func containsFinding(found []string, want string) bool {
	for _, f := range found {
		if strings.Contains(f, want) {
			return true
		}
	}
	return false
}
