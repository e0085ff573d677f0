package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
)

// windowConsumerCrashAfterCommit is the second failure window of
// the brief, on the delivery path (order + outbox row in one transaction →
// cdc → Kafka → consumers):
// both consumers die by SIGKILL after their DB commit and before their
// offset is committed. The restarted consumers receive the event again and
// skip it as a duplicate: one effect in orders/shipments, one in ledger. A
// second restart receives nothing and changes nothing.
func windowConsumerCrashAfterCommit(t *testing.T) {
	pl := newPipeline(t)
	pl.startCDC(t, "cdc", nil)
	lgroup := ledgerGroup(t, pl)
	dlqTopicOf(t, pl)
	crash := []string{"EVENTFORGE_FAILPOINTS=" + failpoint.ConsumerAfterDBCommitBeforeOffset + "=crash"}
	ful, _ := consumerProc(t, pl, "fulfillment-crashing", "fulfillment", pl.env.Group, crash)
	led, _ := consumerProc(t, pl, "ledger-crashing", "ledger", lgroup, crash)

	orderID, eventID := outboxOrder(t, pl, "crash-customer")
	for _, p := range []*proc{ful, led} {
		if err := p.waitExit(60 * time.Second); err == nil || !p.killedBySIGKILL() {
			t.Fatalf("%s: exit %v, want death by SIGKILL at the failpoint", p.name, err)
		}
	}

	// The crash left the effects committed and the offsets not.
	check := func(when string) {
		t.Helper()
		d := readDurable(t, pl, orderID, eventID)
		l := ledgerRows(t, pl)["crash-customer"]
		if d.status != "processed" || d.marks != 1 || d.shipments != 1 {
			t.Fatalf("%s: order %s status %q, fulfillment marks %d, shipments %d; want processed/1/1", when, orderID, d.status, d.marks, d.shipments)
		}
		if l.orders != 1 || l.totalCents != 3998 || marks(t, pl, "ledger") != 1 {
			t.Fatalf("%s: ledger %+v with %d marks; want one order of 3998 and one mark", when, l, marks(t, pl, "ledger"))
		}
	}
	check("after the crash")
	for _, g := range []string{pl.env.Group, lgroup} {
		committed, ends, err := testenv.CommittedOffsets(pl.env.Endpoints.KafkaBootstrap, g, pl.env.Topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, end := range ends {
			if end > 0 && committed[p] == end {
				t.Fatalf("group %s committed partition %d to its end %d before dying; the failpoint fired too late", g, p, end)
			}
		}
	}

	// First restart: the event is redelivered and skipped as a duplicate.
	ful2, fulAddr := consumerProc(t, pl, "fulfillment-restarted", "fulfillment", pl.env.Group, nil)
	led2, ledAddr := consumerProc(t, pl, "ledger-restarted", "ledger", lgroup, nil)
	waitGroupAtEnd(t, pl, pl.env.Group, 60*time.Second)
	waitGroupAtEnd(t, pl, lgroup, 60*time.Second)
	for _, c := range []struct{ name, addr string }{{"fulfillment", fulAddr}, {"ledger", ledAddr}} {
		m := mustMetrics(t, c.addr)
		if dup, applied := events(m, c.name, "duplicate"), events(m, c.name, "applied")+events(m, c.name, "retried"); dup != 1 || applied != 0 {
			t.Errorf("%s after restart: duplicate %v, applied %v; want the redelivery skipped as one duplicate", c.name, dup, applied)
		}
	}
	check("after the first restart")
	ful2.stop()
	led2.stop()

	// Second restart: nothing is redelivered, nothing changes.
	_, fulAddr = consumerProc(t, pl, "fulfillment-restarted-again", "fulfillment", pl.env.Group, nil)
	_, ledAddr = consumerProc(t, pl, "ledger-restarted-again", "ledger", lgroup, nil)
	for _, c := range []struct{ name, addr string }{{"fulfillment", fulAddr}, {"ledger", ledAddr}} {
		// Running with its partitions assigned and its lag at 0.
		testenv.Eventually(t, 60*time.Second, c.name+" assigned and caught up", func() error {
			m, err := scrapeMetrics(c.addr)
			if err != nil {
				return err
			}
			n := 0
			for p := range 6 {
				v, ok := m.lookup("eventforge_consumer_lag", "consumer", c.name, "partition", fmt.Sprint(p))
				if !ok {
					continue
				}
				if v != 0 {
					return fmt.Errorf("partition %d lag %v", p, v)
				}
				n++
			}
			if n != 6 {
				return fmt.Errorf("lag reported for %d of 6 partitions", n)
			}
			return nil
		})
		m := mustMetrics(t, c.addr)
		for _, r := range []string{"applied", "duplicate", "retried", "dead_lettered"} {
			if v := events(m, c.name, r); v != 0 {
				t.Errorf("%s after the second restart: %s = %v, want 0 (nothing redelivered)", c.name, r, v)
			}
		}
	}
	check("after the second restart")
	mustVerify(t, pl, "ledger="+lgroup)
}
