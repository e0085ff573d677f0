package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// outageProducerFlags shorten the reader's producer request timeouts, so
// that a Kafka outage of seconds outlasts every timeout the producer has
// many times over (its message timeout is infinite and cannot be changed).
var outageProducerFlags = []string{
	"--kafka-producer-setting", "request.timeout.ms=2000",
	"--kafka-producer-setting", "socket.timeout.ms=2000",
}

// startCreateCancelLoad creates orders from several workers until finish;
// each worker cancels the order it created in its previous round, so an
// order's two events (Created, then Cancelled one round later) are produced
// apart, and a failure that split them — Created lost, Cancelled delivered —
// would show as Cancelled first. Failed requests are counted.
func startCreateCancelLoad(t *testing.T, pl *pipeline, workers int, pause time.Duration) *orderLoad {
	client := grpcClient(t, pl.grpcAddr)
	ctx, cancel := context.WithCancel(context.Background())
	l := &orderLoad{what: "orders created and cancelled", stop: cancel}
	for range workers {
		l.done.Go(func() {
			// Not cancelled by stop: finish returns after the last
			// request's commit, so the outbox read then holds it.
			call := func(f func(ctx context.Context) error) error {
				rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer rcancel()
				return f(rctx)
			}
			var previous string
			cancelPrevious := func() {
				if previous == "" {
					return
				}
				if err := call(func(ctx context.Context) error {
					_, err := client.CancelOrder(ctx, &eventforgev1.CancelOrderRequest{OrderId: previous, Reason: "outage drill"})
					return err
				}); err != nil {
					l.bad.Add(1)
				} else {
					l.ok.Add(1)
				}
				previous = ""
			}
			defer cancelPrevious()
			for ctx.Err() == nil {
				var created string
				err := call(func(ctx context.Context) error {
					resp, err := client.CreateOrder(ctx, &eventforgev1.CreateOrderRequest{CustomerId: "outage", Currency: "EUR",
						Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}}})
					created = resp.GetOrder().GetOrderId()
					return err
				})
				if err != nil {
					l.bad.Add(1)
				}
				cancelPrevious()
				previous = created
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	return l
}

// storedInCommitOrder reads every outbox row with its rank among the rows of
// its order by commit order (created_at, then the time-ordered event ID).
func storedInCommitOrder(t testing.TB, env *testenv.Env) []storedEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return collectStored(ctx, t, env.Pool, `SELECT id::text, aggregateid,
		(row_number() OVER (PARTITION BY aggregateid ORDER BY created_at, id) - 1)::int FROM outbox`)
}

// windowKafkaOutageOrdering: orders are created and cancelled (two events of
// one order, a round of the load apart) while the only broker is frozen with
// SIGSTOP for 20 s — ten times the producer's shortened request timeouts.
// No record times out into a gap: every event reaches Kafka, and each
// order's first deliveries are in commit order (Created before Cancelled)
// in one partition; verify passes.
func windowKafkaOutageOrdering(t *testing.T) {
	c := startPrivateKafka(t, 1)
	pl := newPipelineOn(t, testenv.NewOnCluster(t, c))
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil, outageProducerFlags...)
	pl.startConsumer(t, "consumer", nil, "--session-timeout", "6s")

	load := startCreateCancelLoad(t, pl, 4, 100*time.Millisecond)
	waitApplying(t, pl, 100, "the pipeline applying before the outage")
	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker paused (SIGSTOP)")
	before := load.ok.Load()
	// The length of the fault, not a wait for the system: orders keep
	// being created and cancelled while the broker answers nothing.
	time.Sleep(20 * time.Second)
	if err := c.Resume(0); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker resumed (SIGCONT); %d orders created and cancelled during the outage", load.ok.Load()-before)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+100, "the pipeline applying again after the resume")
	load.finish(t)

	stored := storedInCommitOrder(t, pl.env)
	ids := make([]string, len(stored))
	for i, e := range stored {
		ids[i] = e.id
	}
	waitEventsInKafka(t, pl.env, ids, 3*time.Minute)
	recs, err := testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	check := checkDelivery(stored, recs)
	for _, f := range check.Failures {
		t.Error(f)
	}
	t.Logf("delivery: %d events, %d records, %d duplicates", check.Events, check.Records, check.Duplicates)
	mustVerify(t, pl)
}

// TestCDCShutdownWhileKafkaDown: with the broker frozen and events waiting
// for its acknowledgement (records that never time out), SIGTERM still ends
// the reader cleanly: the flush gives up after --flush-timeout, nothing
// unacknowledged is confirmed, and a new reader publishes everything once
// the broker is back.
func TestCDCShutdownWhileKafkaDown(t *testing.T) {
	c := startPrivateKafka(t, 1)
	env := testenv.NewOnCluster(t, c)
	ctx := context.Background()
	args := append([]string{"--flush-timeout", "2s"}, outageProducerFlags...)
	reader, metrics := cdcReader(t, env, "cdc", nil, args...)
	first := insertEvents(ctx, t, env.Pool, 10, 5)
	waitEventsInKafka(t, env, first, time.Minute)
	// The producer's acknowledgements of the first events, not only their
	// presence in the topic, come before the pause: an acknowledgement still
	// in flight would otherwise be counted among the stalled events.
	published := waitMetric(t, metrics, "eventforge_cdc_events_published_total", time.Minute,
		"the first events acknowledged", func(v float64) bool { return v >= float64(len(first)) })

	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker paused (SIGSTOP)")
	stalled := insertEvents(ctx, t, env.Pool, 10, 5)
	testenv.Eventually(t, time.Minute, "every stalled event waiting for the frozen broker", func() error {
		inflight, _ := scrape(metrics, "eventforge_cdc_inflight_events")
		acked, _ := scrape(metrics, "eventforge_cdc_events_published_total")
		failed, _ := scrape(metrics, "eventforge_cdc_publish_errors_total")
		if inflight < float64(len(stalled)) {
			return fmt.Errorf("%v events in flight; %v acknowledged and %v failed since the pause", inflight, acked-published, failed)
		}
		return nil
	})
	if err := reader.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := reader.waitExit(2 * time.Minute); err != nil {
		t.Fatalf("reader after SIGTERM with the broker frozen: %v, want a clean exit", err)
	}
	// Nothing unacknowledged was confirmed: the slot still holds every
	// stalled insert past its confirmed position.
	var pending int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2) WHERE get_byte(data, 0) = 73`, env.Slot, contract.Publication).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != len(stalled) {
		t.Fatalf("after the shutdown the slot holds %d unconfirmed outbox inserts, want the %d stalled ones", pending, len(stalled))
	}

	if err := c.Resume(0); err != nil {
		t.Fatal(err)
	}
	cdcReader(t, env, "cdc-after", nil)
	waitEventsInKafka(t, env, append(first, stalled...), 2*time.Minute)
}

// TestCDCPostgresFastShutdownWhileKafkaDown: the reader is attached with
// events it cannot publish (the broker is stopped), and PostgreSQL is shut
// down with a fast shutdown. The walsender would wait for a confirmation
// that cannot come; the reader, losing its control connection to the
// shutdown, gives up its flush after --flush-timeout and closes the
// replication connection, so the server stops (StopPostgres fails the test
// if it has not within two minutes). After both services are back the same
// reader publishes everything.
func TestCDCPostgresFastShutdownWhileKafkaDown(t *testing.T) {
	stack := testenv.NewPrivate(t)
	env := stack.Env(t)
	ctx := context.Background()
	reader, metrics := cdcReader(t, env, "cdc", nil, "--flush-timeout", "2s", "--max-backoff", "2s")
	first := insertEvents(ctx, t, env.Pool, 10, 5)
	waitEventsInKafka(t, env, first, time.Minute)

	stack.StopKafka(t)
	t.Log("broker stopped")
	stalled := insertEvents(ctx, t, env.Pool, 10, 5)
	waitMetric(t, metrics, "eventforge_cdc_inflight_events", time.Minute, "events waiting for the stopped broker", func(v float64) bool { return v >= 10 })
	// The documented bound (docs/cdc.md "Shutdown") is --status-interval +
	// --flush-timeout + 1 s; the figure is logged, not asserted (the machine
	// may be loaded), and a server that waits for the reader forever fails
	// StopPostgres's own deadline.
	stopping := time.Now()
	stack.StopPostgres(t, false)
	t.Logf("postgres stopped by a fast shutdown with the reader attached in %s", time.Since(stopping).Round(100*time.Millisecond))
	if n := logCount(t, reader.Log, "replication stopped"); n == 0 {
		t.Error("the reader did not end its session before the server stopped")
	}

	stack.Start(t)
	waitEventsInKafka(t, env, append(first, stalled...), 3*time.Minute)
}
