package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CPU accounting by who spends it, so that each figure comes with where the
// machine's cores went while it was measured: a component's share, and
// PostgreSQL's, Kafka's and the load generator's.
const (
	cpuPostgres = "postgres" // every postgres process, with the backends the postmaster reaped
	cpuKafka    = "kafka"    // the broker's JVM
	cpuBench    = "bench"    // this process: the load generator and the measuring
	cpuReaped   = "reaped"   // children of this process that exited: pgbench, stopped components
	cpuOther    = "other"    // any other process still running
	cpuIdle     = "idle"     // idle and iowait, from /proc/stat
	clockTick   = 10 * time.Millisecond
)

// cpuSample is the CPU time spent so far by each group, at one instant.
type cpuSample struct {
	at time.Time
	by map[string]time.Duration
}

// sampleCPU reads /proc. children maps the pids of the running components
// to their group names (api, cdc, consumer).
func sampleCPU(children map[int]string) cpuSample {
	s := cpuSample{at: time.Now(), by: map[string]time.Duration{}}
	self := os.Getpid()
	eachProcStat(func(pid int, st []byte) {
		comm, times, ok := parseStat(st)
		if !ok {
			return
		}
		own := times[0] + times[1]
		switch {
		case pid == self:
			s.by[cpuBench] += own
			s.by[cpuReaped] += times[2] + times[3]
		case children[pid] != "":
			s.by[children[pid]] += own
		case comm == "postgres":
			s.by[cpuPostgres] += own + times[2] + times[3]
		case comm == "java":
			s.by[cpuKafka] += own
		default:
			s.by[cpuOther] += own
		}
	})
	if stat, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(stat, []byte("\n"))
		f := strings.Fields(string(line))
		if len(f) > 5 && f[0] == "cpu" {
			idle, _ := strconv.ParseInt(f[4], 10, 64)
			iowait, _ := strconv.ParseInt(f[5], 10, 64)
			s.by[cpuIdle] = time.Duration(idle+iowait) * clockTick
		}
	}
	return s
}

// eachProcStat calls fn with the pid and /proc/<pid>/stat line of every
// process running; a process that exits meanwhile is skipped.
func eachProcStat(fn func(pid int, st []byte)) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		fn(pid, st)
	}
}

// parseStat returns the command name and utime, stime, cutime, cstime of a
// /proc/<pid>/stat line.
func parseStat(st []byte) (comm string, times [4]time.Duration, ok bool) {
	open, end := bytes.IndexByte(st, '('), bytes.LastIndexByte(st, ')')
	if open < 0 || end < open || end+2 > len(st) {
		return "", times, false
	}
	comm = string(st[open+1 : end])
	// Fields after ") ": state is field 3 (1-based); utime..cstime are 14-17.
	f := strings.Fields(string(st[end+2:]))
	if len(f) < 15 {
		return "", times, false
	}
	for i := range times {
		n, _ := strconv.ParseInt(f[11+i], 10, 64)
		times[i] = time.Duration(n) * clockTick
	}
	return comm, times, true
}

// phaseCPU is the average number of cores each group used during a phase.
type phaseCPU struct {
	Phase   string             `json:"phase"`
	Seconds float64            `json:"seconds"`
	Cores   map[string]float64 `json:"cores"`
}

// cpuPerOrder is group's CPU per order, in microseconds, in the phase
// recorded last under that name, at perSec orders/s; 0 when the phase was
// not recorded or nothing was achieved.
func (res *Results) cpuPerOrder(phase, group string, perSec float64) float64 {
	for i := len(res.CPU) - 1; i >= 0; i-- {
		if pc := res.CPU[i]; pc.Phase == phase && perSec > 0 {
			return pc.Cores[group] / perSec * 1e6
		}
	}
	return 0
}

// coresBetween turns two samples into cores used per group. Groups whose
// processes exited between the samples can come out negative; they count 0.
func coresBetween(phase string, a, b cpuSample) phaseCPU {
	secs := b.at.Sub(a.at).Seconds()
	pc := phaseCPU{Phase: phase, Seconds: secs, Cores: map[string]float64{}}
	if secs <= 0 {
		return pc
	}
	for group, t := range b.by {
		if d := (t - a.by[group]).Seconds(); d > 0 {
			pc.Cores[group] = d / secs
		}
	}
	return pc
}

// String lists the groups, busiest first, idle last.
func (pc phaseCPU) String() string {
	groups := make([]string, 0, len(pc.Cores))
	for g := range pc.Cores {
		if g != cpuIdle && pc.Cores[g] >= 0.005 {
			groups = append(groups, g)
		}
	}
	sort.Slice(groups, func(i, j int) bool { return pc.Cores[groups[i]] > pc.Cores[groups[j]] })
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%s %.2f, ", g, pc.Cores[g])
	}
	fmt.Fprintf(&b, "idle %.2f", pc.Cores[cpuIdle])
	return b.String()
}
