package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/promserver"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
)

// TestAlertNoActiveCDCFiresAndClears: a real Prometheus (the prometheus
// program of Debian's package, as `make monitor` runs it) loaded with the
// shipped alert rules scrapes a cdc reader on the test's own database,
// slot and topic. While the reader leads, EventForgeNoActiveCDC is
// inactive; once the reader is stopped it fires in Prometheus's own
// /api/v1/alerts, and once a reader leads again it clears.
//
// The rules are the shipped ones but for their for: durations, which the
// copy this test writes shortens to alertFor (promserver.Options.RuleFor),
// and Prometheus scrapes and evaluates every alertInterval, so that the
// alert fires and clears within the test: the test waits for each state,
// never asserts on how long it took. Of the slot's alerts,
// EventForgeNoActiveCDC is the one a stopped reader fires (its series are
// gone); EventForgeSlotLagHigh needs a reader that still reports and
// 512 MiB of WAL behind the slot.
func TestAlertNoActiveCDCFiresAndClears(t *testing.T) {
	const (
		alert         = "EventForgeNoActiveCDC"
		alertFor      = time.Second
		alertInterval = 250 * time.Millisecond
	)
	env := testenv.New(t)
	bin, err := promserver.Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := promserver.Options{ScrapeInterval: alertInterval, EvaluationInterval: alertInterval, RuleFor: alertFor}
	if err := promserver.Write(dir, opts); err != nil {
		t.Fatal(err)
	}
	reader, metrics := cdcReader(t, env, "cdc", nil)
	if err := promserver.WriteTargets(dir, promserver.Job("cdc"), []string{metrics}); err != nil {
		t.Fatal(err)
	}
	prom := prometheusAPI("http://" + testkit.FreeAddr(t))
	startCmd(t, "prometheus", nil, promserver.Command(bin, dir, prom.host()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := promserver.WaitReady(ctx, string(prom), nil); err != nil {
		t.Fatal(err)
	}

	prom.waitCleared(t, alert, env.Slot, "the reader leads")
	reader.stop()
	firing := prom.waitFiring(t, alert, "the reader stopped")
	t.Logf("%s firing after the reader stopped: %s", alert, firing)

	_, metrics = cdcReader(t, env, "cdc-again", nil)
	if err := promserver.WriteTargets(dir, promserver.Job("cdc"), []string{metrics}); err != nil {
		t.Fatal(err)
	}
	prom.waitCleared(t, alert, env.Slot, "a reader leads again")
	t.Logf("%s cleared: a reader leads again", alert)
}

// prometheusAPI is the base URL of a Prometheus server's HTTP API.
type prometheusAPI string

func (p prometheusAPI) host() string {
	u, _ := url.Parse(string(p))
	return u.Host
}

// get decodes the data of the answer to the API path.
func (p prometheusAPI) get(path string, data any) error {
	resp, err := http.Get(string(p) + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("GET %s: %s %s", path, body.Status, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// promAlert is an alert as /api/v1/alerts lists it.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

func (a promAlert) String() string {
	return fmt.Sprintf("state %s, labels %v, active since %s, value %s", a.State, a.Labels, a.ActiveAt.Format(time.RFC3339Nano), a.Value)
}

// alerts returns the alerts named name in /api/v1/alerts: the pending and
// firing ones (a resolved alert is not listed).
func (p prometheusAPI) alerts(name string) ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	var out []promAlert
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			out = append(out, a)
		}
	}
	return out, nil
}

// rule returns the state of the alerting rule name and when it was last
// evaluated (/api/v1/rules).
func (p prometheusAPI) rule(name string) (state string, evaluated time.Time, err error) {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name           string    `json:"name"`
				State          string    `json:"state"`
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules?type=alert", &data); err != nil {
		return "", time.Time{}, err
	}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Name == name {
				return r.State, r.LastEvaluation, nil
			}
		}
	}
	return "", time.Time{}, fmt.Errorf("no alerting rule %s loaded", name)
}

// waitFiring waits until the alert name fires and returns it.
func (p prometheusAPI) waitFiring(t *testing.T, name, why string) promAlert {
	t.Helper()
	var firing promAlert
	testenv.Eventually(t, 2*time.Minute, name+" fires: "+why, func() error {
		as, err := p.alerts(name)
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.State == "firing" {
				firing = a
				return nil
			}
		}
		return fmt.Errorf("alerts %v", as)
	})
	return firing
}

// waitCleared waits until Prometheus has scraped eventforge_cdc_active = 1
// for slot and, in an evaluation after that, found the alert name
// inactive: not pending, not firing, not in /api/v1/alerts.
func (p prometheusAPI) waitCleared(t *testing.T, name, slot, why string) {
	t.Helper()
	var active time.Time
	testenv.Eventually(t, 2*time.Minute, "Prometheus scrapes an active reader on the slot: "+why, func() error {
		var data struct {
			Result []json.RawMessage `json:"result"`
		}
		q := url.QueryEscape(fmt.Sprintf(`eventforge_cdc_active{slot=%q} == 1`, slot))
		if err := p.get("/api/v1/query?query="+q, &data); err != nil {
			return err
		}
		if len(data.Result) == 0 {
			return fmt.Errorf("no reader reports eventforge_cdc_active 1")
		}
		active = time.Now()
		return nil
	})
	testenv.Eventually(t, 2*time.Minute, name+" clears: "+why, func() error {
		state, evaluated, err := p.rule(name)
		if err != nil {
			return err
		}
		as, err := p.alerts(name)
		if err != nil {
			return err
		}
		if state != "inactive" || !evaluated.After(active) || len(as) > 0 {
			return fmt.Errorf("rule %s (last evaluated %s), alerts %v", state, evaluated.Format(time.RFC3339Nano), as)
		}
		return nil
	})
}
