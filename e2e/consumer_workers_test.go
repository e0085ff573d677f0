package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestConsumerRetryingPartitionsDoNotStallOthers: one fulfillment process
// with --workers 4 owns all 6 partitions. Partitions 0–3 each start with an
// event whose order does not exist yet, retried for the whole test (a long
// --not-found-grace). The other two partitions keep applying while those
// four retry: their orders are processed (durable rows) while partitions
// 0–3 have committed nothing and nothing is dead-lettered. Once the missing
// orders exist, their events are applied too, each once.
func TestConsumerRetryingPartitionsDoNotStallOthers(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	ep := newEventProducer(t, pl)
	var ghosts []seededOrder
	var ghostEvents []orderEvent
	for p := range int32(4) {
		o := seededOrder{id: uuid.NewString(), customer: "c-late", total: 3998}
		ev := createdEvent(o)
		ev.partition = p
		ghosts, ghostEvents = append(ghosts, o), append(ghostEvents, ev)
	}
	ep.send(t, ghostEvents...)

	cons, addr := consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil,
		"--workers", "4", "--max-conns", "4", "--max-attempts", "2", "--not-found-grace", "10m", "--batch-size", "10")
	testenv.Eventually(t, 60*time.Second, "partitions 0-3 retrying", func() error {
		got := retryingPartitions(t, cons)
		for p := range 4 {
			if !got[p] {
				return fmt.Errorf("retrying partitions %v, want 0-3", got)
			}
		}
		return nil
	})

	const n = 120
	healthy := seedOrders(t, pl, n, 4)
	var evs []orderEvent
	for i, o := range healthy {
		ev := createdEvent(o)
		ev.partition = int32(4 + i%2)
		evs = append(evs, ev)
	}
	ep.send(t, evs...)
	testenv.Eventually(t, 90*time.Second, "partitions 4 and 5 applied while 0-3 retry", func() error {
		states := fulfillmentStates(t, pl)
		done := 0
		for _, o := range healthy {
			if s := states[o.id]; s.status == "processed" && s.shipments == 1 {
				done++
			}
		}
		if done != n {
			return fmt.Errorf("%d of %d orders of partitions 4 and 5 processed", done, n)
		}
		return nil
	})

	// The four are still retrying: nothing of theirs committed, applied or
	// dead-lettered, and their attempts go on.
	committed, _, err := testenv.CommittedOffsets(pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		if committed[p] != 0 {
			t.Fatalf("partition %d committed %d while its first event could not be applied", p, committed[p])
		}
	}
	retries := mustMetrics(t, addr).value("eventforge_consumer_retries_total", "consumer", "fulfillment")
	testenv.Eventually(t, 30*time.Second, "partitions 0-3 still retrying", func() error {
		m, err := scrapeMetrics(addr)
		if err != nil {
			return err
		}
		if r := m.value("eventforge_consumer_retries_total", "consumer", "fulfillment"); r < retries+8 {
			return fmt.Errorf("retries_total %v, was %v", r, retries)
		}
		return nil
	})
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		t.Fatalf("DLQ holds %d records while the four partitions retry", len(es))
	}

	// The missing orders appear: the retries succeed.
	ctx := context.Background()
	for _, o := range ghosts {
		if _, err := pl.env.Pool.Exec(ctx, `WITH o AS (
				INSERT INTO orders (id, customer_id, currency, total_cents, status) VALUES ($1, $2, 'EUR', $3, 'created') RETURNING id
			) INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price_cents) SELECT id, 1, 'SKU-1', 2, 1999 FROM o`,
			o.id, o.customer, o.total); err != nil {
			t.Fatal(err)
		}
	}
	waitGroupAtEnd(t, pl, pl.env.Group, 90*time.Second)

	c := checker{t: t}
	states := fulfillmentStates(t, pl)
	for _, o := range append(ghosts, healthy...) {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: status %q, %d shipments; want processed with one shipment", o.id, s.status, s.shipments)
		}
	}
	if m := marks(t, pl, "fulfillment"); m != n+len(ghosts) {
		c.errorf("%d marks, want %d", m, n+len(ghosts))
	}
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		c.errorf("DLQ holds %d records, want none", len(es))
	}
	c.report()
}

// retryingPartitions returns the partitions for which p logged a retry.
// It only tells when to go on; the assertions are on durable rows.
func retryingPartitions(t testing.TB, p *proc) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for _, l := range readLog(t, p.Log) {
		if part, ok := l.Fields["partition"].(float64); ok && l.Msg == "event not applied; retrying" {
			out[int(part)] = true
		}
	}
	return out
}
