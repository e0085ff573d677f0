package console

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestDrillDisarmsWhatItArmed: after a drill, the runner restarts without
// failpoints the component the drill armed whose process still has them,
// and leaves alone a component armed by someone else; the run names what
// it disarmed.
func TestDrillDisarmsWhatItArmed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableDrills = true
	procs := &fakeProcs{components: []Component{
		{Name: "consumer-fulfillment", Running: true, Failpoints: "consumer.before_db_commit=1*delay(3s)"},
		{Name: "cdc", Running: true, Failpoints: "cdc.before_publish=off"},
	}}
	arming := drill{Name: "arming", Stages: []string{"arm"}, run: func(ctx context.Context, d *drillRun) error {
		return d.step(ctx, func(_ context.Context, f map[string]any) error {
			f["component"], f["failpoints"] = "consumer-fulfillment", "consumer.before_db_commit=1*delay(3s)"
			return nil
		})
	}}
	c := newTestConsole(cfg, procs, []drill{arming})
	base := serve(t, c.Handler())
	code, body, _ := do(t, "POST", base+"/api/ops/drills/arming/runs", "", "")
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %s", code, body)
	}
	run := runOf(t, c, body)
	c.drills.wg.Wait()
	snap := run.snapshot()
	if snap.State != "done" || !slices.Equal(snap.Disarmed, []string{"consumer-fulfillment"}) {
		t.Fatalf("run %s, disarmed %v; want done, consumer-fulfillment", snap.State, snap.Disarmed)
	}
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if !slices.Equal(procs.restarts, []string{"consumer-fulfillment "}) {
		t.Fatalf("restarts %q, want the drilled consumer once without failpoints", procs.restarts)
	}
}

// TestStageSaysWhatItWaitsFor: a waiting stage names what it waits for
// and since when; the name is gone once the stage is over.
func TestStageSaysWhatItWaitsFor(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableDrills = true
	release := make(chan struct{})
	waiting := drill{Name: "waiting", Stages: []string{"wait"}, run: func(ctx context.Context, d *drillRun) error {
		return d.step(ctx, func(ctx context.Context, _ map[string]any) error {
			return d.c.waitFor(ctx, waitSession, func() (bool, error) {
				select {
				case <-release:
					return true, nil
				default:
					return false, nil
				}
			})
		})
	}}
	c := newTestConsole(cfg, &fakeProcs{}, []drill{waiting})
	base := serve(t, c.Handler())
	_, body, _ := do(t, "POST", base+"/api/ops/drills/waiting/runs", "", "")
	run := runOf(t, c, body)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := run.snapshot().Stages[0]
		if st.WaitingFor == waitSession && st.WaitingSince != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stage %+v never said it waits for the session timeout", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	c.drills.wg.Wait()
	if st := run.snapshot().Stages[0]; st.State != "done" || st.WaitingFor != "" || st.WaitingSince != nil {
		t.Fatalf("finished stage %+v still waits", st)
	}
}

// TestDrillCatalog: every drill expects one logical event and one
// business change, and every wait a drill can name has its text.
func TestDrillCatalog(t *testing.T) {
	for _, d := range drillCatalog() {
		if d.Expect.LogicalEvents != 1 || d.Expect.BusinessChanges != 1 || d.Expect.Marks != 1 {
			t.Errorf("drill %s expects %+v", d.Name, d.Expect)
		}
	}
	for _, id := range []waitID{waitRunning, waitRestarted, waitSlotHeld, waitSettled, waitSession, waitPartitions, waitSecondCommit, waitRepublished, waitDeadLettered} {
		if waitTexts[id] == "" {
			t.Errorf("wait %s has no text", id)
		}
	}
}
