package console

import (
	"context"

	"github.com/eventforge/eventforge/verify"
)

// runRelayCrash: the relay dies after Kafka acknowledged the event and
// before it confirmed the LSN; the restarted relay republishes it and the
// consumer skips the duplicate. Expected: 1 logical event, 2 deliveries, 1
// business change.
func runRelayCrash(ctx context.Context, d *drillRun) error {
	c := d.c
	var before Component
	err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		before, err = c.armAndWait(ctx, componentCDC, fpRelayCrash, f)
		if err != nil {
			return err
		}
		return c.waitSlotHeld(ctx)
	})
	if err != nil {
		return err
	}
	var commit string
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		commit, err = d.createOrder(ctx, "drill-relay-crash", f)
		return err
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		comp, err := c.waitCrash(ctx, componentCDC, before.Starts, f)
		if err != nil {
			return err
		}
		recs, err := c.orderRecords(ctx, d.OrderID)
		if err != nil {
			return err
		}
		f["records"] = recs
		f["commit_lsn"] = commit
		f["restarted_pid"] = comp.PID
		return nil
	}); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		return c.waitFor(ctx, waitRepublished, func() (bool, error) {
			recs, err := c.orderRecords(ctx, d.OrderID)
			if err != nil {
				return false, err
			}
			f["records"] = recs
			return len(recs) >= 2, nil
		})
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.waitSettled(ctx, d.OrderID, waitSettled, func(r *verify.OrderReport) bool { return r.Deliveries >= 2 })
		if err != nil {
			return err
		}
		// The consumer committed past both records: it was handed both.
		d.setCounters(countersOf(rep, rep.Deliveries))
		f["committed"] = rep.Committed
		return nil
	})
}
