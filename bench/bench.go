// Package bench measures EventForge on the real local stack against
// PostgreSQL's own limit: the order transaction under pgbench, the API over
// gRPC and REST, the CDC reader draining a backlog, end-to-end latency under
// open-loop load, the consumer applying a backlog, and each component's
// memory and CPU. Every component runs as its own process of the eventforge
// binary; the benchmark itself is the eventforge-bench binary
// (cmd/eventforge-bench), so that the production binary carries no plotting
// code. Figures are printed, written as JSON and drawn as charts; nothing
// here asserts on time.
package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Config configures a run.
type Config struct {
	// Smoke runs tiny sizes (under a minute) to check that the harness works.
	Smoke bool `name:"smoke" help:"Tiny sizes (under a minute): checks the harness, not the figures."`
	// OutDir receives <timestamp>.json, the charts and the component logs.
	OutDir string `name:"out" help:"Directory for results, charts and logs." default:"bench/results"`
	// StateDir is the local stack's state directory (default as in dev).
	StateDir string `name:"state-dir" help:"Local stack state directory (default /var/tmp/eventforge-<hash>)."`
	// Profile has every component serve its runtime profiles and records
	// CPU and heap profiles of each phase into the logs directory.
	Profile bool `name:"profile" help:"Record CPU and heap profiles of each component during its phase (pprof files in the logs directory)."`
	// Phases selects the phases to run, for working on one component; a
	// full run (the default) is what the figures mean.
	// peers (the relays side by side, make bench-peers) and growth (costs
	// against the size of the work, make bench-growth) are not among the
	// defaults: each adds minutes (docs/bench.md).
	Phases []string `name:"phases" help:"Run only these phases: postgres, api, drain, apply, e2e, peers, growth (apply needs drain; e2e needs api, drain and apply; peers, the relays side by side, and growth, costs against the size of the work, run only when named)." default:"postgres,api,drain,apply,e2e" enum:"postgres,api,drain,apply,e2e,peers,growth"`
	// Keep leaves the benchmark's database, slot and topic in place.
	Keep bool `name:"keep" help:"Keep the benchmark database, slot and topic afterwards."`
	// Binary is the eventforge binary whose api, cdc and consumer run as
	// the measured processes; empty means eventforge beside this binary.
	Binary string `name:"binary" help:"The eventforge binary whose api, cdc and consumer are measured (default: eventforge beside this binary)."`
	// PeerRelays, PeerRates, PeerBacklog, PeerRounds, PeerWarmupOrders,
	// PeerWarmup and PeerDuration narrow the peers phase to some relays and loads, for
	// working on one relay; the table of a full peers phase is what the
	// figures mean.
	PeerRelays       []string      `name:"peer-relays" help:"Peers phase: measure only these relays." enum:"EventForge,EventForge-exactly-once,polling,Debezium" default:"EventForge,EventForge-exactly-once,polling,Debezium"`
	PeerRates        []int         `name:"peer-rates" help:"Peers phase: offered loads in orders/s (default 500,2000; 100 with --smoke)."`
	PeerBacklog      int           `name:"peer-backlog" help:"Peers phase: backlog each relay drains in each round (default 200000; 2000 with --smoke)."`
	PeerRounds       int           `name:"peer-rounds" help:"Peers phase: rounds, in each of which every relay drains the backlog and takes each load in turn (default 3)."`
	PeerWarmupOrders int           `name:"peer-warmup-orders" help:"Peers phase: orders committed at full speed, and read, before the load of each latency window starts (default 20000; 200 with --smoke)."`
	PeerWarmup       time.Duration `name:"peer-warmup" help:"Peers phase: load offered at the rate before each latency window is measured (default 5s; 1s with --smoke)."`
	PeerDuration     time.Duration `name:"peer-duration" help:"Peers phase: how long each latency window is measured, after its warm-up (default 10s; 2s with --smoke)."`
}

// binary returns the eventforge binary the components run from.
func (c Config) binary() (string, error) {
	bin := c.Binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("locating own binary: %w", err)
		}
		bin = filepath.Join(filepath.Dir(self), "eventforge")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the eventforge binary to measure (make build, or --binary): %w", err)
	}
	return bin, nil
}

// sizes are the workload sizes of a run.
type sizes struct {
	pgClients    []int
	pgDuration   time.Duration
	apiClients   int
	apiDuration  time.Duration
	apiWarmup    time.Duration // closed loop before the api is measured
	backlog      int           // events committed with the reader stopped
	rates        []int
	rateDuration time.Duration
	batchSize    int
	peerRates    []int // offered loads of the peers phase
	peerBacklog  int   // backlog each relay of the peers phase drains per round
	peerRounds   int   // rounds of the peers phase
	// A latency window's warm-up: orders committed at full speed and
	// read, then the load at the rate for peerWarmup.
	peerWarmupOrders int
	peerWarmup       time.Duration
	peerDuration     time.Duration // measured part of a latency window
	// The growth phase: backlogs drained, the drain whose records the
	// apply grid uses, and the partition and worker counts of the grid.
	growthBacklogs    []int
	growthApplyEvents int
	growthPartitions  []int
}

func sizesFor(smoke bool) sizes {
	if smoke {
		return sizes{pgClients: []int{8}, pgDuration: 2 * time.Second, apiClients: 8, apiDuration: 2 * time.Second, apiWarmup: 500 * time.Millisecond,
			backlog: 2_000, rates: []int{100}, rateDuration: 3 * time.Second, batchSize: 50, peerRates: []int{100},
			peerBacklog: 2_000, peerRounds: 3, peerWarmupOrders: 200, peerWarmup: time.Second, peerDuration: 2 * time.Second,
			growthBacklogs: []int{500, 2_000}, growthApplyEvents: 2_000, growthPartitions: []int{1, 2}}
	}
	return sizes{pgClients: []int{8, 16, 32}, pgDuration: 10 * time.Second, apiClients: 32, apiDuration: 15 * time.Second, apiWarmup: 2 * time.Second,
		backlog: 200_000, rates: []int{250, 500, 1000, 2000}, rateDuration: 30 * time.Second, batchSize: 100,
		peerRates: []int{500, 2000}, peerBacklog: 200_000, peerRounds: 3, peerWarmupOrders: 20_000, peerWarmup: 5 * time.Second, peerDuration: 10 * time.Second,
		growthBacklogs: []int{10_000, 100_000, 1_000_000}, growthApplyEvents: 100_000, growthPartitions: []int{1, 2, 4, 8}}
}

// forPeers applies the peers phase's narrowing flags (Config.PeerRates,
// PeerBacklog, PeerRounds, PeerWarmupOrders, PeerWarmup, PeerDuration); the
// other phases keep their sizes.
func (sz sizes) forPeers(cfg Config) sizes {
	if len(cfg.PeerRates) > 0 {
		sz.peerRates = cfg.PeerRates
	}
	if cfg.PeerBacklog > 0 {
		sz.peerBacklog = cfg.PeerBacklog
	}
	if cfg.PeerRounds > 0 {
		sz.peerRounds = cfg.PeerRounds
	}
	if cfg.PeerWarmupOrders > 0 {
		sz.peerWarmupOrders = cfg.PeerWarmupOrders
	}
	if cfg.PeerWarmup > 0 {
		sz.peerWarmup = cfg.PeerWarmup
	}
	if cfg.PeerDuration > 0 {
		sz.peerDuration = cfg.PeerDuration
	}
	return sz
}

// Results is one run's figures; its JSON form is written to OutDir.
type Results struct {
	StartedAt time.Time `json:"started_at"`
	Smoke     bool      `json:"smoke"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	Phases    []string  `json:"phases"`

	PGLimit pgLimitResult `json:"pg_limit"`

	APIGRPC    loadResult `json:"api_grpc"`
	APIREST    loadResult `json:"api_rest"`
	APIClients int        `json:"api_clients"`
	GRPCRatio  float64    `json:"grpc_ratio_to_pg_limit"`
	RESTRatio  float64    `json:"rest_ratio_to_pg_limit"`
	// APIGRPCCPU and APIRESTCPU are the api's CPU per order in each closed
	// loop, in microseconds: its cores in the phase over the orders/s.
	APIGRPCCPU  float64                   `json:"api_grpc_cpu_us_per_order"`
	APIRESTCPU  float64                   `json:"api_rest_cpu_us_per_order"`
	APIPeakRSS  int64                     `json:"api_peak_rss_bytes"`
	Drain       drainResult               `json:"cdc_drain"`
	Apply       applyResult               `json:"consumer_apply"`
	EndToEnd    []rateResult              `json:"end_to_end"`
	Components  map[string]componentUsage `json:"components"`
	Throughput  []throughputPoint         `json:"throughput"`
	CPU         []phaseCPU                `json:"cpu_by_phase"`
	Peers       *peersResult              `json:"peers,omitempty"`
	Growth      *growthResult             `json:"growth,omitempty"`
	ElapsedSecs float64                   `json:"elapsed_seconds"`
}

// selectPhases returns the phases to run, as a set and in the order of
// all: those requested, or all of them when none is; it refuses a selection
// without a phase that another one needs.
func selectPhases(requested, all []string) (map[string]bool, []string, error) {
	selected := map[string]bool{}
	for _, p := range requested {
		selected[p] = true
	}
	if len(selected) == 0 {
		for _, p := range all {
			selected[p] = true
		}
	}
	applyWithoutDrain := selected["apply"] && !selected["drain"]
	e2eWithoutOthers := selected["e2e"] && (!selected["api"] || !selected["drain"] || !selected["apply"])
	if applyWithoutDrain || e2eWithoutOthers {
		return nil, nil, fmt.Errorf("--phases %v: apply needs drain; e2e needs api, drain and apply", requested)
	}
	order := make([]string, 0, len(selected))
	for _, p := range all {
		if selected[p] {
			order = append(order, p)
		}
	}
	return selected, order, nil
}

type drainResult struct {
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	// Recvlogical* is the same backlog streamed by PostgreSQL's own client,
	// pg_recvlogical, from a copy of the slot to /dev/null: a reference
	// for the reader, which also publishes every event to Kafka.
	RecvlogicalSeconds float64 `json:"pg_recvlogical_seconds"`
	RecvlogicalPerSec  float64 `json:"pg_recvlogical_events_per_sec"`
}

type applyRun struct {
	BatchSize    int     `json:"batch_size"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// PeakRSSBytes is the consumer's peak RSS (VmHWM) over the run.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

type applyResult struct {
	Off applyRun `json:"batching_off"`
	On  applyRun `json:"batching_on"`
	// OnMeasured is false when the consumer has no batching option.
	OnMeasured bool `json:"batching_on_measured"`
}

type latency struct {
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

type rateResult struct {
	OfferedPerSec   int        `json:"offered_per_sec"`
	Load            loadResult `json:"load"`
	Orders          int        `json:"orders"`
	CommitToAck     latency    `json:"commit_to_kafka_ack"`
	CommitToApplied latency    `json:"commit_to_applied"`
	MaxSlotLagBytes int64      `json:"max_slot_lag_bytes"`
}

type componentUsage struct {
	PeakRSSBytes      int64   `json:"peak_rss_bytes"`
	CPUSeconds        float64 `json:"cpu_seconds_end_to_end"`
	CPUSecondsPer1000 float64 `json:"cpu_seconds_per_1000_orders"`
	// Fit splits the CPU over the rates into per order and at any rate
	// (cpufit.go); nil when the phase offered a single rate.
	Fit *costFit `json:"fit_over_rates,omitempty"`
}

type throughputPoint struct {
	Second  int `json:"second"`
	Created int `json:"created"`
	Applied int `json:"applied"`
}

// Run executes every phase, prints the table, and writes the JSON and the
// charts to cfg.OutDir.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	binary, err := cfg.binary()
	if err != nil {
		return err
	}
	sz := sizesFor(cfg.Smoke).forPeers(cfg)
	started := time.Now()
	stamp := started.UTC().Format("20060102T150405Z")
	outDir := cfg.OutDir
	if outDir == "" {
		outDir = filepath.Join("bench", "results")
	}
	logDir := filepath.Join(outDir, stamp+"-logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", logDir, err)
	}

	env, err := newEnv(ctx, cfg, stamp, logger)
	if err != nil {
		return err
	}
	if !cfg.Keep {
		defer env.cleanup(logger)
	}
	res := &Results{StartedAt: started.UTC(), Smoke: cfg.Smoke, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		Components: map[string]componentUsage{}, APIClients: sz.apiClients}
	r := &runner{cfg: cfg, binary: binary, sz: sz, env: env, logDir: logDir, logger: logger, res: res}
	defer r.stopAll()

	phases := []struct {
		key, name string
		run       func(context.Context) error
	}{
		{"postgres", "postgres limit (pgbench)", r.pgLimitPhase},
		{"api", "api closed loop", r.apiPhase},
		{"drain", "cdc drain", r.drainPhase},
		{"apply", "consumer apply", r.applyPhase},
		{"e2e", "end to end", r.endToEndPhase},
		{"peers", "relays side by side", r.peersPhase},
		{"growth", "growth with the work", r.growthPhase},
	}
	keys := make([]string, len(phases))
	for i, p := range phases {
		keys[i] = p.key
	}
	selected, order, err := selectPhases(cfg.Phases, keys)
	if err != nil {
		return err
	}
	res.Phases = order
	for _, p := range phases {
		if !selected[p.key] {
			continue
		}
		logger.Info("bench phase", "phase", p.name)
		t0 := time.Now()
		if err := p.run(ctx); err != nil {
			return fmt.Errorf("phase %s: %w", p.name, err)
		}
		logger.Info("bench phase done", "phase", p.name, "seconds", time.Since(t0).Seconds())
	}
	res.ElapsedSecs = time.Since(started).Seconds()

	jsonPath := filepath.Join(outDir, stamp+".json")
	if err := res.writeJSON(jsonPath); err != nil {
		return err
	}
	charts, err := res.writeCharts(filepath.Join(outDir, stamp))
	if err != nil {
		return err
	}
	res.printTable(os.Stdout)
	fmt.Printf("\nresults: %s\ncharts:  %v\nlogs:    %s\n", jsonPath, charts, logDir)
	return res.check(selected)
}
