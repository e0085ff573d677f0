package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestConsumerDLQTopicDeleted: the DLQ topic is deleted under load, and a
// record that must be dead-lettered arrives in partition 0. Its write fails
// (topic missing, auto-creation off): the fulfillment process counts the
// partition in eventforge_consumer_dlq_unavailable_partitions with the
// cause topic_missing (the series EventForgeConsumerDLQUnavailable fires
// on), commits nothing past the record, and the other partitions keep
// applying. A restarted process creates the topic again: the record is
// dead-lettered once, and every other event is applied exactly once.
func TestConsumerDLQTopicDeleted(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	const n = 240
	orders := seedOrders(t, pl, n, 8)
	ep := newEventProducer(t, pl)
	sendRange := func(from, to int) {
		var evs []orderEvent
		for i := from; i < to; i++ {
			ev := createdEvent(orders[i])
			ev.partition = int32(i % 6)
			evs = append(evs, ev)
		}
		ep.send(t, evs...)
	}
	cons, addr := consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil)
	sendRange(0, 60)
	waitGroupAtEnd(t, pl, pl.env.Group, 90*time.Second)

	if err := testenv.DeleteTopics(pl.env.Endpoints.KafkaBootstrap, topic); err != nil {
		t.Fatal(err)
	}
	poison := orderEvent{id: uuid.NewString(), typ: "OrderShipped", key: orders[0].id, payload: []byte(`{}`), partition: 0}
	ep.send(t, poison)
	const gauge = `eventforge_consumer_dlq_unavailable_partitions{cause="topic_missing",consumer="fulfillment"}`
	waiting := func() float64 {
		return mustMetrics(t, addr).value("eventforge_consumer_dlq_unavailable_partitions", "cause", "topic_missing", "consumer", "fulfillment")
	}
	for i := 60; i < 180; i += 20 { // under load while the write fails
		sendRange(i, i+20)
		time.Sleep(500 * time.Millisecond)
	}
	testenv.Eventually(t, 2*time.Minute, "partition 0 waiting on the missing dlq topic", func() error {
		if w := waiting(); w != 1 {
			return fmt.Errorf("%s = %v, want 1", gauge, w)
		}
		return nil
	})
	states := fulfillmentStates(t, pl)
	for i, o := range orders[60:180] {
		want := "processed"
		if (60+i)%6 == 0 {
			want = "created" // behind the record that waits
		}
		if s := states[o.id]; s.status != want {
			t.Errorf("order %s of partition %d: %q while the dlq topic was missing, want %q", o.id, (60+i)%6, s.status, want)
		}
	}
	if d := events(mustMetrics(t, addr), "fulfillment", "dead_lettered"); d != 0 {
		t.Errorf("%v events counted dead-lettered while the dlq topic was missing", d)
	}

	cons.stop()
	_, addr = consumerProc(t, pl, "fulfillment", "fulfillment", pl.env.Group, nil)
	sendRange(180, n)
	waitGroupAtEnd(t, pl, pl.env.Group, 2*time.Minute)

	c := checker{t: t}
	states = fulfillmentStates(t, pl)
	for _, o := range orders {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: status %q, %d shipments; want processed with one shipment", o.id, s.status, s.shipments)
		}
	}
	if m := marks(t, pl, "fulfillment"); m != n {
		c.errorf("%d marks, want %d", m, n)
	}
	if es := readDLQEntries(t, pl, topic); len(es) != 1 || es[0].EventID != poison.id {
		c.errorf("DLQ holds %+v, want the record that waited, once", es)
	}
	if w := waiting(); w != 0 {
		c.errorf("%s = %v after the topic came back", gauge, w)
	}
	c.report()
}
