// Package filelock serialises processes on a lock file: the local stack's
// state directory and the PostgreSQL binary cache each have one.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// Lock takes an exclusive flock(2) on path, waiting until ctx is done; while
// it waits it logs once that it waits for the what lock. The lock belongs to
// the open file description, so it excludes other processes and other
// callers in this process alike, and is released when the process dies. Go
// opens files close-on-exec, so started services never inherit it.
func Lock(ctx context.Context, path, what string, log *slog.Logger) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !waiting {
			log.Info("waiting for "+what+" lock", "lock_file", path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
