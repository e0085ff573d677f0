package localstack

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestProcState(t *testing.T) {
	tests := []struct {
		stat string
		want byte
	}{
		{"1234 (java) S 1 1234 1234 0 -1", 'S'},
		{"1234 (post gres) Z 1 1234", 'Z'},
		{"1234 (a) b) R 1", 'R'},
		{"garbage", 0},
		{"1 (x)", 0},
	}
	for _, tt := range tests {
		if got := procState(tt.stat); got != tt.want {
			t.Errorf("procState(%q) = %q, want %q", tt.stat, got, tt.want)
		}
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
		{"a\n\n\n", 1, "a"},
	}
	for _, tt := range tests {
		if got := lastLines(tt.in, tt.n); got != tt.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestReadPIDAndAlive(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		want    int
	}{
		{"postmaster.pid", "4242\n/var/tmp/x/pg/data\n1700000000\n54329\n", 4242},
		{"kafka.pid", "77\n", 77},
		{"garbage", "abc\n", 0},
		{"negative", "-5\n", 0},
		{"empty", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := readPID(p); got != tt.want {
				t.Errorf("readPID = %d, want %d", got, tt.want)
			}
		})
	}
	if readPID(filepath.Join(dir, "missing")) != 0 {
		t.Error("readPID of a missing file is not 0")
	}
	if !alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if alive(0) || alive(-1) {
		t.Error("pid 0 or -1 alive")
	}
}

func TestWithLogs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "x.log")
	if err := os.WriteFile(log, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := errors.New("boom")
	err := withLogs(base, log, filepath.Join(dir, "missing.log"))
	if !errors.Is(err, base) {
		t.Errorf("withLogs lost the cause: %v", err)
	}
	want := "boom\n--- last lines of " + log + " ---\none\ntwo"
	if err.Error() != want {
		t.Errorf("withLogs = %q, want %q", err.Error(), want)
	}
}

// fakeInfo is a directory with a mode and an owner.
type fakeInfo struct {
	mode     fs.FileMode
	uid, gid uint32
}

func (f fakeInfo) Name() string       { return "" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return fs.ModeDir | f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return true }
func (f fakeInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid, Gid: f.gid} }

func TestUntraversable(t *testing.T) {
	const pgUID, pgGID = 101, 104
	tests := []struct {
		name string
		path string
		dirs map[string]fakeInfo
		uid  int
		want string
	}{
		{
			name: "var tmp",
			path: "/var/tmp/ef/pg",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}, "/var": {0o755, 0, 0}, "/var/tmp": {0o1777, 0, 0}, "/var/tmp/ef": {0o755, 0, 0}},
			uid:  pgUID,
		},
		{
			name: "root-only checkout",
			path: "/root/ef/pg",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}, "/root": {0o700, 0, 0}, "/root/ef": {0o755, 0, 0}},
			uid:  pgUID,
			want: "/root",
		},
		{
			name: "temp dir of a test",
			path: "/tmp/TestX1/001/pg",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}, "/tmp": {0o1777, 0, 0}, "/tmp/TestX1": {0o700, 0, 0}, "/tmp/TestX1/001": {0o700, 0, 0}},
			uid:  pgUID,
			want: "/tmp/TestX1/001",
		},
		{
			name: "owner bits apply to the owner",
			path: "/home/pg/state",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}, "/home": {0o755, 0, 0}, "/home/pg": {0o700, pgUID, pgGID}},
			uid:  pgUID,
		},
		{
			name: "group bits apply to the group",
			path: "/srv/state",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}, "/srv": {0o750, 0, pgGID}},
			uid:  pgUID,
		},
		{
			name: "missing parent",
			path: "/x/state",
			dirs: map[string]fakeInfo{"/": {0o755, 0, 0}},
			uid:  pgUID,
			want: "/x",
		},
		{
			name: "root traverses everything",
			path: "/root/ef/pg",
			dirs: map[string]fakeInfo{},
			uid:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stat := func(p string) (fs.FileInfo, error) {
				if fi, ok := tt.dirs[p]; ok {
					return fi, nil
				}
				return nil, fs.ErrNotExist
			}
			if got := untraversable(tt.path, tt.uid, pgGID, stat); got != tt.want {
				t.Errorf("untraversable = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckTopics(t *testing.T) {
	leader := &kafka.Node{ID: 1}
	parts := func(n int, withLeader bool) []kafka.TopicPartitionInfo {
		var ps []kafka.TopicPartitionInfo
		for i := range n {
			p := kafka.TopicPartitionInfo{Partition: i}
			if withLeader {
				p.Leader = leader
			}
			ps = append(ps, p)
		}
		return ps
	}
	ok := kafka.NewError(kafka.ErrNoError, "", false)
	want := []TopicSpec{{Name: "orders", Partitions: 3}}
	tests := []struct {
		name        string
		got         []kafka.TopicDescription
		wantPending bool
		wantErr     bool
	}{
		{"ready", []kafka.TopicDescription{{Name: "orders", Error: ok, Partitions: parts(3, true)}}, false, false},
		{"not described", nil, true, false},
		{"unknown yet", []kafka.TopicDescription{{Name: "orders", Error: kafka.NewError(kafka.ErrUnknownTopicOrPart, "unknown", false)}}, true, false},
		{"no leader yet", []kafka.TopicDescription{{Name: "orders", Error: ok, Partitions: parts(3, false)}}, true, false},
		{"too few partitions", []kafka.TopicDescription{{Name: "orders", Error: ok, Partitions: parts(2, true)}}, true, false},
		{"too many partitions", []kafka.TopicDescription{{Name: "orders", Error: ok, Partitions: parts(4, true)}}, false, true},
		{"authorization error", []kafka.TopicDescription{{Name: "orders", Error: kafka.NewError(kafka.ErrTopicAuthorizationFailed, "denied", false)}}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, err := checkTopics(want, tt.got)
			if (pending != "") != tt.wantPending || (err != nil) != tt.wantErr {
				t.Errorf("checkTopics = %q, %v; want pending %v, error %v", pending, err, tt.wantPending, tt.wantErr)
			}
		})
	}
}

// TestWaitStoppedWaitsForEveryThread: a process of several threads, frozen
// with SIGSTOP to its group as Pause does, counts as stopped only once all
// of its threads are; before the signal and after SIGCONT it does not.
func TestWaitStoppedWaitsForEveryThread(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 (a process of several threads): %v", err)
	}
	cmd := exec.Command(py, "-c", "import threading, time\n"+
		"for _ in range(4): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"+
		"time.sleep(60)\n")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = signalGroup(pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if len(tasks) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the helper has %d threads, want 5", len(tasks))
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := waitStopped(pid, 200*time.Millisecond); err == nil {
		t.Fatal("waitStopped succeeded on a process nobody stopped")
	}
	if err := signalGroup(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := runningThreads(pid); err != nil || n != 0 {
		t.Fatalf("after waitStopped: %d threads running (%v), want 0", n, err)
	}
	if err := signalGroup(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(pid, 200*time.Millisecond); err == nil {
		t.Fatal("waitStopped succeeded on a process resumed with SIGCONT")
	}

	// A process that is gone has no thread left to wait for.
	_ = signalGroup(pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if err := waitStopped(pid, time.Second); err != nil {
		t.Errorf("waitStopped on an exited process: %v", err)
	}
}
