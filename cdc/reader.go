package cdc

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// errPermanent marks errors that reconnecting cannot fix (configuration,
// schema); Run returns them instead of retrying.
type errPermanent struct{ err error }

func (e errPermanent) Error() string { return e.err.Error() }
func (e errPermanent) Unwrap() error { return e.err }

func permanent(format string, args ...any) error {
	return errPermanent{fmt.Errorf(format, args...)}
}

// Run reads the slot until ctx is cancelled.
//
// Several processes may run for one slot: a PostgreSQL advisory lock, held
// by each process's control connection, lets exactly one of them publish; the
// others wait as standbys and take over when the lock and the slot are free.
//
// Connection losses (PostgreSQL or Kafka) end the current session; Run then
// reconnects with backoff and resumes from the slot's confirmed position,
// republishing anything that was not confirmed. It returns nil after a clean
// shutdown, or an error that reconnecting cannot fix.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	return RunHealth(ctx, cfg, logger, &Health{})
}

// RunHealth is Run reporting the reader's readiness to h (served as /readyz
// by `eventforge cdc`).
func RunHealth(ctx context.Context, cfg Config, logger *slog.Logger, h *Health) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid cdc config: %w", err)
	}
	ns, table, _ := strings.Cut(cfg.OutboxTable, ".")
	nonce := make([]byte, 6)
	_, _ = crand.Read(nonce)
	r := &reader{
		cfg:         cfg,
		logger:      logger.With("slot", cfg.Slot),
		m:           newSlotMetrics(cfg.Slot),
		prog:        &progress{},
		hb:          &heartbeats{},
		nonce:       hex.EncodeToString(nonce),
		table:       pgx.Identifier{ns, table},
		dlq:         pgx.Identifier(strings.SplitN(cfg.DeadLetterTable, ".", 2)),
		health:      h,
		limit:       newConfirmLimit(),
		checkpoints: pgx.Identifier(strings.SplitN(cfg.CheckpointTable, ".", 2)),
	}
	defer r.m.active.Set(0)
	bo := backoff{max: cfg.MaxBackoff}
	for {
		started := time.Now()
		err := r.runControl(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return err
		}
		r.health.report(fmt.Errorf("reconnecting: %w", err))
		wait := bo.next(time.Since(started))
		r.logger.Warn("cdc connection ended; reconnecting", "err", err, "backoff", wait)
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// reader is one process's state across control connections and sessions.
type reader struct {
	cfg    Config
	logger *slog.Logger
	m      *slotMetrics
	prog   *progress
	hb     *heartbeats
	nonce  string         // tells this process's heartbeats from others'
	table  pgx.Identifier // the outbox table
	dlq    pgx.Identifier // the dead-letter table
	// checkpoints is the checkpoint table (gap.go).
	checkpoints pgx.Identifier
	// limit is the checkpoint's confirm limit: sessions confirm no further.
	limit *confirmLimit
	// sent is the position this process last confirmed to its slot; the
	// checkpoint loop counts only marks at or before it.
	sent atomic.Uint64
	// suspects failed permanently in a batch; the next session produces
	// each alone (deadletter.go).
	suspects suspects
	health   *Health
	// holdOff is when a reader that gave up the lead because it could not
	// publish may compete for it again (health.go).
	holdOff time.Time
}
