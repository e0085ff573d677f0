// Package cli is the process shell EventForge's binaries share: the signals
// that stop a command, and the exit status and error line a command ends
// with.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// StopContext returns a context cancelled when the process receives SIGINT
// or SIGTERM, the signals that stop a command gracefully. Calling stop
// restores the default handling, so a later signal ends the process at once.
func StopContext() (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Main runs run and ends the process by its result. A nil error, or one that
// is context.Canceled (a command stopped by StopContext's signals), returns
// and the process exits with status 0; a *UsageError is printed as one line
// "name: problem; see '<command> --help'" on stderr and the process exits
// with ExitUsage (2); any other error is printed as "name: error" and the
// process exits with status 1.
func Main(name string, run func() error) {
	if code := exit(os.Stderr, name, run()); code != 0 {
		os.Exit(code)
	}
}

// exit prints err for name on w unless it is a clean stop, and returns the
// exit status.
func exit(w io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, context.Canceled) {
		return 0
	}
	if ue, ok := errors.AsType[*UsageError](err); ok {
		fmt.Fprintln(w, name+":", ue.line())
		return ExitUsage
	}
	fmt.Fprintln(w, name+":", err)
	return 1
}
