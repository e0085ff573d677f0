package retention

import (
	"context"
	"log/slog"
	"time"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
)

// Config is what the checkpoint and retention loop needs of the relay's
// configuration.
type Config struct {
	Slot        string
	Outbox      outbox.Table
	Checkpoints outbox.Table
	// CheckpointInterval is how often published_below is recorded.
	CheckpointInterval time.Duration
	// Retention is how long outbox rows are kept; 0 keeps them.
	Retention time.Duration
	// PruneInterval is how often the outbox is pruned.
	PruneInterval time.Duration
	// PruneBatch is the number of rows deleted per statement.
	PruneBatch int
}

// Keeper records the checkpoint and prunes the outbox during one
// leadership.
type Keeper struct {
	cfg    Config
	ctl    *control.Conn
	prog   *progress.Progress
	logger *slog.Logger
}

// NewKeeper returns the keeper of one leadership: it works on ctl, and
// counts as published only what prog says this process confirmed.
func NewKeeper(cfg Config, ctl *control.Conn, prog *progress.Progress, logger *slog.Logger) *Keeper {
	return &Keeper{cfg: cfg, ctl: ctl, prog: prog, logger: logger}
}

// Run runs while this process leads, until ctx ends. Every
// CheckpointInterval it takes a mark and records, as the checkpoint's
// published_below, the xmin of the newest mark this process has confirmed
// to its slot (package gap); every
// PruneInterval, when retention is on, it deletes the rows past the
// retention that the same mark covers. Only positions this process
// confirmed count, never the slot's own: a slot recreated meanwhile is
// confirmed past rows nobody published. Nothing is pruned while no session
// streams or while the producer is stalled (events waited a whole prune
// interval for an acknowledgement).
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.cfg.CheckpointInterval)
	defer t.Stop()
	var (
		marks     []pruneMark
		covered   pruneMark
		hasMark   bool
		lastPrune = time.Now()
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, ok, err := k.round(ctx, &marks)
		if err != nil {
			if ctx.Err() == nil {
				k.logger.Warn("recording the slot checkpoint", "err", err)
			}
			continue
		}
		if ok {
			covered, hasMark = m, true
		}
		if k.cfg.Retention <= 0 || time.Since(lastPrune) < k.cfg.PruneInterval {
			continue
		}
		lastPrune = time.Now()
		switch {
		case !k.prog.Publishing(time.Now(), k.cfg.PruneInterval):
			k.logger.Debug("outbox pruning paused: not publishing")
			continue
		case !hasMark:
			k.logger.Debug("outbox pruning waits for the slot")
			continue
		}
		n, err := pruneOutbox(ctx, k.ctl, k.cfg.Outbox, k.cfg.Retention, k.cfg.PruneBatch, covered)
		switch {
		case err != nil && ctx.Err() == nil:
			k.logger.Warn("pruning outbox", "err", err)
		case n > 0:
			k.logger.Info("outbox pruned", "rows", n, "retention", k.cfg.Retention)
		}
	}
}

// round records the newest mark this process confirmed, takes a
// new one, and returns the recorded mark (false when none is confirmed yet).
func (k *Keeper) round(ctx context.Context, marks *[]pruneMark) (pruneMark, bool, error) {
	mark, ok, rest := confirmedMark(*marks, k.prog.Sent())
	*marks = rest
	if ok {
		if err := gap.RecordPublishedBelow(ctx, k.ctl, k.cfg.Checkpoints, k.cfg.Slot, mark.xmin, mark.at); err != nil {
			return pruneMark{}, false, err
		}
	}
	if len(*marks) < maxPruneMarks {
		m, err := takePruneMark(ctx, k.ctl)
		if err != nil {
			return mark, ok, err
		}
		*marks = append(*marks, m)
	}
	return mark, ok, nil
}
