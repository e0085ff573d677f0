package console

import (
	"context"
	"time"

	"github.com/eventforge/eventforge/verify"
)

// runConcurrentDuplicate: two instances of the fulfillment consumer (the
// group's member and a second instance in its own group, like a replay
// racing the original) apply the same event at the same time; the first
// holds its transaction open for 3 s, the second blocks on the mark's unique
// key and then finds it: one mark, one change.
func runConcurrentDuplicate(ctx context.Context, d *drillRun) error {
	c := d.c
	group := c.cfg.Consumers[drilledConsumer]
	racer := group + "-drill-" + d.ID
	var stopRacer func()
	defer func() {
		if stopRacer != nil {
			stopRacer()
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := c.admin.DeleteConsumerGroups(dctx, []string{racer}); err != nil {
			c.logger.Warn("deleting drill group", "group", racer, "err", err)
		}
	}()
	if err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		if _, err := c.armAndWait(ctx, componentDrilled, fpHoldCommit, f); err != nil {
			return err
		}
		if err := c.positionAtEnd(ctx, racer); err != nil {
			return err
		}
		var err error
		stopRacer, err = c.procs.StartExtra(ctx, componentDrilled, []string{"--group", racer}, fpHoldCommit)
		if err != nil {
			return err
		}
		f["second_group"] = racer
		return c.waitFor(ctx, waitPartitions, func() (bool, error) {
			a, err := c.ownsPartitions(ctx, group)
			if err != nil || !a {
				return false, err
			}
			return c.ownsPartitions(ctx, racer)
		})
	}); err != nil {
		return err
	}
	if err := d.orderStep(ctx, "drill-concurrent"); err != nil {
		return err
	}
	if _, err := d.settledStep(ctx, c, waitSettled, func(ctx context.Context, f map[string]any, rep *verify.OrderReport) error {
		return c.waitFor(ctx, waitSecondCommit, func() (bool, error) {
			passed, err := c.groupPassed(ctx, racer, rep.Records)
			f["second_group_committed"] = passed
			return passed, err
		})
	}); err != nil {
		return err
	}
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		rep, err := c.auditOrder(ctx, d.OrderID)
		if err != nil {
			return err
		}
		d.setCounters(countersOf(rep, 2))
		f["marks"] = rep.Marks[drilledConsumer]
		return nil
	})
}
