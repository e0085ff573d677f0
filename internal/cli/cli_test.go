package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestExit(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		line string
	}{
		{"success", nil, 0, ""},
		{"stopped by a signal", context.Canceled, 0, ""},
		{"stopped while running a step", fmt.Errorf("running cdc: %w", context.Canceled), 0, ""},
		{"failure", errors.New("connecting to postgres: refused"), 1, "eventforge: connecting to postgres: refused\n"},
		{"deadline is a failure", fmt.Errorf("waiting: %w", context.DeadlineExceeded), 1, "eventforge: waiting: context deadline exceeded\n"},
		{"usage error", &UsageError{Command: "eventforge dlq replay", Err: errors.New("say what to replay")}, 2,
			"eventforge: say what to replay; see 'eventforge dlq replay --help'\n"},
		{"usage error of several lines", fmt.Errorf("parsing: %w", &UsageError{Command: "eventforge cdc", Err: errors.Join(errors.New("a: bad"), errors.New("b: worse"))}), 2,
			"eventforge: a: bad b: worse; see 'eventforge cdc --help'\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if code := exit(&b, "eventforge", tt.err); code != tt.code {
				t.Errorf("exit status %d, want %d", code, tt.code)
			}
			if b.String() != tt.line {
				t.Errorf("stderr %q, want %q", b.String(), tt.line)
			}
		})
	}
}

// mainHelperEnv makes the test binary run Main with a failing command
// instead of the tests (see TestMainExitsWithStatus1).
const mainHelperEnv = "EVENTFORGE_CLI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainHelperEnv) != "" {
		Main("eventforge-test", func() error { return errors.New("applying: boom") })
		os.Exit(0) // Main returned: the error was taken for a clean stop
	}
	os.Exit(m.Run())
}

func TestMainExitsWithStatus1(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), mainHelperEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("process ended with %v, want exit status 1", err)
	}
	if got, want := stderr.String(), "eventforge-test: applying: boom\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestStopContextCancelledBySIGTERM(t *testing.T) {
	ctx, stop := StopContext()
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("context not cancelled 30 s after SIGTERM")
	}
}
