package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/eventforge/eventforge/internal/freeport"
)

// child is one eventforge component run by the benchmark as a separate
// process of the eventforge binary, so its memory and CPU are its own.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	// pprofAddr serves the child's runtime profiles; empty unless the run
	// profiles.
	pprofAddr string
}

// startChild runs `<binary> <args...>`, logging to dir/<name>.log. With
// profile set, the child also serves its runtime profiles on a free
// loopback port.
func startChild(binary, dir, name string, profile bool, args ...string) (*child, error) {
	var pprofAddr string
	if profile {
		var err error
		if pprofAddr, err = freeport.Addr(); err != nil {
			return nil, err
		}
		args = append([]string{"--pprof-addr", pprofAddr}, args...)
	}
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, exited: make(chan struct{}), pprofAddr: pprofAddr}
	go func() { _ = cmd.Wait(); f.Close(); close(c.exited) }()
	return c, nil
}

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to 20 s, then SIGKILL.
func (c *child) stop() {
	if !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

// usage is a process's resource use as the kernel accounts it.
type usage struct {
	PeakRSSBytes int64         // VmHWM
	CPU          time.Duration // user + system
}

// sample reads /proc for the child. It must be called while it runs.
func (c *child) sample() (usage, error) {
	return procUsage(c.cmd.Process.Pid)
}

func procUsage(pid int) (usage, error) {
	var u usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			u.PeakRSSBytes = kb * 1024
		}
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

// waitFor polls cond every 100 ms until it reports true, fails, or ctx ends.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return waitEvery(ctx, timeout, 100*time.Millisecond, what, cond)
}

// waitEvery is waitFor polling every interval.
func waitEvery(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not reached within %s", what, timeout)
		case <-time.After(interval):
		}
	}
}

// profileCPU records a CPU profile of the child over d in the background,
// into dir/<label>-<name>.cpu.pprof; the returned func waits for it. It does
// nothing when the child serves no profiles.
func (c *child) profileCPU(dir, label string, d time.Duration) (wait func()) {
	if c.pprofAddr == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fetchProfile(fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), filepath.Join(dir, label+"-"+c.name+".cpu.pprof"))
	}()
	return func() { <-done }
}

// profileHeap writes the child's heap profile (in use and allocated since
// start) to dir/<label>-<name>.heap.pprof, after a garbage collection.
func (c *child) profileHeap(dir, label string) {
	if c.pprofAddr != "" {
		c.fetchProfile("heap?gc=1", filepath.Join(dir, label+"-"+c.name+".heap.pprof"))
	}
}

// fetchProfile saves /debug/pprof/<what> to path. A failure is written to
// path+".err" rather than failing the run: profiles explain figures, they
// are not figures.
func (c *child) fetchProfile(what, path string) {
	fail := func(err error) { _ = os.WriteFile(path+".err", []byte(err.Error()+"\n"), 0o644) }
	// A child just started may not listen yet.
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err = http.Get("http://" + c.pprofAddr + "/debug/pprof/" + what)
		if err == nil || time.Now().After(deadline) || !c.running() {
			break
		}
	}
	if err != nil {
		fail(err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fail(err)
		return
	}
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Errorf("%s: %s: %s", what, resp.Status, body))
		return
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		fail(err)
	}
}
