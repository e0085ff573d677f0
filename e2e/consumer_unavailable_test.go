package e2e

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestConsumerDatabaseBlackholed: the fulfillment consumer reaches
// PostgreSQL through a blackhole (testenv.Blackhole: bytes held, new
// connections accepted and never answered — a network dropping packets, or
// a server paused with SIGSTOP, as seen from the consumer). The route is
// blackholed for longer than --max-attempts × --attempt-timeout while
// events keep arriving in every partition. Nothing is dead-lettered, every
// partition reports waiting on an unavailable database, and after the
// route heals every order is applied exactly once: one mark, one shipment.
// The shared PostgreSQL itself is never paused; the test's own rows are
// read and written around the blackhole.
func TestConsumerDatabaseBlackholed(t *testing.T) {
	pl := newPipeline(t)
	topic := dlqTopicOf(t, pl)
	u, err := url.Parse(pl.env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	bh := testenv.NewBlackhole(t, u.Host)
	routed := *pl.env
	routed.DatabaseURL = bh.URL(t, pl.env.DatabaseURL)
	const n, waves = 240, 4
	orders := seedOrders(t, pl, n, 8)
	ep := newEventProducer(t, pl)
	send := func(wave int) {
		var evs []orderEvent
		for i := wave * n / waves; i < (wave+1)*n/waves; i++ {
			ev := createdEvent(orders[i])
			ev.partition = int32(i % 6)
			evs = append(evs, ev)
		}
		ep.send(t, evs...)
	}

	const maxAttempts, attemptTimeout = 2, time.Second
	cons, addr := consumerProc(t, &pipeline{env: &routed}, "fulfillment", "fulfillment", pl.env.Group, nil,
		"--max-attempts", fmt.Sprint(maxAttempts), "--attempt-timeout", attemptTimeout.String(), "--probe-timeout", "500ms",
		"--not-found-grace", "0s", "--batch-size", "10")
	send(0)
	waitGroupAtEnd(t, pl, pl.env.Group, 90*time.Second)

	bh.Block()
	blocked := time.Now()
	retries := mustMetrics(t, addr).value("eventforge_consumer_retries_total", "consumer", "fulfillment")
	send(1)
	testenv.Eventually(t, 60*time.Second, "every partition waiting on the unavailable database", func() error {
		m, err := scrapeMetrics(addr)
		if err != nil {
			return err
		}
		if w := m.value("eventforge_consumer_unavailable_partitions", "consumer", "fulfillment"); w != 6 {
			return fmt.Errorf("%v partitions waiting, want 6", w)
		}
		return nil
	})
	send(2) // events keep arriving during the outage
	outage := 3 * maxAttempts * attemptTimeout
	testenv.Eventually(t, 2*time.Minute, "an outage longer than max attempts × attempt timeout", func() error {
		m, err := scrapeMetrics(addr)
		if err != nil {
			return err
		}
		r := m.value("eventforge_consumer_retries_total", "consumer", "fulfillment") - retries
		if r < 6*(maxAttempts+1) || time.Since(blocked) < outage {
			return fmt.Errorf("%v failed attempts after %s", r, time.Since(blocked).Round(time.Millisecond))
		}
		return nil
	})
	if d := events(mustMetrics(t, addr), "fulfillment", "dead_lettered"); d != 0 {
		t.Fatalf("%v events dead-lettered during the outage", d)
	}
	bh.Unblock()
	send(3)
	waitGroupAtEnd(t, pl, pl.env.Group, 2*time.Minute)

	c := checker{t: t}
	states := fulfillmentStates(t, pl)
	for _, o := range orders {
		if s := states[o.id]; s.status != "processed" || s.shipments != 1 {
			c.errorf("order %s: status %q, %d shipments; want processed with one shipment", o.id, s.status, s.shipments)
		}
	}
	if m := marks(t, pl, "fulfillment"); m != n {
		c.errorf("%d marks, want %d", m, n)
	}
	if es := readDLQEntries(t, pl, topic); len(es) != 0 {
		c.errorf("DLQ holds %d records, want none; first: class %s, %s", len(es), es[0].Class, es[0].Message)
	}
	m := mustMetrics(t, addr)
	if d := events(m, "fulfillment", "dead_lettered"); d != 0 {
		c.errorf("%v events dead-lettered", d)
	}
	if w := m.value("eventforge_consumer_unavailable_partitions", "consumer", "fulfillment"); w != 0 {
		c.errorf("%v partitions still reported waiting after the database answered", w)
	}
	for _, l := range errorLines(t, cons) {
		c.errorf("consumer logged an error: %s", l)
	}
	c.report()
}
