package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/eventforge/eventforge/internal/childproc"
	"github.com/eventforge/eventforge/internal/freeport"
)

// child is one eventforge component run by the benchmark as a separate
// process of the eventforge binary, so its memory and CPU are its own.
type child struct {
	*childproc.Process
	name string
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
	p, err := childproc.Start(exec.Command(binary, args...), filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return &child{Process: p, name: name, pprofAddr: pprofAddr}, nil
}

// stop sends SIGTERM and waits up to 20 s, then SIGKILL.
func (c *child) stop() { c.Stop(20 * time.Second) }

// sample reads /proc for the child. It must be called while it runs.
func (c *child) sample() (childproc.Usage, error) {
	return childproc.ReadUsage(c.Cmd.Process.Pid)
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
		if err == nil || time.Now().After(deadline) || !c.Running() {
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
