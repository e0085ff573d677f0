package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
	"github.com/eventforge/eventforge/verify"
)

// Components the drills act on, as named by the dev supervisor.
const (
	componentCDC         = "cdc"
	componentFulfillment = "consumer-" + DrilledConsumer
)

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
	// ConsumerDeliveries: times the fulfillment consumer was handed the
	// event, as proven by marks and committed offsets (see each drill).
	ConsumerDeliveries int `json:"consumer_deliveries"`
	// Marks: processed_events rows of the fulfillment consumer.
	Marks int `json:"marks"`
	// BusinessChanges: the fulfillment consumer's effects (shipments).
	BusinessChanges int `json:"business_changes"`
	// DeadLettered: the order's records in the DLQ.
	DeadLettered int `json:"dead_lettered"`
}

// drill is one failure scenario: its stages run in order.
type drill struct {
	Name   string   `json:"name"`
	Stages []string `json:"stages"`
	run    func(ctx context.Context, d *drillRun) error
}

// stage is the state of one stage of a run.
type stage struct {
	ID       string         `json:"id"`
	State    string         `json:"state"` // pending, running, done, failed
	Facts    map[string]any `json:"facts"`
	Started  *time.Time     `json:"started_at,omitempty"`
	Finished *time.Time     `json:"finished_at,omitempty"`
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
		Error: d.Error, Started: d.Started, Stages: make([]stage, len(d.Stages))}
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
	err := fn(sctx, facts)
	cancel()
	end := time.Now().UTC()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, v := range facts {
		d.Stages[i].Facts[k] = v
	}
	d.Stages[i].Finished = &end
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

func (d *drillRun) setCounters(c Counters) {
	d.mu.Lock()
	d.Counters = &c
	d.mu.Unlock()
}

func drillCatalog() []drill {
	return []drill{
		{Name: "relay-crash", Stages: []string{"arm", "order", "crash", "republish", "dedupe"}, run: runRelayCrash},
		{Name: "consumer-crash", Stages: []string{"arm", "order", "crash", "redeliver", "dedupe"}, run: runConsumerCrash},
		{Name: "concurrent-duplicate", Stages: []string{"arm", "order", "race", "dedupe"}, run: runConcurrentDuplicate},
		{Name: "dlq-replay", Stages: []string{"arm", "order", "dead-letter", "fix", "replay", "applied"}, run: runDLQReplay},
	}
}

// --- the drills ----------------------------------------------------------

// runRelayCrash: the relay dies after Kafka acknowledged the event and
// before it confirmed the LSN; the restarted relay republishes it and the
// consumer skips the duplicate. Expected: 1 logical event, 2 deliveries, 1
// business change.
func runRelayCrash(ctx context.Context, d *drillRun) error {
	c := d.c
	var before Component
	err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		before, err = c.armAndWait(ctx, componentCDC, fpRelayCrash, f)
		if err != nil {
			return err
		}
		return c.waitSlotHeld(ctx)
	})
	if err != nil {
		return err
	}
	var commit string
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		commit, err = d.createOrder(ctx, "drill-relay-crash", f)
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		comp, err := c.waitCrash(ctx, componentCDC, before.Starts, f)
		if err != nil {
			return err
		}
		recs, err := c.orderRecords(ctx, d.OrderID)
		if err != nil {
			return err
		}
		f["records"] = recs
		f["commit_lsn"] = commit
		f["restarted_pid"] = comp.PID
		return nil
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		return c.waitFor(ctx, "the event republished (two records)", func() (bool, error) {
			recs, err := c.orderRecords(ctx, d.OrderID)
			if err != nil {
				return false, err
			}
			f["records"] = recs
			return len(recs) >= 2, nil
		})
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.waitSettled(ctx, d.OrderID, func(r *verify.OrderReport) bool { return r.Deliveries >= 2 })
		if err != nil {
			return err
		}
		// The consumer committed past both records: it was handed both.
		d.setCounters(countersOf(rep, rep.Deliveries))
		f["committed"] = rep.Committed
		return nil
	})
}

// runConsumerCrash: the consumer dies after its DB commit and before the
// offset commit; the restarted member gets the event again and skips it.
func runConsumerCrash(ctx context.Context, d *drillRun) error {
	c := d.c
	var before Component
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		before, err = c.armAndWait(ctx, componentFulfillment, fpConsumerCrash, f)
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := d.createOrder(ctx, "drill-consumer-crash", f)
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if _, err := c.waitCrash(ctx, componentFulfillment, before.Starts, f); err != nil {
			return err
		}
		rep, err := c.auditOrder(ctx, d.OrderID)
		if err != nil {
			return err
		}
		f["marks"] = rep.Marks[DrilledConsumer]
		f["offset_committed"] = rep.Committed[DrilledConsumer]
		if rep.Marks[DrilledConsumer] != 1 || rep.Committed[DrilledConsumer] {
			return fmt.Errorf("after the crash: %d marks, offset committed %v; want the mark committed and the offset not", rep.Marks[DrilledConsumer], rep.Committed[DrilledConsumer])
		}
		return nil
	}); err != nil {
		return err
	}
	var rep *verify.OrderReport
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		rep, err = c.waitSettled(ctx, d.OrderID, nil)
		if err != nil {
			return err
		}
		f["offset_committed"] = true
		f["records"] = rep.Records
		return nil
	}); err != nil {
		return err
	}
	return d.step(ctx, func(_ context.Context, f map[string]any) error {
		// Delivered once before the crash (its mark committed while the
		// offset stayed behind it) and once after the restart (the offset
		// then passed it): two deliveries to the consumer.
		d.setCounters(countersOf(rep, 2))
		f["marks"] = rep.Marks[DrilledConsumer]
		return nil
	})
}

// runConcurrentDuplicate: two instances of the fulfillment consumer (the
// group's member and a second instance in its own group, like a replay
// racing the original) apply the same event at the same time; the first
// holds its transaction open for 3 s, the second blocks on the mark's unique
// key and then finds it: one mark, one change.
func runConcurrentDuplicate(ctx context.Context, d *drillRun) error {
	c := d.c
	group := c.cfg.Consumers[DrilledConsumer]
	racer := group + "-drill-" + d.ID
	var stopRacer func()
	defer func() {
		if stopRacer != nil {
			stopRacer()
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := c.admin.DeleteConsumerGroups(dctx, []string{racer}); err != nil {
			c.logger.Warn("deleting drill group", "group", racer, "err", err)
		}
	}()
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if _, err := c.armAndWait(ctx, componentFulfillment, fpHoldCommit, f); err != nil {
			return err
		}
		if err := c.positionAtEnd(ctx, racer); err != nil {
			return err
		}
		var err error
		stopRacer, err = c.procs.StartExtra(ctx, componentFulfillment, []string{"--group", racer}, fpHoldCommit)
		if err != nil {
			return err
		}
		f["second_group"] = racer
		return c.waitFor(ctx, "both instances own the topic's partitions", func() (bool, error) {
			a, err := c.ownsPartitions(ctx, group)
			if err != nil || !a {
				return false, err
			}
			return c.ownsPartitions(ctx, racer)
		})
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := d.createOrder(ctx, "drill-concurrent", f)
		return err
	}); err != nil {
		return err
	}
	var rep *verify.OrderReport
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		rep, err = c.waitSettled(ctx, d.OrderID, nil)
		if err != nil {
			return err
		}
		return c.waitFor(ctx, "the second instance committed past the event", func() (bool, error) {
			passed, err := c.groupPassed(ctx, racer, rep.Records)
			f["second_group_committed"] = passed
			return passed, err
		})
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.auditOrder(ctx, d.OrderID)
		if err != nil {
			return err
		}
		d.setCounters(countersOf(rep, 2))
		f["marks"] = rep.Marks[DrilledConsumer]
		return nil
	})
}

// runDLQReplay: every commit of the fulfillment consumer fails until its
// attempts are exhausted and the event is dead-lettered; the fault is fixed
// (the consumer restarts without it) and the DLQ record is replayed with its
// event ID: one change.
func runDLQReplay(ctx context.Context, d *drillRun) error {
	c := d.c
	disarmed := false
	defer func() {
		if !disarmed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := c.procs.Restart(rctx, componentFulfillment, ""); err != nil {
				c.logger.Warn("disarming the drill's failpoint", "err", err)
			}
		}
	}()
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := c.armAndWait(ctx, componentFulfillment, fpCommitRejected, f)
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := d.createOrder(ctx, "drill-dlq", f)
		return err
	}); err != nil {
		return err
	}
	var entry dlq.Entry
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		err := c.waitFor(ctx, "the event in the DLQ", func() (bool, error) {
			es, err := c.dlqEntries(ctx)
			if err != nil {
				return false, err
			}
			for _, e := range es {
				if e.EventID == d.EventID && e.Consumer == DrilledConsumer {
					entry = e
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		f["dlq_position"], f["attempts"], f["error_class"], f["error_message"] = entry.Position(), entry.Attempts, entry.Class, entry.Message
		return nil
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if err := c.procs.Restart(ctx, componentFulfillment, ""); err != nil {
			return err
		}
		disarmed = true
		comp, _ := c.component(componentFulfillment)
		f["pid"] = comp.PID
		n, _, err := verify.OrderChanges(ctx, c.pool, DrilledConsumer, d.OrderID)
		f["business_changes"] = n
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		pos, err := c.replay(ctx, entry.Partition, entry.Offset)
		f["replayed"] = pos
		return err
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.waitSettled(ctx, d.OrderID, func(r *verify.OrderReport) bool {
			return r.Deliveries >= 2 && r.BusinessChanges[DrilledConsumer] >= 1
		})
		if err != nil {
			return err
		}
		// Delivered once and dead-lettered, then once more as the replay.
		d.setCounters(countersOf(rep, 2))
		f["records"] = rep.Records
		return nil
	})
}

// --- helpers -------------------------------------------------------------

func countersOf(rep *verify.OrderReport, consumerDeliveries int) Counters {
	return Counters{
		LogicalEvents: rep.LogicalEvents, Deliveries: rep.Deliveries, ConsumerDeliveries: consumerDeliveries,
		Marks: rep.Marks[DrilledConsumer], BusinessChanges: rep.BusinessChanges[DrilledConsumer], DeadLettered: rep.DeadLettered[DrilledConsumer],
	}
}

func (c *Console) component(name string) (Component, bool) {
	for _, comp := range c.procs.Components() {
		if comp.Name == name {
			return comp, true
		}
	}
	return Component{}, false
}

// armAndWait restarts component with failpoints and waits until it runs.
func (c *Console) armAndWait(ctx context.Context, name, failpoints string, f map[string]any) (Component, error) {
	if _, ok := c.component(name); !ok {
		return Component{}, fmt.Errorf("the supervisor runs no component %q", name)
	}
	if err := c.procs.Restart(ctx, name, failpoints); err != nil {
		return Component{}, err
	}
	var comp Component
	err := c.waitFor(ctx, name+" running", func() (bool, error) {
		comp, _ = c.component(name)
		return comp.Running, nil
	})
	f["component"], f["pid"], f["failpoints"] = name, comp.PID, failpoints
	return comp, err
}

// waitCrash waits until component's process died (SIGKILL from its
// failpoint) and the supervisor started the next one.
func (c *Console) waitCrash(ctx context.Context, name string, startsBefore int, f map[string]any) (Component, error) {
	var comp Component
	err := c.waitFor(ctx, name+" crashed and restarted", func() (bool, error) {
		comp, _ = c.component(name)
		return comp.Starts > startsBefore && comp.Running, nil
	})
	f["last_exit"], f["starts"] = comp.LastExit, comp.Starts
	return comp, err
}

func (c *Console) waitSlotHeld(ctx context.Context) error {
	return c.waitFor(ctx, "the reader holding the slot", func() (bool, error) {
		st, err := schema.ReadSlotStatus(ctx, c.pool, c.cfg.Slot)
		if errors.Is(err, schema.ErrSlotNotFound) {
			return false, nil
		}
		return st.Active, err
	})
}

// waitFor polls cond every 250 ms until it holds or ctx ends.
func (c *Console) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// createOrder creates a real order through the server's own REST gateway
// and returns the WAL position right after its commit.
func (d *drillRun) createOrder(ctx context.Context, customer string, f map[string]any) (string, error) {
	body := fmt.Sprintf(`{"customer_id":%q,"currency":"EUR","items":[{"sku":"DRILL-1","quantity":1,"unit_price_cents":1000}]}`, customer)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.baseURL+"/v1/orders", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("creating the drill's order: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("creating the drill's order: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var out struct {
		Order struct {
			OrderID string `json:"order_id"`
		} `json:"order"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Order.OrderID == "" || out.EventID == "" {
		return "", fmt.Errorf("creating the drill's order: unexpected answer %s", raw)
	}
	lsn, err := d.c.commits.lookup(out.Order.OrderID, func() (pglogrepl.LSN, error) { return d.c.currentWAL(ctx) })
	if err != nil {
		return "", err
	}
	d.setOrder(out.Order.OrderID, out.EventID)
	f["order_id"], f["event_id"], f["commit_lsn"] = out.Order.OrderID, out.EventID, lsn.String()
	return lsn.String(), nil
}

// orderRecords lists the order's records in the topic.
func (c *Console) orderRecords(ctx context.Context, orderID string) ([]traceRecord, error) {
	recs, err := c.readSince(ctx, c.cfg.Topic, time.Now().Add(-10*time.Minute), 50000, func(r kafkaread.Record) bool { return r.Key == orderID })
	if err != nil {
		return nil, err
	}
	out := make([]traceRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, traceRecord{Topic: c.cfg.Topic, Partition: r.Partition, Offset: r.Offset, EventID: r.Headers[contract.HeaderID], Type: r.Headers[contract.HeaderType], Timestamp: r.Timestamp, Replay: isReplay(r.Headers)})
	}
	return out, nil
}

// verifyConfig is the auditor's view of the console's pipeline: only the
// consumers the auditor knows.
func (c *Console) verifyConfig() verify.Config {
	cfg := verify.DefaultConfig()
	cfg.DatabaseURL, cfg.KafkaBrokers, cfg.Topic = c.cfg.DatabaseURL, c.cfg.KafkaBrokers, c.cfg.Topic
	cfg.DLQTopic, cfg.Slot, cfg.Consumers = c.cfg.dlqTopic(), c.cfg.Slot, map[string]string{}
	for name, group := range c.cfg.Consumers {
		one := cfg
		one.Consumers = map[string]string{name: group}
		if one.Validate() == nil {
			cfg.Consumers[name] = group
		}
	}
	return cfg
}

func (c *Console) auditOrder(ctx context.Context, orderID string) (*verify.OrderReport, error) {
	return verify.AuditOrder(ctx, c.verifyConfig(), orderID)
}

// waitSettled waits until every audited group committed past the order's
// records, the fulfillment consumer applied it, and extra (if not nil)
// holds.
func (c *Console) waitSettled(ctx context.Context, orderID string, extra func(*verify.OrderReport) bool) (*verify.OrderReport, error) {
	var rep *verify.OrderReport
	err := c.waitFor(ctx, "the order applied and every group's offset committed past it", func() (bool, error) {
		var err error
		rep, err = c.auditOrder(ctx, orderID)
		if err != nil {
			return false, err
		}
		for _, ok := range rep.Committed {
			if !ok {
				return false, nil
			}
		}
		if rep.BusinessChanges[DrilledConsumer] < 1 {
			return false, nil
		}
		return extra == nil || extra(rep), nil
	})
	return rep, err
}

// positionAtEnd commits group's offsets at the topic's end offsets, so a
// new instance in that group starts with the next record.
func (c *Console) positionAtEnd(ctx context.Context, group string) error {
	ends, err := c.kafka.EndOffsets(c.cfg.Topic)
	if err != nil {
		return err
	}
	topic := c.cfg.Topic
	tps := make([]kafka.TopicPartition, 0, len(ends))
	for p, end := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(end)})
	}
	_, err = c.admin.AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
	if err != nil {
		return fmt.Errorf("positioning group %s at the end of %s: %w", group, topic, err)
	}
	return nil
}

// ownsPartitions reports whether group's members own every partition of the
// topic.
func (c *Console) ownsPartitions(ctx context.Context, group string) (bool, error) {
	ends, err := c.kafka.EndOffsets(c.cfg.Topic)
	if err != nil {
		return false, err
	}
	ms, err := c.members(ctx, group, c.cfg.Topic)
	if err != nil {
		return false, err
	}
	owned := map[int32]bool{}
	for _, m := range ms {
		for _, p := range m.Partitions {
			owned[p] = true
		}
	}
	return len(owned) == len(ends), nil
}

func (c *Console) groupPassed(ctx context.Context, group string, recs []verify.OrderRecord) (bool, error) {
	if len(recs) == 0 {
		return false, nil
	}
	parts := []int32{}
	for _, r := range recs {
		parts = append(parts, r.Partition)
	}
	committed, err := c.committed(ctx, group, c.cfg.Topic, parts)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if committed[r.Partition] <= r.Offset {
			return false, nil
		}
	}
	return true, nil
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
