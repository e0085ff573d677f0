package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/eventforge/eventforge/internal/testkit"
)

var (
	metricRE = regexp.MustCompile(`\beventforge_[a-z0-9_]+\b`)
	byRE     = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// labelValuesRE matches a Grafana variable query.
	labelValuesRE = regexp.MustCompile(`^label_values\((eventforge_[a-z0-9_]+),\s*([a-z_]+)\)$`)
)

// checkQuery reports metrics in expr that docs/metrics.md does not list and
// labels in by (…) that none of its metrics has. It returns the metrics.
func checkQuery(t *testing.T, where, expr string, docs map[string]testkit.MetricDoc) []string {
	t.Helper()
	var names []string
	labels := map[string]bool{"instance": true, "job": true}
	for _, name := range metricRE.FindAllString(expr, -1) {
		base := name
		if d, ok := docs[name]; ok {
			for _, l := range d.Labels {
				labels[l] = true
			}
		} else {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				b := strings.TrimSuffix(name, suffix)
				if d, ok := docs[b]; ok && d.Kind == "histogram" && b != name {
					base = b
					for _, l := range d.Labels {
						labels[l] = true
					}
					if suffix == "_bucket" {
						labels["le"] = true
					}
				}
			}
			if base == name {
				t.Errorf("%s: metric %s is not in docs/metrics.md (expr %s)", where, name, expr)
				continue
			}
		}
		names = append(names, base)
	}
	if len(names) == 0 {
		t.Errorf("%s: expr %q queries no eventforge metric", where, expr)
	}
	for _, m := range byRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: label %q in %q is not a label of %v", where, l, m[0], names)
			}
		}
	}
	return names
}

// promtoolCheck validates PromQL expressions by running `promtool check
// rules` on a file of recording rules made from them. `make promtool`
// (run by `make test`) installs promtool.
func promtoolCheck(t *testing.T, exprs map[string]string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run `make promtool` (Debian package prometheus)")
	}
	var rules []map[string]string
	for name, e := range exprs {
		rules = append(rules, map[string]string{"record": name, "expr": e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "exprs.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard queries: %v\n%s", err, out)
	}
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

const dashboardFile = "grafana/dashboards/eventforge-replication-delivery.json"

func TestGrafanaDashboardQueriesDocumentedMetrics(t *testing.T) {
	docs := testkit.MetricsDoc(t, "../docs/metrics.md")
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title != "EventForge — replication & delivery" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q", d.Title, d.UID)
	}
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasource provisioning: %+v, want one prometheus datasource", ds.Datasources)
	}
	uid := ds.Datasources[0].UID

	queried := map[string]bool{}
	exprs := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if p.Datasource == nil || p.Datasource.UID != uid {
				t.Errorf("%s: datasource %+v, want uid %s", where, p.Datasource, uid)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for i, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != uid {
					t.Errorf("%s: target datasource %s, want %s", where, tg.Datasource.UID, uid)
				}
				for _, m := range checkQuery(t, where, tg.Expr, docs) {
					queried[m] = true
				}
				exprs[fmt.Sprintf("panel_%d_%d", p.ID, i)] = substituteVariables(tg.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		if text == "" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(<metric>, <label>)", v.Name, text)
			continue
		}
		checkQuery(t, "variable "+v.Name, fmt.Sprintf("max by (%s) (%s)", m[2], m[1]), docs)
	}
	promtoolCheck(t, exprs)

	// The list: slot lag bytes and seconds, retained WAL,
	// confirmed-LSN rate, publish rate and errors, consumer lag per group,
	// idempotency conflicts, retries, DLQ.
	for _, m := range []string{
		"eventforge_cdc_slot_lag_bytes", "eventforge_cdc_replication_lag_seconds", "eventforge_cdc_retained_wal_bytes",
		"eventforge_cdc_confirmed_lsn_bytes", "eventforge_cdc_events_published_total", "eventforge_cdc_publish_errors_total",
		"eventforge_consumer_lag", "eventforge_consumer_idempotency_conflicts_total", "eventforge_consumer_retries_total",
		"eventforge_dlq_events",
	} {
		if !queried[m] {
			t.Errorf("no panel queries %s", m)
		}
	}

	// Provisioning loads the folder compose mounts the dashboards into.
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/eventforge.yml", &prov)
	mounted := false
	for _, v := range loadCompose(t).Services["grafana"].Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":")
		mounted = mounted || (src == "../grafana/dashboards" && len(prov.Providers) == 1 && dst == prov.Providers[0].Options.Path)
	}
	if !mounted {
		t.Errorf("compose does not mount ../grafana/dashboards at the provisioned path %+v", prov.Providers)
	}
}

// substituteVariables replaces Grafana template variables so that the
// expression parses as PromQL.
func substituteVariables(expr string) string {
	for _, v := range []string{"$slot", "$consumer", "$__rate_interval"} {
		repl := ".*"
		if v == "$__rate_interval" {
			repl = "5m"
		}
		expr = strings.ReplaceAll(expr, v, repl)
	}
	return expr
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// headingAnchors returns the GitHub anchors of the markdown headings of path.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	strip := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(strip.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return anchors
}

func TestAlertRules(t *testing.T) {
	docs := testkit.MetricsDoc(t, "../docs/metrics.md")
	// Runbooks live in docs/operations.md; those of the DLQ's own alerts
	// in the DLQ runbook, docs/dlq.md.
	runbooks := map[string]map[string]bool{
		"docs/operations.md": headingAnchors(t, "../docs/operations.md"),
		"docs/dlq.md":        headingAnchors(t, "../docs/dlq.md"),
	}
	var rf ruleFile
	readYAML(t, "prometheus/rules/eventforge.rules.yml", &rf)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			checkQuery(t, "alert "+r.Alert, r.Expr, docs)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: summary and description are required", r.Alert)
			}
			file, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "#")
			if !runbooks[file][anchor] || anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url %q, want docs/operations.md#%s (or docs/dlq.md#%[3]s) with that heading in the doc",
					r.Alert, r.Annotations["runbook_url"], strings.ToLower(r.Alert))
			}
		}
	}
	// The list: slot lag bytes, retained WAL, replication lag
	// seconds, no active cdc, oldest unpublished age, consumer lag, DLQ
	// non-empty for long, publish error rate.
	for _, want := range []string{
		"EventForgeSlotLagHigh", "EventForgeRetainedWALHigh", "EventForgeReplicationLagHigh", "EventForgeNoActiveCDC",
		"EventForgeOldestUnpublishedAgeHigh", "EventForgeConsumerLagHigh", "EventForgeDLQNotEmpty", "EventForgePublishErrors",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s is missing", want)
		}
	}

	// Every alert has a promtool case where it fires and one where it
	// stays quiet; `make promtool` runs them.
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "prometheus/tests/eventforge.test.yml", &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: promtool tests must have a case where it fires (%v) and one where it stays quiet (%v)", a, fires[a], quiet[a])
		}
	}
}
