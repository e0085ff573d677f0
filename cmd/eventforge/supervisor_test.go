package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/console"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// The supervisor runs /bin/sh children: each records its failpoints and pid
// in a file and then behaves as the script says.
func newTestSupervisor(t *testing.T) (*supervisor, string) {
	t.Helper()
	dir := t.TempDir()
	s := newSupervisor("/bin/sh", io.Discard, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.minBackoff, s.maxBackoff, s.stopTimeout = 10*time.Millisecond, 50*time.Millisecond, 5*time.Second
	return s, dir
}

func waitComponent(t *testing.T, s *supervisor, name string, cond func(console.Component) bool) console.Component {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range s.Components() {
			if c.Name == name && cond(c) {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached the expected state: %+v", name, s.Components())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSupervisorRestartsACrashedChild(t *testing.T) {
	s, dir := newTestSupervisor(t)
	marker := filepath.Join(dir, "crashed")
	// The first process SIGKILLs itself (like a crash failpoint); the next
	// one keeps running.
	s.add(childSpec{name: "crashy", args: []string{"-c", `if [ ! -e "` + marker + `" ]; then touch "` + marker + `"; kill -9 $$; fi; exec sleep 60`}})
	s.add(childSpec{name: "steady", args: []string{"-c", "exec sleep 60"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()

	c := waitComponent(t, s, "crashy", func(c console.Component) bool { return c.Starts == 2 && c.Running })
	if c.LastExit != "killed by SIGKILL" || c.LastExitAt == nil || c.LastExitSignal != "SIGKILL" || c.LastExitCode != -1 {
		t.Fatalf("crashed child: %+v", c)
	}
	if st := waitComponent(t, s, "steady", func(c console.Component) bool { return c.Running }); st.Starts != 1 {
		t.Fatalf("the other child was restarted too: %+v", st)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	for _, c := range s.Components() {
		if c.Running || c.PID != 0 {
			t.Fatalf("%s still running after shutdown: %+v", c.Name, c)
		}
	}
}

func TestSupervisorRestartArmsFailpointsOnce(t *testing.T) {
	s, dir := newTestSupervisor(t)
	out := filepath.Join(dir, "env")
	t.Setenv("EVENTFORGE_FAILPOINTS", "from.parent=crash") // must not leak into children
	// Each process appends its failpoints; a process with failpoints armed
	// then exits with 1, like a crash, so the supervisor restarts it.
	script := `echo "[$EVENTFORGE_FAILPOINTS]" >> "` + out + `"; if [ -n "$EVENTFORGE_FAILPOINTS" ]; then sleep 0.2; exit 1; fi; exec sleep 60`
	s.add(childSpec{name: "cdc", args: []string{"-c", script}, env: []string{"EXTRA=1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.run(ctx)
	waitComponent(t, s, "cdc", func(c console.Component) bool { return c.Running })

	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := s.Restart(rctx, "cdc", failpoint.CDCAfterAckBeforeConfirm+"=1*crash"); err != nil {
		t.Fatal(err)
	}
	c := waitComponent(t, s, "cdc", func(c console.Component) bool { return c.Starts == 3 && c.Running })
	if c.Failpoints != "" || !strings.HasPrefix(c.LastExit, "exit status 1") || c.LastExitCode != 1 || c.LastExitSignal != "" {
		t.Fatalf("after the armed process died: %+v", c)
	}
	// The third process may not have written its line yet when it counts
	// as running.
	want := "[]\n[cdc.after_ack_before_confirm=1*crash]\n[]\n"
	var got string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if got = string(b); got == want || len(got) > len(want) || time.Now().After(deadline) {
			break
		}
	}
	if got != want {
		t.Fatalf("failpoints per process:\n%s\nwant:\n%s", got, want)
	}
	if err := s.Restart(rctx, "nope", ""); err == nil {
		t.Fatal("restarting an unknown component succeeded")
	}
}

func TestSupervisorExtraInstance(t *testing.T) {
	s, dir := newTestSupervisor(t)
	out := filepath.Join(dir, "args")
	s.add(childSpec{name: "consumer-fulfillment", args: []string{"-c", `echo "$0 $1 [$EVENTFORGE_FAILPOINTS]" >> "` + out + `"; exec sleep 60`}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.run(ctx)
	waitComponent(t, s, "consumer-fulfillment", func(c console.Component) bool { return c.Running })
	stop, err := s.StartExtra(ctx, "consumer-fulfillment", []string{"--group", "g2"}, "x=1*delay(1s)")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "--group g2 [x=1*delay(1s)]") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("extra instance did not start with its flags: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	stop() // idempotent
	if n := len(s.Components()); n != 1 {
		t.Fatalf("the extra instance is listed as supervised: %d components", n)
	}
}

// A child that ignores SIGTERM is killed with everything it started: the
// SIGKILL after stopTimeout goes to its process group.
func TestSupervisorStopKillsTheChildsGroup(t *testing.T) {
	s, dir := newTestSupervisor(t)
	s.stopTimeout = 200 * time.Millisecond
	pidFile := filepath.Join(dir, "grandchild")
	s.add(childSpec{name: "stubborn", args: []string{"-c", `trap "" TERM; sleep 600 & echo $! > "` + pidFile + `.tmp"; mv "` + pidFile + `.tmp" "` + pidFile + `"; wait`}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	waitComponent(t, s, "stubborn", func(c console.Component) bool { return c.Running })
	var grandchild int
	for deadline := time.Now().Add(10 * time.Second); grandchild == 0; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if grandchild, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never wrote its own child's pid")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if c := s.Components()[0]; c.LastExit != "killed by SIGKILL" {
		t.Fatalf("the child that ignores SIGTERM: %+v", c)
	}
	// Once reaped by init, the grandchild is gone.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(grandchild, 0) == nil && !zombie(grandchild); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(grandchild, syscall.SIGKILL)
			t.Fatalf("the child's own child %d still runs after the supervisor stopped", grandchild)
		}
	}
}

// zombie reports whether pid has ended and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	s := string(b)
	return strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}
