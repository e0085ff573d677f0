package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The nemesis (`make nemesis`) runs the whole pipeline — the api, two
// readers of one slot, both consumers — on a private PostgreSQL + Kafka
// stack under a workload that mixes the api with other writers of the
// outbox, while a seeded schedule of random, overlapping faults hits every
// part of it. Then it heals everything, drains, and checks the promise on
// durable state: nothing lost among the rows committed on the surviving
// timeline, the first delivery of each order's events in commit order, no
// effect applied twice, no effect of an event that never committed, and
// progress within a bound after healing (no wedge). A run is a sequence of
// schedules, each on a stack of its own; every schedule prints its plan and
// the seed that replays it.
//
// Files: nemesis_test.go (settings, the run and its summary),
// nemesis_stack_test.go (a schedule's stack and processes),
// nemesis_workload_test.go (the writers), nemesis_faults_test.go (the plan
// and the faults), nemesis_check_test.go (the checks).

// nemesisSettings are what `make nemesis` passes: EVENTFORGE_NEMESIS_DURATION
// (the run, default 4m), EVENTFORGE_NEMESIS_SEED (default 8, whose plan has
// a standby, a failover and a partitioned reader) and
// EVENTFORGE_NEMESIS_FAULTS (the fault phase of one schedule, default 75s).
// The PostgreSQL version is the stack's ($EVENTFORGE_PG_VERSION, `PG=`).
type nemesisSettings struct {
	duration time.Duration
	seed     uint64
	faults   time.Duration
}

func readNemesisSettings(t *testing.T) nemesisSettings {
	s := nemesisSettings{duration: 4 * time.Minute, seed: 8, faults: 75 * time.Second}
	dur := func(name string, d *time.Duration) {
		if v := os.Getenv(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
				t.Fatalf("%s=%q: want a positive duration", name, v)
			}
		}
	}
	dur("EVENTFORGE_NEMESIS_DURATION", &s.duration)
	dur("EVENTFORGE_NEMESIS_FAULTS", &s.faults)
	if v := os.Getenv("EVENTFORGE_NEMESIS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("EVENTFORGE_NEMESIS_SEED=%q: want an unsigned integer", v)
		}
		s.seed = n
	}
	return s
}

// nemesisTotals add up a run's schedules for its summary.
type nemesisTotals struct {
	mu          sync.Mutex
	schedules   int
	failed      []string
	faults      map[string]int
	orders      int
	events      int
	deliveries  int
	duplicates  int
	recovery    time.Duration // the longest time to drain after healing
	recoveryAt  string
	lostTimline int           // acknowledged orders a promoted asynchronous standby lacked
	takeover    time.Duration // the longest takeover after a partition
	modes       map[standbyMode]int
}

func (n *nemesisTotals) add(name string, r *scheduleResult, passed bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.schedules++
	n.modes[r.mode]++
	if !passed {
		n.failed = append(n.failed, name)
	}
	for k, v := range r.faults {
		n.faults[k] += v
	}
	n.orders += r.orders
	n.events += r.events
	n.deliveries += r.deliveries
	n.duplicates += r.duplicates
	n.lostTimline += r.lostWithTimeline
	if r.recovery > n.recovery {
		n.recovery, n.recoveryAt = r.recovery, name
	}
	for _, d := range r.takeovers {
		n.takeover = max(n.takeover, d)
	}
}

func (n *nemesisTotals) summary(s nemesisSettings, pg int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	kinds := make([]string, 0, len(n.faults))
	for k := range n.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var fs []string
	total := 0
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s %d", k, n.faults[k]))
		total += n.faults[k]
	}
	verdict := "0 violations"
	if len(n.failed) > 0 {
		verdict = fmt.Sprintf("violations in %d schedules: %s", len(n.failed), strings.Join(n.failed, ", "))
	}
	return fmt.Sprintf("nemesis summary: PostgreSQL %d, seed %d, %s, %d schedules; faults %d (%s); orders %d, events %d, deliveries %d (duplicates %d); "+
		"acknowledged orders lost with an asynchronous standby %d; longest recovery after healing %s (%s); longest takeover after a partition %s; %s",
		pg, s.seed, s.duration, n.schedules, total, strings.Join(fs, ", "), n.orders, n.events, n.deliveries, n.duplicates,
		n.lostTimline, n.recovery.Round(100*time.Millisecond), n.recoveryAt, n.takeover.Round(100*time.Millisecond), verdict)
}

// TestNemesis runs schedules until the run's duration is used up (at least
// one). Schedule i runs with seed SEED+i, so a failing schedule replays as
// the first one of `make nemesis SEED=<its seed>`.
func TestNemesis(t *testing.T) {
	s := readNemesisSettings(t)
	totals := &nemesisTotals{faults: map[string]int{}, modes: map[standbyMode]int{}}
	pg := nemesisPGVersion()
	doc := os.Getenv("EVENTFORGE_NEMESIS_DOC")
	rev := ""
	if doc != "" {
		rev = sourceRevision(t, filepath.Dir(doc)) // the code the binary under test was built from
	}
	began := time.Now()
	for i := 0; i == 0 || time.Since(began)+s.faults+2*time.Minute < s.duration; i++ {
		seed := s.seed + uint64(i)
		name := fmt.Sprintf("schedule-%d-seed-%d", i, seed)
		var res *scheduleResult
		passed := t.Run(name, func(t *testing.T) {
			res = runSchedule(t, seed, s.faults)
		})
		if res != nil {
			totals.add(name, res, passed)
		}
	}
	t.Log(totals.summary(s, pg))
	if doc != "" {
		if err := writeNemesisRow(doc, pg, totals.row(s, pg, rev)); err != nil {
			t.Errorf("writing the results into %s: %v", doc, err)
		}
	}
}

const (
	nemesisBegin = "<!-- nemesis:begin -->"
	nemesisEnd   = "<!-- nemesis:end -->"
	nemesisHead  = "| PostgreSQL | run | schedules (standby: sync / async / none) | faults applied | orders | events | deliveries (duplicates) | longest recovery after healing | longest takeover after a partition | acknowledged orders lost with an asynchronous standby | violations |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
)

// row is the run's line of the results table.
func (n *nemesisTotals) row(s nemesisSettings, pg int, rev string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	kinds := make([]string, 0, len(n.faults))
	total := 0
	for k, v := range n.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(kinds)
	verdict := "0"
	if len(n.failed) > 0 {
		verdict = fmt.Sprintf("in %d schedules", len(n.failed))
	}
	return fmt.Sprintf("| %d | %s, seed %d, %s, commit %s | %d (%d / %d / %d) | %d: %s | %d | %d | %d (%d) | %s | %s | %d | %s |",
		pg, time.Now().UTC().Format("2006-01-02 15:04 MST"), s.seed, s.duration, rev, n.schedules, n.modes[syncStandby], n.modes[asyncStandby], n.modes[noStandby],
		total, strings.Join(kinds, ", "), n.orders, n.events, n.deliveries, n.duplicates,
		n.recovery.Round(100*time.Millisecond), n.takeover.Round(100*time.Millisecond), n.lostTimline, verdict)
}

// writeNemesisRow puts row, the results of a run on PostgreSQL pg, into the
// table between doc's nemesis markers, replacing that version's earlier
// row and keeping the other versions'.
func writeNemesisRow(doc string, pg int, row string) error {
	src, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	before, rest, ok := strings.Cut(string(src), nemesisBegin)
	table, after, ok2 := strings.Cut(rest, nemesisEnd)
	if !ok || !ok2 {
		return fmt.Errorf("%s lacks the %s … %s markers", doc, nemesisBegin, nemesisEnd)
	}
	rows := map[int]string{}
	for _, line := range strings.Split(table, "\n") {
		var v int
		if _, err := fmt.Sscanf(line, "| %d |", &v); err == nil {
			rows[v] = line
		}
	}
	rows[pg] = row
	versions := make([]int, 0, len(rows))
	for v := range rows {
		versions = append(versions, v)
	}
	sort.Ints(versions)
	var b strings.Builder
	b.WriteString(nemesisBegin + "\nWritten by `TestNemesis` (`make nemesis-doc`), one row per PostgreSQL version, from its latest run.\n\n" + nemesisHead)
	for _, v := range versions {
		b.WriteString(rows[v] + "\n")
	}
	return os.WriteFile(doc, []byte(before+b.String()+nemesisEnd+after), 0o644)
}

// TestNemesisPlan: a seed always draws the same plan (so SEED= replays a
// schedule), the plans of a few seeds cover every kind of fault, and no
// plan holds one resource with two faults at once.
func TestNemesisPlan(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 30; seed++ {
		draw := func() []fault {
			rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973))
			rng.IntN(4) // the standby mode, drawn first by runSchedule
			return planFaults(rng, 75*time.Second, seed%2 == 0)
		}
		plan := draw()
		if again := draw(); !slices.Equal(plan, again) {
			t.Fatalf("seed %d drew two plans:\n%s\nand\n%s", seed, describePlan(plan), describePlan(again))
		}
		for i, f := range plan {
			seen[f.kind] = true
			for _, g := range plan[i+1:] {
				if g.at >= f.at+f.hold {
					continue
				}
				for _, r := range kindByName(f.kind).resources(f.target) {
					if slices.Contains(kindByName(g.kind).resources(g.target), r) {
						t.Errorf("seed %d: %s and %s hold %s at once", seed, f, g, r)
					}
				}
			}
		}
	}
	for _, k := range append(faultKinds, failoverKind) {
		if !seen[k.name] {
			t.Errorf("no plan of seeds 1–30 draws %q", k.name)
		}
	}
}
