package childproc

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLog polls the process's log until it contains want.
func waitLog(t *testing.T, p *Process, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %s: no %q after 30 s; it holds %q", p.Log, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signalOf returns the signal that ended the process, or 0.
func signalOf(err error) syscall.Signal {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

func TestStopEndsTheProcessWithSIGTERM(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "echo ready; exec sleep 600"), filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "ready")
	if !p.Running() {
		t.Fatalf("not running after its first line: %v", p.Err())
	}
	p.Stop(time.Minute)
	if p.Running() {
		t.Fatal("still running after Stop")
	}
	if sig := signalOf(p.Err()); sig != syscall.SIGTERM {
		t.Errorf("ended with %v (signal %v), want SIGTERM", p.Err(), sig)
	}
}

func TestStopKillsTheGroupOfAProcessThatIgnoresSIGTERM(t *testing.T) {
	// The shell ignores SIGTERM and has a child of its own (sleep); the
	// grace runs out, and SIGKILL goes to the whole group.
	script := `trap "" TERM; sleep 600 & echo "child $!"; echo ready; wait`
	p, err := Start(exec.Command("sh", "-c", script), filepath.Join(t.TempDir(), "stubborn.log"))
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "ready")
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	var childPID int
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "child "); ok {
			if childPID, err = strconv.Atoi(strings.TrimSpace(rest)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if childPID == 0 {
		t.Fatalf("no child pid in the log: %q", b)
	}
	p.Stop(100 * time.Millisecond)
	if sig := signalOf(p.Err()); sig != syscall.SIGKILL {
		t.Errorf("ended with %v (signal %v), want SIGKILL", p.Err(), sig)
	}
	// The grandchild got SIGKILL too; once reaped by init it is gone.
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(childPID, 0) == nil && !zombie(childPID) {
		if time.Now().After(deadline) {
			t.Fatalf("the group's other process %d still runs 30 s after Stop", childPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStopLeavesAnEndedProcess(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "exit 3"), filepath.Join(t.TempDir(), "exit.log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	p.Stop(time.Minute)
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() != 3 {
		t.Errorf("Err %v, want exit status 3", p.Err())
	}
}

func TestStartOutputWritesToTheWriter(t *testing.T) {
	var out bytes.Buffer
	p, err := StartOutput(exec.Command("sh", "-c", "echo to-stdout; echo to-stderr >&2"), &out)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if p.Err() != nil || p.Log != "" {
		t.Fatalf("Err %v, Log %q; want exit status 0 and no log file", p.Err(), p.Log)
	}
	if got := out.String(); !strings.Contains(got, "to-stdout\n") || !strings.Contains(got, "to-stderr\n") {
		t.Errorf("the writer got %q, want both lines", got)
	}
}

func TestStartFailure(t *testing.T) {
	if _, err := Start(exec.Command(filepath.Join(t.TempDir(), "missing")), filepath.Join(t.TempDir(), "x.log")); err == nil {
		t.Fatal("started a binary that does not exist")
	}
	if _, err := Start(exec.Command("true"), filepath.Join(t.TempDir(), "no-such-dir", "x.log")); err == nil {
		t.Fatal("started with a log in a directory that does not exist")
	}
}

func TestReadUsage(t *testing.T) {
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSSBytes <= 0 {
		t.Errorf("peak RSS %d, want > 0", u.PeakRSSBytes)
	}
}

func TestPeakRSS(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    int64
		wantErr bool
	}{
		{"kB", "Name:\tcdc\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n", 2048 * 1024, false},
		{"no line", "Name:\tcdc\nVmRSS:\t 1024 kB\n", 0, true},
		{"not a number", "VmHWM:\t lots kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := peakRSS([]byte(tt.status))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("peakRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// zombie reports whether pid has ended and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
