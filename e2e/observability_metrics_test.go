package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
)

// labelSets maps "family/label" to the set of values seen.
func labelSets(fams map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				k := name + "/" + lp.GetName()
				if out[k] == nil {
					out[k] = map[string]bool{}
				}
				out[k][lp.GetValue()] = true
			}
		}
	}
	return out
}

func seriesCount(fams map[string]*dto.MetricFamily) map[string]int {
	out := map[string]int{}
	for name, f := range fams {
		out[name] = len(f.GetMetric())
	}
	return out
}

// sameSeries reports how two scrapes of every component differ in label
// values or series counts, or nil when they do not.
func sameSeries(a, b map[string]map[string]*dto.MetricFamily) error {
	var diffs []string
	for comp := range b {
		setsA, setsB := labelSets(a[comp]), labelSets(b[comp])
		for _, key := range slices.Sorted(maps.Keys(setsB)) {
			if !maps.Equal(setsA[key], setsB[key]) {
				diffs = append(diffs, fmt.Sprintf("%s: %s values %v, then %v", comp, key,
					slices.Sorted(maps.Keys(setsA[key])), slices.Sorted(maps.Keys(setsB[key]))))
			}
		}
		countA, countB := seriesCount(a[comp]), seriesCount(b[comp])
		for _, name := range slices.Sorted(maps.Keys(countB)) {
			if countA[name] != countB[name] {
				diffs = append(diffs, fmt.Sprintf("%s: %s had %d series, then %d", comp, name, countA[name], countB[name]))
			}
		}
		for name := range countA {
			if _, ok := countB[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: %s disappeared", comp, name))
			}
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("series still changing: %s", strings.Join(diffs, "; "))
	}
	return nil
}

// topicPartitions lists the partitions of the pipeline's topic, as label
// values.
func topicPartitions(t *testing.T, pl *pipeline) []string {
	t.Helper()
	_, ends, err := testenv.CommittedOffsets(pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic)
	if err != nil {
		t.Fatalf("reading the partitions of %s: %v", pl.env.Topic, err)
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		out = append(out, strconv.Itoa(int(p)))
	}
	if len(out) == 0 {
		t.Fatalf("topic %s has no partitions", pl.env.Topic)
	}
	return out
}

var uuidRE = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)

// TestMetricsCardinalityUnderLoad scrapes api, cdc and consumer while
// orders flow: every metric docs/metrics.md lists for a component is
// exported by it with the documented type and labels, nothing undocumented
// is exported under eventforge_*, no label value is an order or event ID,
// and no label's value set or family's series count grows between a scrape
// after a first load and one after four times as many orders, each taken
// once the series settled (complete and unchanged between scrapes). The metrics
// queried by the alert rules and the Grafana dashboard are all exported, and
// the metrics endpoints answer the Kubernetes probes.
func TestMetricsCardinalityUnderLoad(t *testing.T) {
	doc := testkit.MetricsDoc(t, "../docs/metrics.md")
	pl := newPipeline(t)
	pl.startAPI(t)
	cdcAddr, consumerAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	pl.startCDC(t, "cdc", nil, "--metrics-addr", cdcAddr, "--heartbeat-interval", "1s")
	pl.startConsumer(t, "consumer", nil, "--metrics-addr", consumerAddr, "--dlq-stats-interval", "1s")
	endpoints := map[string]string{
		"api":      pl.httpAddr,
		"cdc":      cdcAddr,
		"consumer": consumerAddr,
	}
	for _, addr := range []string{cdcAddr, consumerAddr} {
		for _, path := range []string{"/healthz", "/readyz"} {
			testenv.Eventually(t, 30*time.Second, "GET "+addr+path, func() error {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s", resp.Status)
				}
				return nil
			})
		}
	}

	var mu sync.Mutex
	var ids []string
	load := func(n int) {
		var wg sync.WaitGroup
		type created struct{ orderID, eventID string }
		out := make(chan created, n)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					o, e := createREST(t, pl.httpAddr, fmt.Sprintf("metrics-customer-%d", i%5))
					out <- created{o, e}
				}
			}()
		}
		wg.Wait()
		close(out)
		for c := range out {
			mu.Lock()
			ids = append(ids, c.orderID, c.eventID)
			mu.Unlock()
			waitProcessed(t, pl, c.orderID, c.eventID)
		}
	}
	partitions := topicPartitions(t, pl)
	// settled scrapes every component until its series are complete — the
	// consumer, alone in its group, reports a lag series for every
	// partition of the topic — and stable: two scrapes in a row show the
	// same label values and series counts. Only then is a sample taken, so
	// a series still appearing after a load is not mistaken for one the load
	// added.
	settled := func(what string) map[string]map[string]*dto.MetricFamily {
		var prev, cur map[string]map[string]*dto.MetricFamily
		testenv.Eventually(t, 60*time.Second, what, func() error {
			all := map[string]map[string]*dto.MetricFamily{}
			for comp, addr := range endpoints {
				fams, err := scrapeMetrics(addr)
				if err != nil {
					return fmt.Errorf("%s: %w", comp, err)
				}
				all[comp] = fams
			}
			prev, cur = cur, all
			lag := labelSets(all["consumer"])["eventforge_consumer_lag/partition"]
			for _, p := range partitions {
				if !lag[p] {
					return fmt.Errorf("consumer: no eventforge_consumer_lag series for partition %s yet (have %v)", p, slices.Sorted(maps.Keys(lag)))
				}
			}
			if prev == nil {
				return fmt.Errorf("one scrape so far")
			}
			return sameSeries(prev, cur)
		})
		return cur
	}
	// Every documented metric of a component appears (some once a partition
	// is owned or the DLQ's size was read).
	testenv.Eventually(t, 60*time.Second, "documented metrics exported", func() error {
		var missing []string
		for comp, addr := range endpoints {
			fams, err := scrapeMetrics(addr)
			if err != nil {
				return err
			}
			for name, d := range doc {
				if d.Component == comp && fams[name] == nil {
					missing = append(missing, comp+":"+name)
				}
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("missing %v", missing)
		}
		return nil
	})

	load(50)
	first := settled("series settled after the first load")
	load(200)
	second := settled("series settled after the second load")

	for comp, fams := range second {
		for name, f := range fams {
			if !strings.HasPrefix(name, "eventforge_") {
				continue
			}
			d, ok := doc[name]
			if !ok || d.Component != comp {
				t.Errorf("%s exports %s, which docs/metrics.md does not list for %s", comp, name, comp)
				continue
			}
			if kind := strings.ToLower(f.GetType().String()); kind != d.Kind {
				t.Errorf("%s: type %s, docs/metrics.md says %s", name, kind, d.Kind)
			}
			labels := map[string]bool{}
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = true
				}
			}
			got := make([]string, 0, len(labels))
			for l := range labels {
				got = append(got, l)
			}
			sort.Strings(got)
			if !slices.Equal(got, d.Labels) {
				t.Errorf("%s: labels %v, docs/metrics.md says %v", name, got, d.Labels)
			}
		}
		for name, d := range doc {
			if d.Component == comp && fams[name] == nil {
				t.Errorf("%s no longer exports %s", comp, name)
			}
		}
		before, after := labelSets(first[comp]), labelSets(fams)
		for key, values := range after {
			var grown []string
			for v := range values {
				if !before[key][v] {
					grown = append(grown, v)
				}
				if uuidRE.MatchString(v) {
					t.Errorf("%s: label %s has an ID-like value %q", comp, key, v)
				}
			}
			if len(grown) > 0 {
				t.Errorf("%s: label %s gained values under load: %v (before: %d values)", comp, key, grown, len(before[key]))
			}
		}
		countBefore := seriesCount(first[comp])
		for name, n := range seriesCount(fams) {
			if n > countBefore[name] {
				t.Errorf("%s: %s grew from %d to %d series under load", comp, name, countBefore[name], n)
			}
		}
	}
	// No label value anywhere names one of the orders or events.
	for comp, fams := range second {
		for key, values := range labelSets(fams) {
			for v := range values {
				for _, id := range ids {
					if strings.Contains(v, id) {
						t.Errorf("%s: label %s carries the ID %s", comp, key, id)
					}
				}
			}
		}
	}

	// What the alert rules and the dashboard query is exported.
	exported := map[string]bool{}
	for _, fams := range second {
		for name, f := range fams {
			exported[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					exported[name+s] = true
				}
			}
		}
	}
	for _, q := range monitoringQueries(t) {
		for _, name := range regexp.MustCompile(`\beventforge_[a-z0-9_]+\b`).FindAllString(q, -1) {
			if !exported[name] {
				t.Errorf("query %q uses %s, which no component exports", q, name)
			}
		}
	}
}

// monitoringQueries returns the PromQL of the alert rules and of the
// Grafana dashboard in deploy/.
func monitoringQueries(t *testing.T) []string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("../deploy/prometheus/rules/eventforge.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			qs = append(qs, r.Expr)
		}
	}
	b, err = os.ReadFile("../deploy/grafana/dashboards/eventforge-replication-delivery.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	if len(qs) < 10 {
		t.Fatalf("only %d queries in deploy/ rules and dashboard", len(qs))
	}
	return qs
}
