package console

import (
	"context"
	"fmt"

	"github.com/eventforge/eventforge/verify"
)

// runConsumerCrash: the consumer dies after its DB commit and before the
// offset commit; the restarted member gets the event again and skips it.
func runConsumerCrash(ctx context.Context, d *drillRun) error {
	c := d.c
	var before Component
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		before, err = c.armAndWait(ctx, componentDrilled, fpConsumerCrash, f)
		return err
	}); err != nil {
		return err
	}
	if err := d.orderStep(ctx, "drill-consumer-crash"); err != nil {
		return err
	}
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if _, err := c.waitCrash(ctx, componentDrilled, before.Starts, f); err != nil {
			return err
		}
		rep, err := c.auditOrder(ctx, d.OrderID)
		if err != nil {
			return err
		}
		f["marks"] = rep.Marks[drilledConsumer]
		f["offset_committed"] = rep.Committed[drilledConsumer]
		if rep.Marks[drilledConsumer] != 1 || rep.Committed[drilledConsumer] {
			return fmt.Errorf("after the crash: %d marks, offset committed %v; want the mark committed and the offset not", rep.Marks[drilledConsumer], rep.Committed[drilledConsumer])
		}
		return nil
	}); err != nil {
		return err
	}
	rep, err := d.settledStep(ctx, c, waitSession, func(_ context.Context, f map[string]any, rep *verify.OrderReport) error {
		f["offset_committed"] = true
		f["records"] = rep.Records
		return nil
	})
	if err != nil {
		return err
	}
	return d.step(ctx, func(_ context.Context, f map[string]any) error {
		// Delivered once before the crash (its mark committed while the
		// offset stayed behind it) and once after the restart (the offset
		// then passed it): two deliveries to the consumer.
		d.setCounters(countersOf(rep, 2))
		f["marks"] = rep.Marks[drilledConsumer]
		return nil
	})
}
