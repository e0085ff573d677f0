package gap

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/slot"
)

// ErrRefused means a gap was found and the relay may not create a slot
// (--no-create-slot).
var ErrRefused = errors.New("replication slot gap")

// Prepare checks the slot against its checkpoint before a session, adopts a
// slot confirmed past the limit when every outbox row is published
// (adopt.go), recovers a gap, adopts a slot that has no checkpoint yet, loads the confirm limit
// from the checkpoint, and returns the slot as it is now and its
// generation (Checkpoint.Generation).
func (g *Guard) Prepare(ctx context.Context) (slot.State, string, error) {
	st, err := slot.Read(ctx, g.slots, g.cfg.Slot)
	if err != nil {
		return slot.State{}, "", err
	}
	if err := slot.CheckKind(g.slots, g.cfg.Slot, st); err != nil {
		return slot.State{}, "", err
	}
	cp, err := ReadCheckpoint(ctx, g.ctl, g.cfg.Checkpoints, g.cfg.Slot)
	if err != nil {
		return slot.State{}, "", err
	}
	reason := Reason(st, cp)
	if reason != "" {
		limit, adopted, err := g.adopt(ctx, st, cp)
		if err != nil {
			return slot.State{}, "", err
		}
		if adopted {
			reason, cp.Limit = "", limit
		}
	}
	switch {
	case reason != "" && g.cfg.NoCreateSlot && !st.Exists && !cp.Found:
		return slot.State{}, "", control.Permanentf("replication slot %q does not exist (and --no-create-slot is set); run `eventforge migrate`", g.cfg.Slot)
	case reason != "" && g.cfg.NoCreateSlot:
		// Not a reason to exit: the relay retries, and streams once a
		// relay without the flag has recovered the gap (docs/operations.md,
		// "A gap under --no-create-slot").
		g.m.Gap.Set(1)
		g.logger.Error("replication slot gap, and --no-create-slot is set: nothing is published until a reader without the flag recovers it",
			"reason", reason, "republish", describeFrom(cp.PublishedBelow))
		return slot.State{}, "", fmt.Errorf("%w: %s; --no-create-slot is set, so the reader does not recreate slot %q. Run one reader without --no-create-slot: it recreates the slot and republishes %s before it streams",
			ErrRefused, reason, g.cfg.Slot, describeFrom(cp.PublishedBelow))
	case reason != "":
		if st, cp, err = g.recoverAndReread(ctx, reason, st, cp); err != nil {
			return slot.State{}, "", err
		}
	case !cp.Found:
		limit, err := RaiseLimit(ctx, g.ctl, g.cfg.Checkpoints, g.cfg.Slot, st.Confirmed)
		if err != nil {
			return slot.State{}, "", err
		}
		cp.Limit = limit
		g.logger.Info("adopted the replication slot: no checkpoint existed; a later gap is recovered from this point on", "lsn", st.Confirmed.String())
	}
	g.m.Gap.Set(0)
	g.limit.Set(cp.Limit)
	return st, cp.Generation, nil
}

// recoverAndReread recovers the gap and reads the new slot and checkpoint.
func (g *Guard) recoverAndReread(ctx context.Context, reason string, st slot.State, cp Checkpoint) (slot.State, Checkpoint, error) {
	if err := g.recover(ctx, reason, st, cp); err != nil {
		return st, cp, err
	}
	st, err := slot.Read(ctx, g.slots, g.cfg.Slot)
	if err != nil {
		return st, cp, err
	}
	if !st.Exists {
		return st, cp, fmt.Errorf("%w: %s", slot.ErrMissing, g.cfg.Slot)
	}
	cp, err = ReadCheckpoint(ctx, g.ctl, g.cfg.Checkpoints, g.cfg.Slot)
	return st, cp, err
}
