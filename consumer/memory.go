package consumer

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// memoryBase is the Go memory a consumer needs beside its queued records:
// the runtime, the Kafka and PostgreSQL clients' buffers, the batches being
// applied and the collector's headroom.
const memoryBase = 24 << 20

// memoryLimiter returns the consumer's OnAssignment: it keeps Go's soft
// memory limit at memoryBase plus queueBytes per assigned partition, the
// most that the partitions' queues may hold (--queue-bytes). The records a
// consumer buffers are short-lived and its live heap is otherwise a few
// MiB, so with Go's default target alone the heap grew to about twice the
// queued bytes before a collection; with the limit it is collected before
// it passes what the queues may hold. The limit is soft: a heap that needs
// more (records larger than the estimate) gets it, at the cost of more
// frequent collections. GOMEMLIMIT, when set, always wins: it returns nil.
func memoryLimiter(queueBytes int, logger *slog.Logger) func(partitions int) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		logger.Debug("GOMEMLIMIT set by the environment", "gomemlimit", v)
		return nil
	}
	return func(partitions int) {
		limit := int64(memoryBase) + int64(max(partitions, 1))*int64(queueBytes)
		debug.SetMemoryLimit(limit)
		logger.Debug("go memory limit", "partitions", partitions, "limit_bytes", limit)
	}
}
