package promserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	deployprom "github.com/eventforge/eventforge/deploy/prometheus"
)

// promConfig is what the tests read of a Prometheus configuration.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string       `yaml:"rule_files"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type scrapeConfig struct {
	JobName       string `yaml:"job_name"`
	StaticConfigs []any  `yaml:"static_configs"`
	FileSDConfigs []struct {
		Files []string `yaml:"files"`
	} `yaml:"file_sd_configs"`
}

func readConfig(t *testing.T, b []byte) promConfig {
	t.Helper()
	var c promConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// The local copy has the shipped jobs and rule files; each job reads its
// targets from its own file, none from the compose names.
func TestWriteKeepsJobsAndRules(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	b, err := deployprom.Files.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	shipped := readConfig(t, b)
	b, err = os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	local := readConfig(t, b)
	if local.Global != shipped.Global || !slices.Equal(local.RuleFiles, shipped.RuleFiles) {
		t.Errorf("global %+v and rule files %v, want the shipped %+v and %v", local.Global, local.RuleFiles, shipped.Global, shipped.RuleFiles)
	}
	if len(local.ScrapeConfigs) != len(shipped.ScrapeConfigs) {
		t.Fatalf("%d jobs, want the shipped %d", len(local.ScrapeConfigs), len(shipped.ScrapeConfigs))
	}
	for i, job := range local.ScrapeConfigs {
		if job.JobName != shipped.ScrapeConfigs[i].JobName {
			t.Errorf("job %d is %s, want %s", i, job.JobName, shipped.ScrapeConfigs[i].JobName)
		}
		want := []string{TargetsDir + "/" + job.JobName + ".json"}
		if job.StaticConfigs != nil || len(job.FileSDConfigs) != 1 || !slices.Equal(job.FileSDConfigs[0].Files, want) {
			t.Errorf("job %s: static %v, file_sd %+v; want only the file %v", job.JobName, job.StaticConfigs, job.FileSDConfigs, want)
		}
	}
	for _, component := range []string{"api", "cdc", "consumer"} {
		if !slices.ContainsFunc(shipped.ScrapeConfigs, func(j scrapeConfig) bool { return j.JobName == Job(component) }) {
			t.Errorf("the shipped configuration has no job %s for the %s", Job(component), component)
		}
	}
	rules, err := filepath.Glob(filepath.Join(dir, RulesDir, "*.yml"))
	if err != nil || len(rules) == 0 {
		t.Fatalf("no rules written: %v", err)
	}
	for _, r := range rules {
		got, _ := os.ReadFile(r)
		want, err := deployprom.Files.ReadFile(RulesDir + "/" + filepath.Base(r))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s differs from the shipped rules (%v)", r, err)
		}
	}
}

// Options replace the intervals and every rule's for: duration, and
// nothing else of the rules.
func TestWriteAppliesOptions(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Options{ScrapeInterval: 500 * time.Millisecond, EvaluationInterval: time.Second, RuleFor: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if g := readConfig(t, b).Global; g.ScrapeInterval != "500ms" || g.EvaluationInterval != "1000ms" {
		t.Errorf("global %+v, want scrape 500ms and evaluation 1000ms", g)
	}
	type rule struct {
		Alert string `yaml:"alert"`
		Expr  string `yaml:"expr"`
		For   string `yaml:"for"`
	}
	type rules struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	shippedB, _ := deployprom.Files.ReadFile("rules/eventforge.rules.yml")
	localB, err := os.ReadFile(filepath.Join(dir, RulesDir, "eventforge.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped, local rules
	if err := yaml.Unmarshal(shippedB, &shipped); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(localB, &local); err != nil {
		t.Fatal(err)
	}
	for g := range shipped.Groups {
		for i, want := range shipped.Groups[g].Rules {
			got := local.Groups[g].Rules[i]
			if want.For != "" {
				want.For = "2000ms"
			}
			if got != want {
				t.Errorf("rule %+v, want %+v", got, want)
			}
		}
	}
}

func TestWriteTargets(t *testing.T) {
	dir := t.TempDir()
	for _, targets := range [][]string{{"127.0.0.1:1"}, {"127.0.0.1:2", "127.0.0.1:3"}} {
		if err := WriteTargets(dir, Job("cdc"), targets); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, TargetsDir, "eventforge-cdc.json"))
		if err != nil {
			t.Fatal(err)
		}
		var got []struct {
			Targets []string `json:"targets"`
		}
		if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 || !slices.Equal(got[0].Targets, targets) {
			t.Errorf("targets file %s (%v), want %v", strings.TrimSpace(string(b)), err, targets)
		}
	}
}
