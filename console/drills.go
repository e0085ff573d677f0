package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/eventforge/eventforge/internal/failpoint"
)

// Components the drills act on, as named by the dev supervisor.
const componentCDC = "cdc"

var componentDrilled = "consumer-" + drilledConsumer

// Failpoints the drills arm (see internal/failpoint and docs/failpoints.md).
const (
	fpRelayCrash     = failpoint.CDCAfterAckBeforeConfirm + "=1*crash"
	fpConsumerCrash  = failpoint.ConsumerAfterDBCommitBeforeOffset + "=1*crash"
	fpHoldCommit     = failpoint.ConsumerBeforeDBCommit + "=1*delay(3s)"
	fpCommitRejected = failpoint.ConsumerBeforeDBCommit + "=error"
)

// stageTimeout bounds how long one stage waits for the system.
const stageTimeout = 2 * time.Minute

// Counters are the design's drill counters, computed from durable state by
// the delivery auditor (verify.AuditOrder) for the drill's order.
type Counters struct {
	// LogicalEvents: outbox rows of the order.
	LogicalEvents int `json:"logical_events"`
	// Deliveries: records of the order in the topic.
	Deliveries int `json:"deliveries"`
	// ConsumerDeliveries: times the drilled consumer (the fulfillment
	// consumer) was handed the event, as proven by marks and committed
	// offsets (see each drill).
	ConsumerDeliveries int `json:"consumer_deliveries"`
	// Marks: processed_events rows of the drilled consumer.
	Marks int `json:"marks"`
	// BusinessChanges: the drilled consumer's effects on the order (its
	// OrderEffects: the fulfillment consumer's shipments).
	BusinessChanges int `json:"business_changes"`
	// DeadLettered: the order's records in the DLQ.
	DeadLettered int `json:"dead_lettered"`
}

// drill is one failure scenario: its stages run in order.
type drill struct {
	Name   string   `json:"name"`
	Stages []string `json:"stages"`
	// Expect are the counters the drill ends with when the design holds:
	// the page shows them beside the counters it got, in the same words.
	Expect Counters `json:"expect"`
	run    func(ctx context.Context, d *drillRun) error
}

// stage is the state of one stage of a run.
type stage struct {
	ID       string         `json:"id"`
	State    string         `json:"state"` // pending, running, done, failed
	Facts    map[string]any `json:"facts"`
	Started  *time.Time     `json:"started_at,omitempty"`
	Finished *time.Time     `json:"finished_at,omitempty"`
	// WaitingFor names what the running stage waits for (a waitID), and
	// WaitingSince since when; empty once the stage is over.
	WaitingFor   waitID     `json:"waiting_for,omitempty"`
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
}

// drillRun is one execution of a drill.
type drillRun struct {
	ID       string    `json:"id"`
	Drill    string    `json:"drill"`
	Mode     string    `json:"mode"`  // run, step
	State    string    `json:"state"` // running, paused, done, failed
	Stages   []stage   `json:"stages"`
	OrderID  string    `json:"order_id,omitempty"`
	EventID  string    `json:"event_id,omitempty"`
	Counters *Counters `json:"counters"`
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started_at"`
	// Disarmed are the components restarted without failpoints after the
	// drill, so that no failpoint outlives it.
	Disarmed []string `json:"disarmed,omitempty"`

	mu      sync.Mutex
	resume  chan struct{}
	c       *Console
	baseURL string
	current int
}

// drillRunner runs one drill at a time.
type drillRunner struct {
	c      *Console
	drills []drill
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	runs   map[string]*drillRun
	order  []string
	active *drillRun
	wg     sync.WaitGroup
}

func newDrillRunner(c *Console) *drillRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &drillRunner{c: c, drills: drillCatalog(), ctx: ctx, cancel: cancel, runs: map[string]*drillRun{}}
}

func (r *drillRunner) shutdown() {
	r.cancel()
	r.wg.Wait()
}

func (r *drillRunner) find(name string) (drill, bool) {
	for _, d := range r.drills {
		if d.Name == name {
			return d, true
		}
	}
	return drill{}, false
}

func (r *drillRunner) handleList(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	var active any
	if r.active != nil {
		active = r.active.snapshot()
	}
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"drills": r.drills, "active": active, "supervised": r.c.procs != nil})
}

func (r *drillRunner) handleStart(w http.ResponseWriter, req *http.Request) {
	d, ok := r.find(req.PathValue("name"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such drill")
		return
	}
	var body struct {
		Mode string `json:"mode"`
	}
	if req.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1024)).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, `body must be {"mode": "run" | "step"}`)
			return
		}
	}
	if body.Mode == "" {
		body.Mode = "run"
	}
	if body.Mode != "run" && body.Mode != "step" {
		writeError(w, http.StatusBadRequest, `mode must be "run" or "step"`)
		return
	}
	if r.c.procs == nil {
		writeError(w, http.StatusConflict, "drills crash and restart components: they run only under `eventforge dev`, whose supervisor restarts them")
		return
	}
	addr, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		writeError(w, http.StatusInternalServerError, "cannot tell the server's own address")
		return
	}
	run := &drillRun{
		ID: newID(), Drill: d.Name, Mode: body.Mode, State: "running", Started: time.Now().UTC(),
		resume: make(chan struct{}, 1), c: r.c, baseURL: "http://" + addr.String(),
	}
	for _, id := range d.Stages {
		run.Stages = append(run.Stages, stage{ID: id, State: "pending", Facts: map[string]any{}})
	}
	r.mu.Lock()
	if r.active != nil {
		r.mu.Unlock()
		writeError(w, http.StatusConflict, "another drill is running; wait for it to finish")
		return
	}
	r.active = run
	r.runs[run.ID] = run
	r.order = append(r.order, run.ID)
	if len(r.order) > 20 {
		delete(r.runs, r.order[0])
		r.order = r.order[1:]
	}
	r.mu.Unlock()

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		err := d.run(r.ctx, run)
		run.setDisarmed(r.disarm(run.armed()))
		run.finish(err)
		if err != nil {
			r.c.logger.Warn("drill failed", "drill", d.Name, "run", run.ID, "order_id", run.OrderID, "err", err)
		} else {
			r.c.logger.Info("drill done", "drill", d.Name, "run", run.ID, "order_id", run.OrderID)
		}
		r.mu.Lock()
		r.active = nil
		r.mu.Unlock()
	}()
	writeJSON(w, http.StatusAccepted, run.snapshot())
}

func (r *drillRunner) get(id string) (*drillRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[id]
	return run, ok
}

func (r *drillRunner) handleGet(w http.ResponseWriter, req *http.Request) {
	run, ok := r.get(req.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such run")
		return
	}
	writeJSON(w, http.StatusOK, run.snapshot())
}

func (r *drillRunner) handleContinue(w http.ResponseWriter, req *http.Request) {
	run, ok := r.get(req.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such run")
		return
	}
	run.mu.Lock()
	paused := run.State == "paused"
	run.mu.Unlock()
	if !paused {
		writeError(w, http.StatusConflict, "the run is not paused")
		return
	}
	select {
	case run.resume <- struct{}{}:
	default:
	}
	writeJSON(w, http.StatusOK, run.snapshot())
}

// snapshot copies the run for JSON encoding.
func (d *drillRun) snapshot() *drillRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := &drillRun{ID: d.ID, Drill: d.Drill, Mode: d.Mode, State: d.State, OrderID: d.OrderID, EventID: d.EventID,
		Error: d.Error, Started: d.Started, Stages: make([]stage, len(d.Stages)), Disarmed: d.Disarmed}
	for i, s := range d.Stages {
		facts := make(map[string]any, len(s.Facts))
		for k, v := range s.Facts {
			facts[k] = v
		}
		s.Facts = facts
		cp.Stages[i] = s
	}
	if d.Counters != nil {
		c := *d.Counters
		cp.Counters = &c
	}
	return cp
}

func (d *drillRun) finish(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		d.State = "done"
		return
	}
	d.State, d.Error = "failed", err.Error()
	for i := range d.Stages {
		if d.Stages[i].State == "running" {
			d.Stages[i].State = "failed"
		}
	}
}

// step runs the next stage: in step mode it first waits for "continue"
// (except before the first stage), then calls fn, recording its facts.
func (d *drillRun) step(ctx context.Context, fn func(ctx context.Context, facts map[string]any) error) error {
	d.mu.Lock()
	i := d.current
	d.current++
	pause := d.Mode == "step" && i > 0
	if pause {
		d.State = "paused"
	}
	d.mu.Unlock()
	if pause {
		select {
		case <-d.resume:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	now := time.Now().UTC()
	d.mu.Lock()
	d.State = "running"
	d.Stages[i].State, d.Stages[i].Started = "running", &now
	d.mu.Unlock()

	facts := map[string]any{}
	sctx, cancel := context.WithTimeout(ctx, stageTimeout)
	err := fn(withWaitNote(sctx, func(id waitID) { d.waiting(i, id) }), facts)
	cancel()
	end := time.Now().UTC()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, v := range facts {
		d.Stages[i].Facts[k] = v
	}
	d.Stages[i].Finished = &end
	d.Stages[i].WaitingFor, d.Stages[i].WaitingSince = "", nil
	if err != nil {
		d.Stages[i].State = "failed"
		return fmt.Errorf("stage %s: %w", d.Stages[i].ID, err)
	}
	d.Stages[i].State = "done"
	return nil
}

func (d *drillRun) setOrder(orderID, eventID string) {
	d.mu.Lock()
	d.OrderID, d.EventID = orderID, eventID
	d.mu.Unlock()
}

// waiting notes that stage i waits for id, from now on.
func (d *drillRun) waiting(i int, id waitID) {
	now := time.Now().UTC()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Stages[i].WaitingFor != id {
		d.Stages[i].WaitingFor, d.Stages[i].WaitingSince = id, &now
	}
}

func (d *drillRun) setDisarmed(components []string) {
	d.mu.Lock()
	d.Disarmed = components
	d.mu.Unlock()
}

// armed returns the components the run restarted with failpoints (the
// "component" and "failpoints" facts of armAndWait).
func (d *drillRun) armed() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]bool{}
	for _, s := range d.Stages {
		if name, ok := s.Facts["component"].(string); ok && s.Facts["failpoints"] != "" {
			out[name] = true
		}
	}
	return out
}

// disarm restarts, without failpoints, each of the components a drill
// armed whose running process still has failpoints (armed for one hit
// that did not fire, or a delay that did): a drill leaves none behind.
func (r *drillRunner) disarm(armed map[string]bool) []string {
	var out []string
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), stageTimeout)
	defer cancel()
	for _, comp := range r.c.procs.Components() {
		if !armed[comp.Name] || comp.Failpoints == "" {
			continue
		}
		if err := r.c.procs.Restart(ctx, comp.Name, ""); err != nil {
			r.c.logger.Warn("disarming a drill's failpoints", "component", comp.Name, "err", err)
			continue
		}
		out = append(out, comp.Name)
	}
	return out
}

func (d *drillRun) setCounters(c Counters) {
	d.mu.Lock()
	d.Counters = &c
	d.mu.Unlock()
}

// drillCatalog lists the drills the console offers, in the order it shows
// them; each drill's run function lives in a drill_<name>.go file.
func drillCatalog() []drill {
	return []drill{
		{Name: "relay-crash", Stages: []string{"arm", "order", "crash", "republish", "dedupe"}, run: runRelayCrash,
			Expect: Counters{LogicalEvents: 1, Deliveries: 2, ConsumerDeliveries: 2, Marks: 1, BusinessChanges: 1}},
		{Name: "consumer-crash", Stages: []string{"arm", "order", "crash", "redeliver", "dedupe"}, run: runConsumerCrash,
			Expect: Counters{LogicalEvents: 1, Deliveries: 1, ConsumerDeliveries: 2, Marks: 1, BusinessChanges: 1}},
		{Name: "concurrent-duplicate", Stages: []string{"arm", "order", "race", "dedupe"}, run: runConcurrentDuplicate,
			Expect: Counters{LogicalEvents: 1, Deliveries: 1, ConsumerDeliveries: 2, Marks: 1, BusinessChanges: 1}},
		{Name: "dlq-replay", Stages: []string{"arm", "order", "dead-letter", "fix", "replay", "applied"}, run: runDLQReplay,
			Expect: Counters{LogicalEvents: 1, Deliveries: 2, ConsumerDeliveries: 2, Marks: 1, BusinessChanges: 1, DeadLettered: 1}},
	}
}
