// Package childproc runs a program (an EventForge component, under `eventforge
// dev`'s supervisor, in the benchmark and in the end-to-end tests) as a child
// process in a process group of its own, with its output in a log file or
// a writer, and stops it: SIGTERM first, SIGKILL to the whole group when the
// grace period runs out. Usage reads a process's peak memory and CPU time
// from /proc.
package childproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a started child process.
type Process struct {
	// Cmd is the started command; Cmd.Process is its process.
	Cmd *exec.Cmd
	// Log is the file that receives its stdout and stderr (Start; empty
	// with StartOutput).
	Log    string
	exited chan struct{}
	err    error
}

// Start starts cmd with its stdout and stderr written to a new file at
// logPath (truncated if it exists), as StartOutput does.
func Start(cmd *exec.Cmd, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log %s: %w", logPath, err)
	}
	p, err := start(cmd, f, f.Close)
	if err != nil {
		f.Close()
		return nil, err
	}
	p.Log = logPath
	return p, nil
}

// StartOutput starts cmd with its stdout and stderr written to w. The
// process leads a process group of its own, so a terminal's Ctrl-C does
// not reach it and Stop can kill what it started too; it is killed when
// this process dies.
func StartOutput(cmd *exec.Cmd, w io.Writer) (*Process, error) {
	return start(cmd, w, nil)
}

// start starts cmd writing to w and calls done, if not nil, once it ended.
func start(cmd *exec.Cmd, w io.Writer, done func() error) (*Process, error) {
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if done != nil {
			_ = done()
		}
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed once the process has ended; Err then holds how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the result of waiting for the process (nil for exit status 0).
// Call it only after Exited is closed.
func (p *Process) Err() error { return p.err }

// Running reports whether the process has not ended yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for the process to end; after grace it
// sends SIGKILL to the process's whole group and waits for the end. A
// process that has already ended is left as it is.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// Usage is a process's resource use as the kernel accounts it.
type Usage struct {
	// PeakRSSBytes is its peak resident set size (VmHWM).
	PeakRSSBytes int64
	// CPU is its user plus system CPU time.
	CPU time.Duration
	// Threads is how many threads it has now (Go's and C libraries' alike).
	Threads int
}

// ReadUsage reads the resource use of the running process pid from /proc.
func ReadUsage(pid int) (Usage, error) {
	var u Usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	if u.PeakRSSBytes, err = peakRSS(status); err != nil {
		return u, fmt.Errorf("reading /proc/%d/status: %w", pid, err)
	}
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
		u.Threads = len(tasks)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 (1-based), in clock ticks of 1/100 s on Linux.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) > 12 {
		ut, _ := strconv.ParseInt(fields[11], 10, 64)
		st, _ := strconv.ParseInt(fields[12], 10, 64)
		u.CPU = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return u, nil
}

// peakRSS returns the VmHWM line of a /proc/<pid>/status file in bytes.
func peakRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmHWM: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no VmHWM line")
}
