package console

import (
	"context"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/verify"
)

// runDLQReplay: every commit of the fulfillment consumer fails until its
// attempts are exhausted and the event is dead-lettered; the fault is fixed
// (the consumer restarts without it) and the DLQ record is replayed with its
// event ID: one change. Should it fail before the fix, the runner restarts
// the consumer without the failpoint (drillRunner.disarm).
func runDLQReplay(ctx context.Context, d *drillRun) error {
	c := d.c
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := c.armAndWait(ctx, componentDrilled, fpCommitRejected, f)
		return err
	}); err != nil {
		return err
	}
	if err := d.orderStep(ctx, "drill-dlq"); err != nil {
		return err
	}
	var entry dlq.Entry
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		err := c.waitFor(ctx, waitDeadLettered, func() (bool, error) {
			rs, err := c.dlqEntries(ctx)
			if err != nil {
				return false, err
			}
			for _, r := range rs {
				if r.EventID == d.EventID && r.Consumer == drilledConsumer {
					entry = r.Entry
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		f["dlq_position"], f["attempts"], f["error_class"], f["error_message"] = entry.Position(), entry.Attempts, entry.Class, entry.Message
		return nil
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if err := c.procs.Restart(ctx, componentDrilled, ""); err != nil {
			return err
		}
		comp, _ := c.component(componentDrilled)
		f["pid"] = comp.PID
		n, _, err := verify.OrderChanges(ctx, c.pool, drilledConsumer, d.OrderID)
		f["business_changes"] = n
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		pos, err := c.replay(ctx, entry.Partition, entry.Offset)
		f["replayed"] = pos
		return err
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.waitSettled(ctx, d.OrderID, waitSettled, func(r *verify.OrderReport) bool {
			return r.Deliveries >= 2 && r.BusinessChanges[drilledConsumer] >= 1
		})
		if err != nil {
			return err
		}
		// Delivered once and dead-lettered, then once more as the replay.
		d.setCounters(countersOf(rep, 2))
		f["records"] = rep.Records
		return nil
	})
}
