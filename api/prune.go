package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/eventforge/eventforge/api/store"
)

// pruneBatch is how many expired idempotency keys one DELETE removes.
const pruneBatch = 1000

// pruneKeys deletes idempotency keys older than window every interval until
// ctx ends. Several api processes may prune at once: DELETE is idempotent.
func pruneKeys(ctx context.Context, st *store.Store, window, interval time.Duration, logger *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := st.PruneIdempotencyKeys(ctx, window, pruneBatch)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("pruning idempotency keys", "err", err)
		case n > 0:
			logger.Info("idempotency keys pruned", "deleted", n, "window", window)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
