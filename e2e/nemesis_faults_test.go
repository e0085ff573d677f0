package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The nemesis's faults. A schedule's plan is drawn from its seed before
// anything runs, so that it can be printed and replayed: every 1–4 s a
// fault of a random kind on a random target, holding for a random time.
// Faults overlap freely, except that two faults never hold the same
// resource at once (a component, the broker, the server, the slot): the
// plan skips a fault whose resources are taken. Each fault heals itself
// when its time is up; the heal of the whole schedule waits for all of
// them.

// fault is one planned fault.
type fault struct {
	at     time.Duration // from the start of the fault phase
	kind   string
	target string        // a component, or "" for the stack's parts
	hold   time.Duration // how long it lasts before it heals
}

func (f fault) String() string {
	s := fmt.Sprintf("+%5.1fs %s", f.at.Seconds(), f.kind)
	if f.target != "" {
		s += " " + f.target
	}
	return s + fmt.Sprintf(" for %.1fs", f.hold.Seconds())
}

// faultKind is one kind of fault the plan draws.
type faultKind struct {
	name   string
	weight int
	// targets are the components it hits (one is drawn); none for a fault
	// on the stack's parts.
	targets []string
	// hold bounds how long it lasts.
	minHold, maxHold time.Duration
	// resources it holds while it lasts, for a target.
	resources func(target string) []string
	// apply applies the fault, waits hold, and heals it.
	apply func(ctx context.Context, r *scheduleRun, target string, hold time.Duration) error
}

var allComponents = []string{"api", "cdc-a", "cdc-b", "fulfillment", "ledger"}

func compResource(target string) []string { return []string{"comp:" + target} }

// faultKinds are the faults of a schedule; failover only where a standby
// exists (planFaults adds it).
var faultKinds = []faultKind{
	{name: "SIGKILL", weight: 20, targets: allComponents, minHold: 500 * time.Millisecond, maxHold: 8 * time.Second,
		resources: compResource, apply: applyKill},
	{name: "SIGSTOP", weight: 12, targets: allComponents, minHold: time.Second, maxHold: 15 * time.Second,
		resources: compResource, apply: applyStop},
	{name: "broker paused", weight: 5, minHold: 2 * time.Second, maxHold: 20 * time.Second,
		resources: func(string) []string { return []string{"broker"} }, apply: applyBrokerPause},
	{name: "broker killed", weight: 4, minHold: time.Second, maxHold: 10 * time.Second,
		resources: func(string) []string { return []string{"broker"} }, apply: applyBrokerKill},
	{name: "broker restarted", weight: 3, minHold: 0, maxHold: 3 * time.Second,
		resources: func(string) []string { return []string{"broker"} }, apply: applyBrokerRestart},
	{name: "topic limit lowered", weight: 5, minHold: 5 * time.Second, maxHold: 20 * time.Second,
		resources: func(string) []string { return []string{"topic"} }, apply: applyTopicLimit},
	{name: "broker paused under a lowered topic limit", weight: 4, minHold: 3 * time.Second, maxHold: 12 * time.Second,
		resources: func(string) []string { return []string{"broker", "topic"} }, apply: applyPauseUnderLimit},
	{name: "slot dropped", weight: 5, minHold: 0, maxHold: 0,
		resources: func(string) []string { return []string{"slot", "pg"} }, apply: applySlotDrop(false)},
	{name: "slot dropped and recreated", weight: 5, minHold: 0, maxHold: 0,
		resources: func(string) []string { return []string{"slot", "pg"} }, apply: applySlotDrop(true)},
	{name: "slot invalidated", weight: 2, minHold: 0, maxHold: 0,
		resources: func(string) []string { return []string{"slot", "pg", "comp:cdc-a", "comp:cdc-b"} }, apply: applySlotInvalidate},
	{name: "active reader partitioned", weight: 4, minHold: 20 * time.Second, maxHold: 45 * time.Second,
		resources: func(string) []string { return []string{"comp:cdc-a", "comp:cdc-b"} }, apply: applyPartition},
	{name: "PostgreSQL immediate restart", weight: 4, minHold: 0, maxHold: 4 * time.Second,
		resources: func(string) []string { return []string{"pg", "slot"} }, apply: applyPGRestart},
}

// failoverKind promotes the standby; planned once, in the middle of the
// fault phase of a schedule with a standby.
var failoverKind = faultKind{name: "primary failover", resources: func(string) []string { return []string{"pg", "slot"} }, apply: applyFailover}

// planFaults draws a schedule's faults for a fault phase of length phase.
func planFaults(rng *rand.Rand, phase time.Duration, withStandby bool) []fault {
	type held struct {
		until time.Duration
		res   []string
	}
	var (
		plan       []fault
		busy       []held
		failover   = time.Duration(-1) // when the failover is due; -1: none (left)
		failedOver bool
	)
	if withStandby {
		failover = phase*2/5 + time.Duration(rng.Int64N(int64(phase/5)))
	}
	free := func(at time.Duration, res []string) bool {
		for _, h := range busy {
			if h.until > at && slices.ContainsFunc(res, func(r string) bool { return slices.Contains(h.res, r) }) {
				return false
			}
		}
		return true
	}
	total := 0
	for _, k := range faultKinds {
		total += k.weight
	}
	for at := time.Duration(0); ; {
		at += time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		if at >= phase {
			break
		}
		if failover >= 0 && at >= failover {
			// Due: as soon as nothing else holds the server.
			if res := failoverKind.resources(""); free(at, res) {
				plan = append(plan, fault{at: at, kind: failoverKind.name})
				busy = append(busy, held{until: at + 30*time.Second, res: res})
				failover, failedOver = -1, true
			}
			continue
		}
		n := rng.IntN(total)
		var k faultKind
		for _, k = range faultKinds {
			if n -= k.weight; n < 0 {
				break
			}
		}
		if failedOver && k.name == "PostgreSQL immediate restart" {
			continue // the restart is the old primary's; the promoted one is left alone
		}
		target := ""
		if len(k.targets) > 0 {
			target = k.targets[rng.IntN(len(k.targets))]
		}
		hold := k.minHold
		if k.maxHold > k.minHold {
			hold += time.Duration(rng.Int64N(int64(k.maxHold - k.minHold)))
		}
		res := k.resources(target)
		if !free(at, res) {
			continue
		}
		// A fault's own work (a restart, WAL to fill) takes time beyond its
		// hold; the resources stay held meanwhile.
		busy = append(busy, held{until: at + hold + 15*time.Second, res: res})
		plan = append(plan, fault{at: at, kind: k.name, target: target, hold: hold})
	}
	return plan
}

// kindByName returns the fault kind of a planned fault.
func kindByName(name string) faultKind {
	if name == failoverKind.name {
		return failoverKind
	}
	for _, k := range faultKinds {
		if k.name == name {
			return k
		}
	}
	panic("unknown fault kind " + name)
}

// runFaults applies the plan from now on and returns when every fault has
// healed. Faults that could not be applied (a server that is down, say)
// are logged and counted apart.
func (r *scheduleRun) runFaults(ctx context.Context, plan []fault) {
	began := time.Now()
	var wg sync.WaitGroup
	for _, f := range plan {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(began.Add(f.at))):
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			err := kindByName(f.kind).apply(ctx, r, f.target, f.hold)
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.t.Logf("%s: %s: not applied: %v", time.Since(began).Round(100*time.Millisecond), f, err)
				r.res.faultsSkipped++
				return
			}
			r.res.faults[f.kind]++
			r.t.Logf("%s: %s: healed", time.Since(began).Round(100*time.Millisecond), f)
		})
	}
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func applyKill(ctx context.Context, r *scheduleRun, target string, hold time.Duration) error {
	c := r.stack.byName[target]
	c.kill()
	sleepCtx(ctx, hold)
	c.restart()
	return nil
}

func applyStop(ctx context.Context, r *scheduleRun, target string, hold time.Duration) error {
	c := r.stack.byName[target]
	if err := c.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	return c.signal(syscall.SIGCONT)
}

func applyBrokerPause(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	if err := r.stack.kafka.Pause(0); err != nil {
		_ = r.stack.kafka.Resume(0)
		return err
	}
	sleepCtx(ctx, hold)
	return r.stack.kafka.Resume(0)
}

func applyBrokerKill(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	if err := r.stack.kafka.Kill(0); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	return r.stack.kafka.Restart(context.WithoutCancel(ctx), 0)
}

func applyBrokerRestart(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	if err := r.stack.kafka.Stop(ctx, 0); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	return r.stack.kafka.Restart(context.WithoutCancel(ctx), 0)
}

// nemesisTopicLimit is the topic's max.message.bytes while the fault holds:
// above every order of one item, below the large-payload writer's orders.
const nemesisTopicLimit = 4000

func applyTopicLimit(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	bootstrap, topic := r.stack.kafka.Bootstrap, r.stack.pl.env.Topic
	if err := alterTopicMaxMessageBytes(bootstrap, topic, nemesisTopicLimit); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	// The broker may be down now: keep trying until the limit is back.
	for {
		err := alterTopicMaxMessageBytes(bootstrap, topic, 0)
		if err == nil || context.Cause(ctx) != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}

// applyPauseUnderLimit lowers the topic's limit, then pauses the broker for
// hold: what the relay produces meanwhile piles up in requests in flight
// together, a refused batch and the requests behind it, which the broker
// answers one after the other when it resumes, still under the lowered
// limit. An order whose first record is in a refused batch and whose next
// one is in a later request is where a producer's retries would reorder it.
func applyPauseUnderLimit(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	bootstrap, topic := r.stack.kafka.Bootstrap, r.stack.pl.env.Topic
	if err := alterTopicMaxMessageBytes(bootstrap, topic, nemesisTopicLimit); err != nil {
		return err
	}
	err := applyBrokerPause(ctx, r, "", hold)
	sleepCtx(ctx, 3*time.Second)
	for {
		rerr := alterTopicMaxMessageBytes(bootstrap, topic, 0)
		if rerr == nil || context.Cause(ctx) != nil {
			return errors.Join(err, rerr)
		}
		time.Sleep(time.Second)
	}
}

// admin runs statements on the current primary as the superuser.
func (r *scheduleRun) admin(ctx context.Context, f func(conn *pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, r.stack.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// dropSlot ends the walsender that holds the slot and drops it; a reader
// may take it again in between, so it tries a few times.
func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	var err error
	for range 10 {
		if _, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot); err != nil {
			return err
		}
		if _, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err == nil || isCode(err, "42704") {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func applySlotDrop(recreate bool) func(ctx context.Context, r *scheduleRun, _ string, _ time.Duration) error {
	return func(ctx context.Context, r *scheduleRun, _ string, _ time.Duration) error {
		slot := r.stack.pl.env.Slot
		return r.admin(ctx, func(conn *pgx.Conn) error {
			if err := dropSlot(ctx, conn, slot); err != nil {
				return err
			}
			if !recreate {
				return nil
			}
			// In the application database, as a reader would have it.
			return r.appConn(ctx, func(app *pgx.Conn) error {
				_, err := app.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
				return err
			})
		})
	}
}

// appConn runs f on a connection to the application database.
func (r *scheduleRun) appConn(ctx context.Context, f func(conn *pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, r.stack.pl.env.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// applySlotInvalidate freezes both readers, lets the server keep only a
// little WAL for slots, writes WAL until a checkpoint invalidates the slot,
// and puts everything back.
func applySlotInvalidate(ctx context.Context, r *scheduleRun, _ string, _ time.Duration) error {
	readers := []*component{r.stack.byName["cdc-a"], r.stack.byName["cdc-b"]}
	for _, c := range readers {
		if err := c.signal(syscall.SIGSTOP); err != nil {
			return err
		}
	}
	defer func() {
		for _, c := range readers {
			_ = c.signal(syscall.SIGCONT)
		}
	}()
	return r.admin(ctx, func(conn *pgx.Conn) error {
		for _, stmt := range []string{`ALTER SYSTEM SET max_slot_wal_keep_size = '32MB'`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		defer func() {
			for _, stmt := range []string{`ALTER SYSTEM RESET max_slot_wal_keep_size`, `SELECT pg_reload_conf()`} {
				_, _ = conn.Exec(context.WithoutCancel(ctx), stmt)
			}
		}()
		return r.appConn(ctx, func(app *pgx.Conn) error {
			if _, err := app.Exec(ctx, `CREATE TABLE IF NOT EXISTS nemesis_wal (b text)`); err != nil {
				return err
			}
			for range 20 {
				if _, err := app.Exec(ctx, `INSERT INTO nemesis_wal SELECT repeat(md5(g::text), 32) FROM generate_series(1, 10000) g`); err != nil {
					return err
				}
				if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
					return err
				}
				var status *string
				err := conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, r.stack.pl.env.Slot).Scan(&status)
				if err != nil {
					return err
				}
				if status != nil && *status == "lost" {
					_, err := app.Exec(ctx, `TRUNCATE nemesis_wal`)
					return err
				}
			}
			return fmt.Errorf("slot %s not invalidated", r.stack.pl.env.Slot)
		})
	})
}

// applyPartition cuts the link of the reader that publishes (cdc-a when
// neither says so): the server notices through its keepalives, frees the
// lock and the slot, and the other reader takes over while the cut one may
// still hold records in its producer.
func applyPartition(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	target := "cdc-a"
	for name, addr := range r.stack.readerMetrics {
		if v, ok := scrape(addr, "eventforge_cdc_active"); ok && v == 1 {
			target = name
		}
	}
	other := "cdc-b"
	if target == "cdc-b" {
		other = "cdc-a"
	}
	host := r.stack.readerHosts[target]
	if err := host.Cut(); err != nil {
		return err
	}
	cut := time.Now()
	r.t.Logf("the link of %s (%s) is cut", target, host.Addr)
	for time.Since(cut) < hold {
		if v, ok := scrape(r.stack.readerMetrics[other], "eventforge_cdc_active"); ok && v == 1 {
			took := time.Since(cut)
			r.t.Logf("%s took over %s after the cut", other, took.Round(100*time.Millisecond))
			r.mu.Lock()
			r.res.takeovers = append(r.res.takeovers, took)
			r.mu.Unlock()
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	sleepCtx(ctx, hold-time.Since(cut))
	return host.Heal()
}

func applyPGRestart(ctx context.Context, r *scheduleRun, _ string, hold time.Duration) error {
	return r.stack.pg.RestartPostgres(context.WithoutCancel(ctx), hold)
}

func applyFailover(ctx context.Context, r *scheduleRun, _ string, _ time.Duration) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	killed := time.Now()
	if err := r.stack.standby.Failover(cctx); err != nil {
		return err
	}
	r.mu.Lock()
	r.failedOver, r.failedOverAt = true, killed
	r.mu.Unlock()
	return nil
}

// describePlan prints a plan, one fault a line.
func describePlan(plan []fault) string {
	lines := make([]string, len(plan))
	for i, f := range plan {
		lines[i] = "  " + f.String()
	}
	return strings.Join(lines, "\n")
}

// countKinds counts a plan's faults by kind.
func countKinds(plan []fault) []string {
	n := map[string]int{}
	for _, f := range plan {
		n[f.kind]++
	}
	var out []string
	for k, v := range n {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return out
}

// isCode reports whether err is a PostgreSQL error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}
