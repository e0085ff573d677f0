package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// postmasterPID returns the pid of the postmaster of the cluster behind
// pool: the parent of one of its backends.
func postmasterPID(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0, fmt.Errorf("reading backend pid: %w", err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", backend))
	if err != nil {
		return 0, fmt.Errorf("reading backend %d: %w", backend, err)
	}
	ppid, _, ok := statPPID(st)
	if !ok {
		return 0, fmt.Errorf("parsing /proc/%d/stat", backend)
	}
	return ppid, nil
}

// clusterCPU is the CPU time spent so far by one PostgreSQL cluster: its
// postmaster with the children it reaped, and its running children
// (backends, walsenders, autovacuum, checkpointer, …). Other clusters on the
// machine do not count, unlike the cpuPostgres group.
func clusterCPU(postmaster int) time.Duration {
	var total time.Duration
	eachProcStat(func(pid int, st []byte) {
		ppid, _, ok := statPPID(st)
		_, times, ok2 := parseStat(st)
		if !ok || !ok2 {
			return
		}
		switch {
		case pid == postmaster:
			total += times[0] + times[1] + times[2] + times[3]
		case ppid == postmaster:
			total += times[0] + times[1]
		}
	})
	return total
}

// statPPID returns the parent pid and state of a /proc/<pid>/stat line.
func statPPID(st []byte) (ppid int, state string, ok bool) {
	s := string(st)
	end := strings.LastIndexByte(s, ')')
	if end < 0 || end+2 > len(s) {
		return 0, "", false
	}
	f := strings.Fields(s[end+2:])
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}
