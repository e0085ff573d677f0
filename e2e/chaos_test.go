package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chaosSettings reads EVENTFORGE_CHAOS_DURATION (default 60s) and
// EVENTFORGE_CHAOS_RATE (orders/s, default 300); `make chaos` sets them.
func chaosSettings(t *testing.T) (time.Duration, int) {
	d, rate := 60*time.Second, 300
	if v := os.Getenv("EVENTFORGE_CHAOS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("EVENTFORGE_CHAOS_DURATION: %v", err)
		}
	}
	if v := os.Getenv("EVENTFORGE_CHAOS_RATE"); v != "" {
		var err error
		if rate, err = strconv.Atoi(v); err != nil || rate < 1 {
			t.Fatalf("EVENTFORGE_CHAOS_RATE: %q", v)
		}
	}
	return d, rate
}

// component is one restartable process of the pipeline under chaos.
type component struct {
	name  string
	start func(generation int) *proc
	mu    sync.Mutex
	cur   *proc
	gen   int
}

func (c *component) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.cur = c.start(c.gen)
}

func (c *component) kill() {
	c.mu.Lock()
	p := c.cur
	c.mu.Unlock()
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.Exited()
}

// TestChaosSoak offers load for the configured duration while a random
// component (api, cdc, or the fulfillment or ledger consumer) is SIGKILLed
// every 10–30 s and restarted;
// then it drains the pipeline and audits it: nothing lost, no effect twice.
func TestChaosSoak(t *testing.T) {
	duration, rate := chaosSettings(t)
	pl := newPipeline(t)
	lgroup := ledgerGroup(t, pl)
	components := []*component{
		{name: "api", start: func(g int) *proc { return pl.apiProc(t, fmt.Sprintf("api-%d", g), nil, pl.env.DatabaseURL) }},
		{name: "cdc", start: func(g int) *proc { return pl.startCDC(t, fmt.Sprintf("cdc-%d", g), nil) }},
		{name: "fulfillment", start: func(g int) *proc {
			p, _ := consumerProc(t, pl, fmt.Sprintf("fulfillment-%d", g), "fulfillment", pl.env.Group, nil)
			return p
		}},
		{name: "ledger", start: func(g int) *proc {
			p, _ := consumerProc(t, pl, fmt.Sprintf("ledger-%d", g), "ledger", lgroup, nil)
			return p
		}},
	}
	for _, c := range components {
		c.restart()
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()

	// Open-loop load; failures while the api is down are expected and not
	// counted as orders: the audit counts what PostgreSQL holds.
	load := startOrderLoad(t, pl, rate)

	// Kills, each followed by a restart, and the time until every order
	// committed before the kill was applied.
	type kill struct {
		component string
		at        time.Time
		recovered time.Duration
	}
	var (
		kills    []kill
		recovery sync.WaitGroup
		kmu      sync.Mutex
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for {
		wait := 10*time.Second + time.Duration(rng.Int64N(int64(20*time.Second)))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
		c := components[rng.IntN(len(components))]
		at := time.Now()
		c.kill()
		t.Logf("%s: SIGKILL %s", at.Format(time.TimeOnly), c.name)
		time.Sleep(500 * time.Millisecond)
		c.restart()
		kmu.Lock()
		idx := len(kills)
		kills = append(kills, kill{component: c.name, at: at})
		kmu.Unlock()
		recovery.Add(1)
		go func() {
			defer recovery.Done()
			deadline := at.Add(3 * time.Minute)
			for time.Now().Before(deadline) {
				var behind int
				err := pl.env.Pool.QueryRow(context.Background(),
					`SELECT count(*) FROM orders WHERE status = 'created' AND created_at < $1`, at).Scan(&behind)
				if err == nil && behind == 0 {
					kmu.Lock()
					kills[idx].recovered = time.Since(at)
					kmu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	load.finish(t)
	recovery.Wait()

	rep, code := runVerify(t, pl, "ledger="+lgroup)
	var maxRecovery time.Duration
	for _, k := range kills {
		if k.recovered == 0 {
			t.Errorf("after the SIGKILL of %s at %s the orders committed before it were not all applied within 3 minutes", k.component, k.at.Format(time.TimeOnly))
		}
		maxRecovery = max(maxRecovery, k.recovered)
	}
	t.Logf("chaos summary: duration %s, rate %d/s, kills %d, requests %d (failed %d), orders %d, events %d, deliveries %d, duplicate deliveries %d, effects %v, lost %d, duplicate effects %d, max recovery %s",
		duration, rate, len(kills), load.ok.Load()+load.bad.Load(), load.bad.Load(), rep.LogicalEvents, rep.LogicalEvents, rep.Deliveries, rep.DuplicateDeliveries,
		rep.BusinessChanges, rep.Lost, rep.DuplicateEffects, maxRecovery.Round(time.Millisecond))
	if rep.DeadLettered["fulfillment"]+rep.DeadLettered["ledger"] != 0 {
		t.Errorf("healthy events were dead-lettered: %v", rep.DeadLettered)
	}
	if code != 0 || !rep.Drained || rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.OrderingViolations != 0 {
		t.Fatalf("after chaos: verify exit %d, drained %v, lost %d, duplicate effects %d, ordering violations %d: %v",
			code, rep.Drained, rep.Lost, rep.DuplicateEffects, rep.OrderingViolations, rep.Violations)
	}
	if len(kills) == 0 {
		t.Fatalf("no component was killed in %s: the soak proved nothing", duration)
	}
}
