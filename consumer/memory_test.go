package consumer

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

func TestMemoryLimitFollowsTheAssignedPartitions(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })

	t.Setenv("GOMEMLIMIT", "1GiB")
	if memoryLimiter(4<<20, logger) != nil {
		t.Fatal("with GOMEMLIMIT set, the consumer must leave the memory limit to it")
	}

	if err := os.Unsetenv("GOMEMLIMIT"); err != nil { // t.Setenv restores it
		t.Fatal(err)
	}
	onAssignment := memoryLimiter(4<<20, logger)
	for _, c := range []struct {
		partitions int
		want       int64
	}{
		{6, memoryBase + 6*4<<20},
		{12, memoryBase + 12*4<<20},
		{0, memoryBase + 4<<20}, // all revoked: room for the next assignment's first partition
	} {
		onAssignment(c.partitions)
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("%d partitions: memory limit %d, want %d", c.partitions, got, c.want)
		}
	}
}
