package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
	"github.com/eventforge/eventforge/verify"
)

func countersOf(rep *verify.OrderReport, consumerDeliveries int) Counters {
	return Counters{
		LogicalEvents: rep.LogicalEvents, Deliveries: rep.Deliveries, ConsumerDeliveries: consumerDeliveries,
		Marks: rep.Marks[drilledConsumer], BusinessChanges: rep.BusinessChanges[drilledConsumer], DeadLettered: rep.DeadLettered[drilledConsumer],
	}
}

func (c *Console) component(name string) (Component, bool) {
	for _, comp := range c.procs.Components() {
		if comp.Name == name {
			return comp, true
		}
	}
	return Component{}, false
}

// armAndWait restarts component with failpoints and waits until it runs.
func (c *Console) armAndWait(ctx context.Context, name, failpoints string, f map[string]any) (Component, error) {
	if _, ok := c.component(name); !ok {
		return Component{}, fmt.Errorf("the supervisor runs no component %q", name)
	}
	if err := c.procs.Restart(ctx, name, failpoints); err != nil {
		return Component{}, err
	}
	var comp Component
	err := c.waitFor(ctx, waitRunning, func() (bool, error) {
		comp, _ = c.component(name)
		return comp.Running, nil
	})
	f["component"], f["pid"], f["failpoints"] = name, comp.PID, failpoints
	return comp, err
}

// waitCrash waits until component's process died (SIGKILL from its
// failpoint) and the supervisor started the next one.
func (c *Console) waitCrash(ctx context.Context, name string, startsBefore int, f map[string]any) (Component, error) {
	var comp Component
	err := c.waitFor(ctx, waitRestarted, func() (bool, error) {
		comp, _ = c.component(name)
		return comp.Starts > startsBefore && comp.Running, nil
	})
	f["last_exit"] = map[string]any{"last_exit": comp.LastExit, "last_exit_code": comp.LastExitCode, "last_exit_signal": comp.LastExitSignal}
	f["starts"] = comp.Starts
	return comp, err
}

func (c *Console) waitSlotHeld(ctx context.Context) error {
	return c.waitFor(ctx, waitSlotHeld, func() (bool, error) {
		st, err := schema.ReadSlotStatus(ctx, c.pool, c.cfg.Slot)
		if errors.Is(err, schema.ErrSlotNotFound) {
			return false, nil
		}
		return st.Active, err
	})
}

// orderStep is the stage that creates the drill's order for customer.
func (d *drillRun) orderStep(ctx context.Context, customer string) error {
	return d.step(ctx, func(ctx context.Context, f map[string]any) error {
		_, err := d.createOrder(ctx, customer, f)
		return err
	})
}

// createOrder creates a real order through the server's own REST gateway
// and returns the WAL position right after its commit.
func (d *drillRun) createOrder(ctx context.Context, customer string, f map[string]any) (string, error) {
	body := fmt.Sprintf(`{"customer_id":%q,"currency":"EUR","items":[{"sku":"DRILL-1","quantity":1,"unit_price_cents":1000}]}`, customer)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.baseURL+"/v1/orders", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("creating the drill's order: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("creating the drill's order: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var out struct {
		Order struct {
			OrderID string `json:"order_id"`
		} `json:"order"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Order.OrderID == "" || out.EventID == "" {
		return "", fmt.Errorf("creating the drill's order: unexpected answer %s", raw)
	}
	lsn, err := d.c.commits.lookup(out.Order.OrderID, func() (pglogrepl.LSN, error) { return d.c.currentWAL(ctx) })
	if err != nil {
		return "", err
	}
	d.setOrder(out.Order.OrderID, out.EventID)
	f["order_id"], f["event_id"], f["commit_lsn"] = out.Order.OrderID, out.EventID, lsn.String()
	return lsn.String(), nil
}

// orderRecords lists the order's records in the topic.
func (c *Console) orderRecords(ctx context.Context, orderID string) ([]traceRecord, error) {
	recs, err := c.readSince(ctx, c.cfg.Topic, time.Now().Add(-10*time.Minute), 50000, func(r kafkaread.Record) bool { return r.Key == orderID })
	if err != nil {
		return nil, err
	}
	out := make([]traceRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, traceRecord{Topic: c.cfg.Topic, Partition: r.Partition, Offset: r.Offset, EventID: r.Headers[contract.HeaderID], Type: r.Headers[contract.HeaderType], Timestamp: r.Timestamp, Replay: isReplay(r.Headers)})
	}
	return out, nil
}

// verifyConfig is the auditor's view of the console's pipeline: only the
// consumers the auditor knows.
func (c *Console) verifyConfig() verify.Config {
	cfg := verify.DefaultConfig()
	cfg.DatabaseURL, cfg.KafkaBrokers, cfg.Topic = c.cfg.DatabaseURL, c.cfg.KafkaBrokers, c.cfg.Topic
	cfg.DLQTopic, cfg.Slot, cfg.Consumers = c.cfg.dlqTopic(), c.cfg.Slot, map[string]string{}
	for name, group := range c.cfg.Consumers {
		one := cfg
		one.Consumers = map[string]string{name: group}
		if one.Validate() == nil {
			cfg.Consumers[name] = group
		}
	}
	return cfg
}

func (c *Console) auditOrder(ctx context.Context, orderID string) (*verify.OrderReport, error) {
	return verify.AuditOrder(ctx, c.verifyConfig(), orderID)
}

// settledStep is the step that waits until the drill's order is settled
// (waitSettled, telling the stage it waits for id) and then runs then with
// its report; it returns the report.
func (d *drillRun) settledStep(ctx context.Context, c *Console, id waitID, then func(ctx context.Context, facts map[string]any, rep *verify.OrderReport) error) (*verify.OrderReport, error) {
	var rep *verify.OrderReport
	err := d.step(ctx, func(ctx context.Context, f map[string]any) error {
		var err error
		if rep, err = c.waitSettled(ctx, d.OrderID, id, nil); err != nil {
			return err
		}
		return then(ctx, f, rep)
	})
	return rep, err
}

// waitSettled waits until every audited group committed past the order's
// records, the fulfillment consumer applied it, and extra (if not nil)
// holds, telling the stage it waits for id.
func (c *Console) waitSettled(ctx context.Context, orderID string, id waitID, extra func(*verify.OrderReport) bool) (*verify.OrderReport, error) {
	var rep *verify.OrderReport
	err := c.waitFor(ctx, id, func() (bool, error) {
		var err error
		rep, err = c.auditOrder(ctx, orderID)
		if err != nil {
			return false, err
		}
		for _, ok := range rep.Committed {
			if !ok {
				return false, nil
			}
		}
		if rep.BusinessChanges[drilledConsumer] < 1 {
			return false, nil
		}
		return extra == nil || extra(rep), nil
	})
	return rep, err
}

// positionAtEnd commits group's offsets at the topic's end offsets, so a
// new instance in that group starts with the next record.
func (c *Console) positionAtEnd(ctx context.Context, group string) error {
	ends, err := c.kafka.EndOffsets(c.cfg.Topic)
	if err != nil {
		return err
	}
	topic := c.cfg.Topic
	tps := make([]kafka.TopicPartition, 0, len(ends))
	for p, end := range ends {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(end)})
	}
	_, err = c.admin.AlterConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group, Partitions: tps}})
	if err != nil {
		return fmt.Errorf("positioning group %s at the end of %s: %w", group, topic, err)
	}
	return nil
}

// ownsPartitions reports whether group's members own every partition of the
// topic.
func (c *Console) ownsPartitions(ctx context.Context, group string) (bool, error) {
	ends, err := c.kafka.EndOffsets(c.cfg.Topic)
	if err != nil {
		return false, err
	}
	ms, err := c.members(ctx, group, c.cfg.Topic)
	if err != nil {
		return false, err
	}
	owned := map[int32]bool{}
	for _, m := range ms {
		for _, p := range m.Partitions {
			owned[p] = true
		}
	}
	return len(owned) == len(ends), nil
}

func (c *Console) groupPassed(ctx context.Context, group string, recs []verify.OrderRecord) (bool, error) {
	if len(recs) == 0 {
		return false, nil
	}
	parts := []int32{}
	for _, r := range recs {
		parts = append(parts, r.Partition)
	}
	committed, err := c.committed(ctx, group, c.cfg.Topic, parts)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if committed[r.Partition] <= r.Offset {
			return false, nil
		}
	}
	return true, nil
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
