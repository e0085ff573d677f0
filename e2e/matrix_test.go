package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventforge/eventforge/verify"
)

// window is one failure window of the delivery contract and the scenario
// that opens it on real processes and asserts durable state afterwards.
type window struct {
	name string
	run  func(t *testing.T)
}

// failureWindows is the matrix of docs/guarantees.md, in its order.
var failureWindows = []window{
	{"relay crash after the Kafka ack, before the LSN confirm", windowRelayCrashAfterAck},
	{"consumer crash after the DB commit, before the offset commit", windowConsumerCrashAfterCommit},
	{"the same event delivered concurrently to two instances", windowConcurrentDuplicate},
	{"retries exhausted: DLQ acked before the source offset", windowRetriesExhausted},
	{"Kafka broker restart and PostgreSQL restart under load", windowBrokerAndPostgresRestarts},
	{"cdc standby takeover under load", windowStandbyTakeover},
	{"consumer rebalance (1 to 3 to 1 instances) under load", windowRebalance},
	{"api crash before COMMIT", windowAPICrashBeforeCommit},
	{"broker paused with SIGSTOP for 10 s under load", windowBrokerPaused},
	{"three-broker cluster (RF 3, min ISR 2) loses a broker under load", windowClusterBrokerLoss},
	{"Kafka frozen for 20 s while orders are created and cancelled", windowKafkaOutageOrdering},
	{"Kafka refuses one order's record (over the topic's max.message.bytes)", windowRelayDeadLetter},
	{"cdc leader that cannot reach Kafka gives up the slot to the standby", windowUnhealthyLeader},
	{"slot dropped, then dropped and recreated, under load", windowSlotLost},
	{"slot invalidated by max_slot_wal_keep_size while the reader is stopped", windowSlotInvalidated},
	{"PostgreSQL 15 primary failover under load (gap recovered from the outbox)", windowPrimaryFailover(15)},
	{"PostgreSQL 17 primary failover under load (failover slot)", windowPrimaryFailover(17)},
}

// matrixRuns is how often each window runs: EVENTFORGE_MATRIX_RUNS,
// default 3.
func matrixRuns(t *testing.T) int {
	n := 3
	if v := os.Getenv("EVENTFORGE_MATRIX_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("EVENTFORGE_MATRIX_RUNS=%q: want a positive integer", v)
		}
	}
	return n
}

// reports holds the verify report of each run, by test name.
var reports sync.Map

func recordReport(t *testing.T, rep verify.Report) { reports.Store(t.Name(), rep) }

// runResult is one run of one window, as the results table shows it.
type runResult struct {
	window   string
	passed   bool
	duration time.Duration
	rep      verify.Report
	verified bool
}

// TestFailureMatrix runs every failure window of the delivery contract
// several times. Each run uses its own database, slot, topic and groups (and
// its own Kafka cluster where brokers are killed or paused), kills or
// pauses real processes, and asserts durable rows, committed offsets, the
// slot position and `eventforge verify`. With EVENTFORGE_MATRIX_DOC set to a
// Markdown file, the results table between its matrix markers is rewritten
// from this run (`make guarantees`).
func TestFailureMatrix(t *testing.T) {
	runs := matrixRuns(t)
	var results []runResult
	for _, w := range failureWindows {
		t.Run(w.name, func(t *testing.T) {
			for i := 1; i <= runs; i++ {
				var name string
				start := time.Now()
				ok := t.Run(fmt.Sprintf("run-%d", i), func(t *testing.T) {
					name = t.Name()
					w.run(t)
				})
				r := runResult{window: w.name, passed: ok, duration: time.Since(start)}
				if v, found := reports.Load(name); found {
					r.rep, r.verified = v.(verify.Report), true
				}
				results = append(results, r)
			}
		})
	}
	if doc := os.Getenv("EVENTFORGE_MATRIX_DOC"); doc != "" {
		if err := writeMatrixTable(doc, runs, sourceRevision(t, filepath.Dir(doc)), results); err != nil {
			t.Errorf("writing the results table: %v", err)
		}
	}
}

const (
	matrixBegin = "<!-- failure-matrix:begin -->"
	matrixEnd   = "<!-- failure-matrix:end -->"
)

// sourceRevision names the commit of the checkout holding dir, with
// "+ uncommitted changes" when its work tree differs from that commit.
func sourceRevision(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse in %s: %v", dir, err)
	}
	rev := strings.TrimSpace(string(out))
	status, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		t.Fatalf("git status in %s: %v", dir, err)
	}
	if len(bytes.TrimSpace(status)) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}

// writeMatrixTable replaces the text between the matrix markers of doc with
// a table of results, stating the commit rev they were measured on.
func writeMatrixTable(doc string, runs int, rev string, results []runResult) error {
	src, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	before, rest, ok := bytes.Cut(src, []byte(matrixBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(matrixEnd))
	if !ok || !ok2 {
		return fmt.Errorf("%s lacks the %s … %s markers", doc, matrixBegin, matrixEnd)
	}
	type agg struct {
		passed, runs                      int
		events, deliveries, dups, changes int
		lost, dupEffects, ordering, dead  int
		slowest                           time.Duration
	}
	by := map[string]*agg{}
	var order []string
	for _, r := range results {
		a := by[r.window]
		if a == nil {
			a = &agg{}
			by[r.window] = a
			order = append(order, r.window)
		}
		a.runs++
		if r.passed {
			a.passed++
		}
		a.slowest = max(a.slowest, r.duration)
		if r.verified {
			a.events += r.rep.LogicalEvents
			a.deliveries += r.rep.Deliveries
			a.dups += r.rep.DuplicateDeliveries
			for _, n := range r.rep.BusinessChanges {
				a.changes += n
			}
			for _, n := range r.rep.DeadLettered {
				a.dead += n
			}
			a.lost += r.rep.Lost
			a.dupEffects += r.rep.DuplicateEffects
			a.ordering += r.rep.OrderingViolations
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nGenerated by `TestFailureMatrix` (`make guarantees`) on %s, commit %s (%d runs per window; sums over the runs, from `eventforge verify`).\n\n",
		matrixBegin, time.Now().UTC().Format("2006-01-02 15:04 MST"), rev, runs)
	b.WriteString("| window | runs passed | logical events | deliveries | duplicate deliveries | business changes | dead-lettered | lost | duplicate effects | ordering violations | slowest run |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range order {
		a := by[w]
		fmt.Fprintf(&b, "| %s | %d/%d | %d | %d | %d | %d | %d | %d | %d | %d | %.0f s |\n", w, a.passed, a.runs,
			a.events, a.deliveries, a.dups, a.changes, a.dead, a.lost, a.dupEffects, a.ordering, a.slowest.Seconds())
	}
	b.WriteString(matrixEnd)
	out := append(append(append([]byte{}, before...), b.String()...), after...)
	return os.WriteFile(doc, out, 0o644)
}
