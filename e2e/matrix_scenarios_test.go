package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// mustVerify runs the delivery auditor on the pipeline (fulfillment plus the
// given name=group consumers) and fails the test on any violation, on
// dead-lettered events, or when it did not drain.
func mustVerify(t *testing.T, pl *pipeline, consumers ...string) {
	t.Helper()
	rep, code := runVerify(t, pl, consumers...)
	dead := 0
	for _, n := range rep.DeadLettered {
		dead += n
	}
	if code != 0 || !rep.Drained || rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.MarksWithoutEffect != 0 ||
		rep.OrderingViolations != 0 || dead != 0 {
		t.Fatalf("verify: exit %d, drained %v, lost %d, duplicate effects %d, marks without effect %d, ordering violations %d, dead-lettered %v: %v",
			code, rep.Drained, rep.Lost, rep.DuplicateEffects, rep.MarksWithoutEffect, rep.OrderingViolations, rep.DeadLettered, rep.Violations)
	}
	t.Logf("verify: logical events %d, deliveries %d (duplicates %d), business changes %v, lost 0, duplicate effects 0",
		rep.LogicalEvents, rep.Deliveries, rep.DuplicateDeliveries, rep.BusinessChanges)
	recordReport(t, rep)
}

// mustDrain checks the durable end state of a pipeline after a window:
// every order processed with exactly one shipment and one mark, the slot
// confirmed past the last commit, and the group committed at the end of
// every partition.
func mustDrain(t *testing.T, pl *pipeline) {
	t.Helper()
	last := currentWAL(t, pl)
	testenv.Eventually(t, 3*time.Minute, "every order processed", func() error {
		var pending int
		if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE status = 'created'`).Scan(&pending); err != nil {
			return err
		}
		if pending > 0 {
			return fmt.Errorf("%d orders not processed", pending)
		}
		return nil
	})
	var orders, badShipments, badMarks int
	err := pl.env.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM orders o WHERE (SELECT count(*) FROM shipments s WHERE s.order_id = o.id) <> 1),
		(SELECT count(*) FROM outbox ob WHERE (SELECT count(*) FROM processed_events pe WHERE pe.consumer = 'fulfillment' AND pe.event_id = ob.id) <> 1)`).
		Scan(&orders, &badShipments, &badMarks)
	if err != nil {
		t.Fatal(err)
	}
	if badShipments != 0 || badMarks != 0 {
		t.Fatalf("of %d orders, %d do not have exactly one shipment and %d events do not have exactly one mark", orders, badShipments, badMarks)
	}
	waitConfirmedPast(t, pl.env, last, 60*time.Second, "the last commit")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic); err != nil {
		t.Fatalf("committed offsets: %v", err)
	}
	t.Logf("durable state: %d orders, each processed once; slot and offsets at the end", orders)
}

// orderLoad is order requests sent in the background until finish;
// failures (a component down) are counted, not fatal.
type orderLoad struct {
	what    string // what each success did, for the log
	stop    context.CancelFunc
	done    sync.WaitGroup
	ok, bad atomic.Int64
}

// startOrderLoad creates orders over gRPC at rate per second.

func startOrderLoad(t *testing.T, pl *pipeline, rate int) *orderLoad {
	client := grpcClient(t, pl.grpcAddr)
	ctx, cancel := context.WithCancel(context.Background())
	l := &orderLoad{what: "orders created", stop: cancel}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer rcancel()
				_, err := client.CreateOrder(rctx, &eventforgev1.CreateOrderRequest{CustomerId: "matrix", Currency: "EUR",
					Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}}})
				if err != nil {
					l.bad.Add(1)
					return
				}
				l.ok.Add(1)
			}()
		}
	}()
	return l
}

func (l *orderLoad) finish(t *testing.T) {
	l.stop()
	l.done.Wait()
	t.Logf("load: %d %s, %d requests failed", l.ok.Load(), l.what, l.bad.Load())
	if l.ok.Load() == 0 {
		t.Fatal("the load created no order")
	}
}

// windowAPICrashBeforeCommit: the api dies (SIGKILL) inside the order write
// after its statements reached PostgreSQL and before the commit. The create
// carries no idempotency key, so this is the write production runs for it —
// one pipeline whose Sync commits; the failpoint is a hook on that path
// (api/store.TestBeforeCommitFailpointIsOnTheProductionPath shows the
// backend mid-pipeline while the point holds it). PostgreSQL inserted the
// rows and rolled them back; nothing of the order exists afterwards — no
// order row, no outbox row, no Kafka record — and the restarted api serves
// the next order end to end.
func windowAPICrashBeforeCommit(t *testing.T) {
	pl := newPipeline(t)
	crashing := pl.apiProc(t, "api-crashing", []string{"EVENTFORGE_FAILPOINTS=" + failpoint.APIBeforeCommit + "=crash"}, pl.env.DatabaseURL)
	pl.waitAPIReady(t, crashing)
	pl.startCDC(t, "cdc", nil)
	pl.startConsumer(t, "consumer", nil)

	client := grpcClient(t, pl.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := client.CreateOrder(ctx, &eventforgev1.CreateOrderRequest{CustomerId: "doomed", Currency: "EUR",
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}}})
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("create against a crashing api: %v, want UNAVAILABLE (connection lost)", err)
	}
	if err := crashing.waitExit(30 * time.Second); err == nil || !crashing.killedBySIGKILL() {
		t.Fatalf("api with armed failpoint: exit %v, want death by SIGKILL", err)
	}
	var orders, outbox, items int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_items), (SELECT count(*) FROM outbox)`).
		Scan(&orders, &items, &outbox); err != nil {
		t.Fatal(err)
	}
	if orders+items+outbox != 0 {
		t.Fatalf("after a crash before COMMIT: %d orders, %d items, %d outbox rows; want none", orders, items, outbox)
	}
	// The crash came after the statements ran: the statistics count the
	// rows inserted by the rolled-back transaction (reported when its
	// backend ends, after the api's connection closed).
	testenv.Eventually(t, 30*time.Second, "the crashed write's inserts counted and rolled back", func() error {
		rows, err := pl.env.Pool.Query(context.Background(), `SELECT relname, n_tup_ins, n_live_tup FROM pg_stat_user_tables
			WHERE relname IN ('orders', 'order_items', 'outbox') ORDER BY relname`)
		if err != nil {
			return err
		}
		var got []string
		for rows.Next() {
			var (
				rel            string
				inserted, live int64
			)
			if err := rows.Scan(&rel, &inserted, &live); err != nil {
				return err
			}
			got = append(got, fmt.Sprintf("%s: %d inserted, %d live", rel, inserted, live))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		want := []string{"order_items: 1 inserted, 0 live", "orders: 1 inserted, 0 live", "outbox: 1 inserted, 0 live"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("table statistics %v, want %v", got, want)
		}
		return nil
	})

	pl.startAPI(t)
	orderID, eventID := createGRPC(t, client, "survivor")
	waitProcessed(t, pl, orderID, eventID)
	if recs, err := testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic); err != nil || len(recs) != 1 || recs[0].Headers[contract.HeaderID] != eventID {
		t.Fatalf("topic holds %d records (err %v); want only the survivor's event %s", len(recs), err, eventID)
	}
	mustDrain(t, pl)
	mustVerify(t, pl)
}

// startPrivateKafka starts a private Kafka cluster of n nodes for a window
// that kills or pauses brokers, so tests on the shared broker are not
// disturbed.
func startPrivateKafka(t *testing.T, n int) *localstack.KafkaCluster {
	t.Helper()
	dir := testkit.StackDir(t, "eventforge-kafka-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := localstack.StartKafkaCluster(ctx, localstack.ClusterConfig{StateDir: dir, Nodes: n}, quietLogger())
	if err != nil {
		t.Fatalf("starting a %d-node kafka cluster: %v", n, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// windowBrokerPaused: the only broker is frozen with SIGSTOP for 10 s under
// load (sockets open, nothing answered), then resumed. Nothing is lost and
// nothing is applied twice.
func windowBrokerPaused(t *testing.T) {
	c := startPrivateKafka(t, 1)
	pl := newPipelineOn(t, testenv.NewOnCluster(t, c))
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	pl.startConsumer(t, "consumer", nil, "--session-timeout", "6s")

	load := startOrderLoad(t, pl, 50)
	waitApplying(t, pl, 100, "the pipeline applying before the pause")
	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker paused (SIGSTOP)")
	// The length of the fault, not a wait for the system: orders keep
	// arriving while the broker answers nothing.
	time.Sleep(10 * time.Second)
	if err := c.Resume(0); err != nil {
		t.Fatal(err)
	}
	t.Log("broker resumed (SIGCONT)")
	waitApplying(t, pl, marks(t, pl, "fulfillment")+100, "the pipeline applying again after the resume")
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
}

// windowClusterBrokerLoss: a three-broker cluster, topic with replication
// factor 3 and min.insync.replicas 2; one broker is SIGKILLed under load and
// stays dead. acks=all still succeeds on the two survivors; nothing is lost
// and nothing is applied twice.
func windowClusterBrokerLoss(t *testing.T) {
	c := startPrivateKafka(t, 3)
	pl := newPipelineOn(t, testenv.NewOnCluster(t, c))
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	pl.startConsumer(t, "consumer", nil, "--session-timeout", "6s")

	load := startOrderLoad(t, pl, 50)
	waitApplying(t, pl, 100, "the pipeline applying before the broker loss")
	victim := 1
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d SIGKILLed", victim+1)
	waitApplying(t, pl, marks(t, pl, "fulfillment")+300, "the pipeline applying on the two surviving brokers")
	load.finish(t)
	mustDrain(t, pl)
	mustVerify(t, pl)
}

// waitApplying waits, while a load runs, until the fulfillment consumer has
// applied at least n events: the pipeline is flowing end to end.
func waitApplying(t *testing.T, pl *pipeline, n int, what string) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, what, func() error {
		if m := marks(t, pl, "fulfillment"); m < n {
			return fmt.Errorf("%d events applied, want at least %d", m, n)
		}
		return nil
	})
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// verifyConsumersOnly audits a window that runs consumers but no relay (its
// events are produced straight to Kafka): it does not wait for the slot, and
// the scenario has already waited for the groups to reach the end.
func verifyConsumersOnly(t *testing.T, pl *pipeline, consumers ...string) {
	t.Helper()
	verifyNoLossWait(t, pl, "0s", consumers...)
}

// verifyRelayOnly audits a window that runs the relay but no consumer, after
// the scenario checked that every event reached Kafka: the consumers' records
// count as pending; loss, duplicates and ordering are checked.
func verifyRelayOnly(t *testing.T, pl *pipeline) {
	t.Helper()
	verifyNoLossWait(t, pl, "0s")
}

// verifyDuplicatesPlanted audits the concurrent-duplicate window, which
// plants one event in every partition on purpose: the auditor rightly calls
// that an ordering violation, so only loss and duplicate effects count here.
func verifyDuplicatesPlanted(t *testing.T, pl *pipeline) {
	t.Helper()
	rep, code := runVerifyWait(t, pl, "0s")
	if rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.MarksWithoutEffect != 0 || rep.EffectsWithoutMark != 0 {
		t.Fatalf("verify: exit %d, lost %d, duplicate effects %d, marks without effect %d: %v",
			code, rep.Lost, rep.DuplicateEffects, rep.MarksWithoutEffect, rep.Violations)
	}
	t.Logf("verify: deliveries %d (duplicates %d, planted), business changes %v, lost 0, duplicate effects 0",
		rep.Deliveries, rep.DuplicateDeliveries, rep.BusinessChanges)
	recordReport(t, rep)
}

// verifyNoLossWait runs the auditor with the given --wait and fails only on
// loss, duplicate effects or ordering violations: for windows that
// dead-letter on purpose or run no consumer (their records then count as
// pending, not lost).
func verifyNoLossWait(t *testing.T, pl *pipeline, wait string, consumers ...string) {
	t.Helper()
	rep, code := runVerifyWait(t, pl, wait, consumers...)
	if code != 0 || rep.Lost != 0 || rep.DuplicateEffects != 0 || rep.OrderingViolations != 0 {
		t.Fatalf("verify: exit %d, lost %d, duplicate effects %d, ordering violations %d: %v",
			code, rep.Lost, rep.DuplicateEffects, rep.OrderingViolations, rep.Violations)
	}
	t.Logf("verify: logical events %d, deliveries %d (duplicates %d), dead-lettered %v, lost 0, duplicate effects 0",
		rep.LogicalEvents, rep.Deliveries, rep.DuplicateDeliveries, rep.DeadLettered)
	recordReport(t, rep)
}
