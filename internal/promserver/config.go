// Package promserver runs a real Prometheus server — the prometheus program
// of Debian's package prometheus — with EventForge's shipped configuration
// and alert rules (deploy/prometheus) on loopback: `eventforge stack
// monitor` beside `eventforge dev`, and the e2e alert tests beside the
// processes they start.
//
// The shipped configuration names compose services as targets. Write makes
// a local copy with the same jobs and rules in which every job reads its
// targets from a file of its own (file_sd), which whoever starts the
// components writes (WriteTargets) and may rewrite while Prometheus runs.
package promserver

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	deployprom "github.com/eventforge/eventforge/deploy/prometheus"
)

// Files of the directory Write fills and Command serves.
const (
	ConfigFile = "prometheus.yml"
	RulesDir   = "rules"
	TargetsDir = "targets"
	DataDir    = "data"
)

// Job returns the scrape job of an EventForge component (api, cdc,
// consumer) in the shipped configuration.
func Job(component string) string { return "eventforge-" + component }

// Options say how the local copy differs from the shipped configuration
// beyond its targets; the zero value keeps everything else as shipped.
type Options struct {
	// ScrapeInterval and EvaluationInterval replace the shipped global
	// intervals.
	ScrapeInterval, EvaluationInterval time.Duration
	// RuleFor replaces the for: duration of every rule that has one. The
	// e2e alert tests shorten them so that an alert fires and clears within
	// a test; the local stack keeps the shipped ones.
	RuleFor time.Duration
}

// Write writes into dir the local copy of the shipped configuration
// (ConfigFile), in which every job reads its targets from
// TargetsDir/<job>.json, and the shipped rules (RulesDir), with opts
// applied. It creates TargetsDir; a job whose file does not exist has no
// targets.
func Write(dir string, opts Options) error {
	shipped, err := deployprom.Files.ReadFile("prometheus.yml")
	if err != nil {
		return err
	}
	cfg, err := localConfig(shipped, opts)
	if err != nil {
		return fmt.Errorf("deploy/prometheus/prometheus.yml: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, RulesDir), filepath.Join(dir, TargetsDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfg, 0o644); err != nil {
		return err
	}
	rules, err := fs.Glob(deployprom.Files, "rules/*.yml")
	if err != nil {
		return err
	}
	for _, name := range rules {
		b, err := deployprom.Files.ReadFile(name)
		if err != nil {
			return err
		}
		if opts.RuleFor > 0 {
			if b, err = withRuleFor(b, opts.RuleFor); err != nil {
				return fmt.Errorf("deploy/prometheus/%s: %w", name, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteTargets makes targets (host:port) the targets of job in the
// configuration Write wrote into dir. The file is replaced at once, so
// Prometheus, which watches it, never reads half of it.
func WriteTargets(dir, job string, targets []string) error {
	b, err := json.Marshal([]map[string]any{{"targets": targets}})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, TargetsDir, job+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// localConfig is the shipped configuration with opts applied and each
// job's targets read from TargetsDir/<job>.json.
func localConfig(shipped []byte, opts Options) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		return nil, err
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
		cfg["global"] = global
	}
	if opts.ScrapeInterval > 0 {
		global["scrape_interval"] = duration(opts.ScrapeInterval)
	}
	if opts.EvaluationInterval > 0 {
		global["evaluation_interval"] = duration(opts.EvaluationInterval)
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no scrape_configs")
	}
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		if name == "" {
			return nil, fmt.Errorf("a scrape config without job_name")
		}
		delete(job, "static_configs")
		job["file_sd_configs"] = []any{map[string]any{"files": []any{TargetsDir + "/" + name + ".json"}}}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte(localHeader), b...), nil
}

// localHeader opens the local copy of the configuration.
const localHeader = `# Written from EventForge's deploy/prometheus/prometheus.yml (internal/promserver):
# the same jobs and rules, each job's targets read from targets/<job>.json.
`

// withRuleFor returns the rule file rules with every for: set to d.
func withRuleFor(rules []byte, d time.Duration) ([]byte, error) {
	var file map[string]any
	if err := yaml.Unmarshal(rules, &file); err != nil {
		return nil, err
	}
	groups, _ := file["groups"].([]any)
	for _, g := range groups {
		group, _ := g.(map[string]any)
		rs, _ := group["rules"].([]any)
		for _, r := range rs {
			if rule, _ := r.(map[string]any); rule != nil && rule["for"] != nil {
				rule["for"] = duration(d)
			}
		}
	}
	return yaml.Marshal(file)
}

// duration is d as Prometheus writes durations (whole milliseconds).
func duration(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}
