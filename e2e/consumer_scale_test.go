package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/uuid"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// groupAssignment returns the number of partitions each member of group
// owns.
func groupAssignment(bootstrap, group string) ([]int, error) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 3})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := a.DescribeConsumerGroups(ctx, []string{group})
	if err != nil {
		return nil, err
	}
	var out []int
	for _, d := range res.ConsumerGroupDescriptions {
		if d.State != kafka.ConsumerGroupStateStable {
			return nil, fmt.Errorf("group %s is %s", group, d.State)
		}
		for _, m := range d.Members {
			out = append(out, len(m.Assignment.TopicPartitions))
		}
	}
	return out, nil
}

// windowConcurrentDuplicate: two running instances of the fulfillment
// consumer (one group, three partitions each) receive the same event at
// the same time — it is in every partition, as a replay racing the original
// would be. Every transaction holds its mark for a second before COMMIT, so
// the deliveries overlap. One processed_events row, one effect, no error;
// the losers count duplicates, at least one of them an idempotency
// conflict.
func windowConcurrentDuplicate(t *testing.T) {
	pl := newPipeline(t)
	dlqTopicOf(t, pl)
	o := seedOrders(t, pl, 1, 1)[0]
	slow := []string{"EVENTFORGE_FAILPOINTS=" + failpoint.ConsumerBeforeDBCommit + "=delay(1500ms)"}
	a, addrA := consumerProc(t, pl, "fulfillment-a", "fulfillment", pl.env.Group, slow)
	b, addrB := consumerProc(t, pl, "fulfillment-b", "fulfillment", pl.env.Group, slow)
	testenv.Eventually(t, 60*time.Second, "two members with three partitions each", func() error {
		got, err := groupAssignment(pl.env.Endpoints.KafkaBootstrap, pl.env.Group)
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0] != 3 || got[1] != 3 {
			return fmt.Errorf("assignment %v", got)
		}
		return nil
	})

	ev := createdEvent(o)
	var copies []orderEvent
	for p := range int32(6) {
		c := ev
		c.partition = p
		copies = append(copies, c)
	}
	newEventProducer(t, pl).send(t, copies...)
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)

	if d := readDurable(t, pl, o.id, ev.id); d.marks != 1 || d.shipments != 1 || d.status != "processed" {
		t.Fatalf("order %s: status %q, marks %d, shipments %d; want processed/1/1", o.id, d.status, d.marks, d.shipments)
	}
	var applied, dup, conflicts, dead float64
	for _, addr := range []string{addrA, addrB} {
		m := mustMetrics(t, addr)
		applied += events(m, "fulfillment", "applied") + events(m, "fulfillment", "retried")
		dup += events(m, "fulfillment", "duplicate")
		dead += events(m, "fulfillment", "dead_lettered")
		conflicts += m.value("eventforge_consumer_idempotency_conflicts_total", "consumer", "fulfillment")
	}
	if applied != 1 || dup != 5 || dead != 0 {
		t.Errorf("over both instances: applied %v, duplicate %v, dead_lettered %v; want 1, 5, 0", applied, dup, dead)
	}
	if conflicts < 1 {
		t.Errorf("idempotency conflicts %v: the deliveries did not overlap", conflicts)
	}
	noErrorLines(t, a, b)
	verifyDuplicatesPlanted(t, pl)
}

// windowRebalance: while events arrive, the fulfillment
// consumer scales from one instance to three and back to one (SIGTERM).
// Every order is processed once — one mark, one shipment — and the group's
// offsets reach the end.
func windowRebalance(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	const n = 3000
	orders := seedOrders(t, pl, n, 20)
	ep := newEventProducer(t, pl)

	var wg sync.WaitGroup
	produced := make(chan struct{})
	wg.Go(func() { // about 150 events/s for 20 s
		defer close(produced)
		for i := 0; i < n; i += 30 {
			var evs []orderEvent
			for _, o := range orders[i:min(i+30, n)] {
				evs = append(evs, createdEvent(o))
			}
			ep.send(t, evs...)
			time.Sleep(200 * time.Millisecond)
		}
	})
	extra := []string{"--batch-size", "20"}
	first, _ := consumerProc(t, pl, "fulfillment-1", "fulfillment", pl.env.Group, nil, extra...)
	waitApplying(t, pl, 300, "the first instance applying alone")
	second, _ := consumerProc(t, pl, "fulfillment-2", "fulfillment", pl.env.Group, nil, extra...)
	third, _ := consumerProc(t, pl, "fulfillment-3", "fulfillment", pl.env.Group, nil, extra...)
	testenv.Eventually(t, 60*time.Second, "three members", func() error {
		got, err := groupAssignment(pl.env.Endpoints.KafkaBootstrap, pl.env.Group)
		if err != nil {
			return err
		}
		if len(got) != 3 {
			return fmt.Errorf("assignment %v", got)
		}
		return nil
	})
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "three instances applying")
	second.stop()
	third.stop()
	if second.Err() != nil || third.Err() != nil {
		t.Errorf("scaled-down instances exited with %v / %v, want a clean stop", second.Err(), third.Err())
	}
	<-produced
	wg.Wait()
	waitGroupAtEnd(t, pl, pl.env.Group, 120*time.Second)

	states := fulfillmentStates(t, pl)
	var c checker
	c.t = t
	for _, o := range orders {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: %+v, want processed with exactly one shipment", o.id, s)
		}
	}
	if m := marks(t, pl, "fulfillment"); m != n {
		c.errorf("%d marks, want %d", m, n)
	}
	c.report()
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		t.Errorf("DLQ holds %d records", len(es))
	}
	noErrorLines(t, first, second, third)
	verifyConsumersOnly(t, pl)
}

// TestConsumerCreatedThenCancelledInOrder: for 300 orders, OrderCreated
// then OrderCancelled, with transactions failing now and then (batches
// fall back to single events and retry). Both consumers apply each order's
// events in that order: fulfillment shipped, then cancelled the shipment
// (applied the other way round there would be no shipment); the ledger
// counts every order and every cancellation once.
func TestConsumerCreatedThenCancelledInOrder(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	const n = 300
	orders := seedOrders(t, pl, n, 7)
	var evs []orderEvent
	for _, o := range orders {
		evs = append(evs, createdEvent(o), cancelledEvent(o))
	}
	newEventProducer(t, pl).send(t, evs...)

	flaky := []string{"EVENTFORGE_FAILPOINTS=" + failpoint.ConsumerBeforeDBCommit + "=12*error"}
	lgroup := ledgerGroup(t, pl)
	consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, flaky, "--batch-size", "10", "--max-attempts", "20")
	consumerProc(t, pl, "ledger", "ledger", lgroup, flaky, "--batch-size", "10", "--max-attempts", "20")
	waitGroupAtEnd(t, pl, pl.env.Group, 90*time.Second)
	waitGroupAtEnd(t, pl, lgroup, 90*time.Second)

	var c checker
	c.t = t
	states := fulfillmentStates(t, pl)
	perCustomer := map[string]int64{}
	for _, o := range orders {
		perCustomer[o.customer]++
		if s := states[o.id]; s.status != "cancelled" || s.shipments != 1 || s.cancelled != 1 {
			c.errorf("order %s: %+v, want cancelled with one shipment, cancelled (created applied before cancelled)", o.id, s)
		}
	}
	ledger := ledgerRows(t, pl)
	for cust, k := range perCustomer {
		want := ledgerRow{orders: k, cancelled: k, totalCents: 3998 * k, cancelledCents: 3998 * k}
		if got := ledger[cust]; got != want {
			c.errorf("ledger of %s: %+v, want %+v", cust, got, want)
		}
	}
	for _, name := range []string{"fulfillment", "ledger"} {
		if m := marks(t, pl, name); m != 2*n {
			c.errorf("%s: %d marks, want %d", name, m, 2*n)
		}
	}
	// Marks carry their transaction's start time: an order's OrderCreated
	// mark is never younger than its OrderCancelled mark.
	var inverted int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*)
		FROM unnest($1::uuid[], $2::uuid[]) AS p(created, cancelled)
		JOIN processed_events a ON a.event_id = p.created
		JOIN processed_events b ON b.event_id = p.cancelled AND b.consumer = a.consumer
		WHERE a.processed_at > b.processed_at`, idsOf(evs, contract.TypeOrderCreated), idsOf(evs, contract.TypeOrderCancelled)).Scan(&inverted); err != nil {
		t.Fatal(err)
	}
	if inverted != 0 {
		c.errorf("%d orders have their OrderCancelled mark older than their OrderCreated mark", inverted)
	}
	c.report()
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		t.Errorf("DLQ holds %d records", len(es))
	}
}

func idsOf(evs []orderEvent, typ string) []uuid.UUID {
	var out []uuid.UUID
	for _, e := range evs {
		if e.typ == typ {
			out = append(out, uuid.MustParse(e.id))
		}
	}
	return out
}
