package e2e

import (
	"context"

	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// durable is what PostgreSQL holds about one order.
type durable struct {
	status    string
	marks     int // processed_events rows for the order's event
	shipments int // business effects
	outbox    int
}

func readDurable(t testing.TB, pl *pipeline, orderID, eventID string) durable {
	t.Helper()
	var d durable
	err := pl.env.Pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT status FROM orders WHERE id = $1), ''),
		(SELECT count(*) FROM processed_events WHERE consumer = 'fulfillment' AND event_id = $2),
		(SELECT count(*) FROM shipments WHERE order_id = $1),
		(SELECT count(*) FROM outbox WHERE id = $2 AND aggregateid = $1::text)`, orderID, eventID).
		Scan(&d.status, &d.marks, &d.shipments, &d.outbox)
	if err != nil {
		t.Fatalf("reading durable state of order %s: %v", orderID, err)
	}
	return d
}

func currentWAL(t testing.TB, pl *pipeline) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func confirmedFlush(pl *pipeline) (pglogrepl.LSN, error) {
	return slotConfirmed(pl.env)
}

func waitProcessed(t testing.TB, pl *pipeline, orderID, eventID string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "order "+orderID+" processed", func() error {
		if d := readDurable(t, pl, orderID, eventID); d.status != "processed" {
			return fmt.Errorf("status %q", d.status)
		}
		return nil
	})
}

// recordsByEventID groups the topic's records by their id header.
func recordsByEventID(t testing.TB, pl *pipeline) map[string][]testenv.Record {
	t.Helper()
	recs, err := testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic)
	if err != nil {
		t.Fatalf("reading topic: %v", err)
	}
	by := map[string][]testenv.Record{}
	for _, r := range recs {
		by[r.Headers[contract.HeaderID]] = append(by[r.Headers[contract.HeaderID]], r)
	}
	return by
}

func TestHappyPath(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	pl.startConsumer(t, "consumer", nil)
	client := grpcClient(t, pl.grpcAddr)

	const perTransport = 10
	type created struct{ orderID, eventID string }
	var orders []created
	for i := range perTransport {
		o, e := createGRPC(t, client, fmt.Sprintf("grpc-customer-%d", i))
		orders = append(orders, created{o, e})
		o, e = createREST(t, pl.httpAddr, fmt.Sprintf("rest-customer-%d", i))
		orders = append(orders, created{o, e})
	}
	lastCommit := currentWAL(t, pl)

	for _, o := range orders {
		waitProcessed(t, pl, o.orderID, o.eventID)
	}
	for _, o := range orders {
		d := readDurable(t, pl, o.orderID, o.eventID)
		if d.outbox != 1 || d.marks != 1 || d.shipments != 1 {
			t.Errorf("order %s: outbox rows %d, processed_events rows %d, shipments %d; want 1/1/1", o.orderID, d.outbox, d.marks, d.shipments)
		}
	}
	var totalMarks int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_events`).Scan(&totalMarks); err != nil {
		t.Fatal(err)
	}
	if totalMarks != len(orders) {
		t.Errorf("processed_events holds %d rows, want %d (one per event)", totalMarks, len(orders))
	}

	// Every event is in Kafka once, keyed by its order ID.
	by := recordsByEventID(t, pl)
	for _, o := range orders {
		recs := by[o.eventID]
		if len(recs) != 1 {
			t.Errorf("event %s: %d records in Kafka, want 1", o.eventID, len(recs))
			continue
		}
		if recs[0].Key != o.orderID {
			t.Errorf("event %s: key %q, want order ID %q", o.eventID, recs[0].Key, o.orderID)
		}
	}

	waitConfirmedPast(t, pl.env, lastCommit, 30*time.Second, "the last commit")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic); err != nil {
		t.Fatalf("group offsets never reached the partitions' end offsets: %v", err)
	}
}

// windowRelayCrashAfterAck is the first failure window: the
// relay dies after Kafka acknowledged an event and before it confirmed the
// event's LSN. The restarted relay republishes the event (two records with
// one id) and the consumer still applies it once.
func windowRelayCrashAfterAck(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startConsumer(t, "consumer", nil)
	before, err := confirmedFlush(pl)
	if err != nil {
		t.Fatal(err)
	}
	crashing := pl.startCDC(t, "cdc-crashing", []string{"EVENTFORGE_FAILPOINTS=" + failpoint.CDCAfterAckBeforeConfirm + "=crash"})

	orderID, eventID := createREST(t, pl.httpAddr, "crash-customer")
	commitLSN := currentWAL(t, pl)

	if err := crashing.waitExit(60 * time.Second); err == nil || !crashing.killedBySIGKILL() {
		t.Fatalf("cdc with armed failpoint: exit %v, want death by SIGKILL", err)
	}
	// The crash left the event in Kafka and its LSN unconfirmed.
	if recs := recordsByEventID(t, pl)[eventID]; len(recs) != 1 {
		t.Fatalf("after the crash: %d records with id %s, want 1", len(recs), eventID)
	}
	if lsn, err := confirmedFlush(pl); err != nil || lsn >= commitLSN {
		t.Fatalf("after the crash: confirmed_flush_lsn %s (err %v) passed the commit %s; before the crash it was %s", lsn, err, commitLSN, before)
	}

	pl.startCDC(t, "cdc-restarted", nil)
	testenv.Eventually(t, 60*time.Second, "event republished", func() error {
		if n := len(recordsByEventID(t, pl)[eventID]); n != 2 {
			return fmt.Errorf("%d records with id %s", n, eventID)
		}
		return nil
	})
	recs := recordsByEventID(t, pl)[eventID]
	if recs[0].Key != orderID || recs[1].Key != orderID || recs[0].Partition != recs[1].Partition {
		t.Errorf("republished records: %+v / %+v; want both keyed %s in one partition", recs[0], recs[1], orderID)
	}

	waitProcessed(t, pl, orderID, eventID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testenv.WaitCommittedAtEnd(ctx, pl.env.Endpoints.KafkaBootstrap, pl.env.Group, pl.env.Topic); err != nil {
		t.Fatalf("consumer never committed past both deliveries: %v", err)
	}
	if d := readDurable(t, pl, orderID, eventID); d.marks != 1 || d.shipments != 1 {
		t.Fatalf("after two deliveries: processed_events rows %d, shipments %d; want exactly 1 and 1", d.marks, d.shipments)
	}
	waitConfirmedPast(t, pl.env, commitLSN, 30*time.Second, "the commit, after the restart")
	mustVerify(t, pl)
}

// TestBadInputWritesNothing: malformed or invalid requests get a 4xx or
// INVALID_ARGUMENT naming the problem, and PostgreSQL gains no row.
func TestBadInputWritesNothing(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	client := grpcClient(t, pl.grpcAddr)

	rest := []struct {
		name, body, wantField string
	}{
		{name: "malformed JSON", body: `{"customer_id": "c-1", "items": [`},
		{name: "missing items", body: `{"customer_id":"c-1","currency":"EUR"}`, wantField: "items"},
		{name: "empty items", body: `{"customer_id":"c-1","currency":"EUR","items":[]}`, wantField: "items"},
		{name: "bad currency", body: `{"customer_id":"c-1","currency":"euro","items":[{"sku":"S","quantity":1,"unit_price_cents":1}]}`, wantField: "currency"},
		{name: "zero quantity", body: `{"customer_id":"c-1","currency":"EUR","items":[{"sku":"S","quantity":0,"unit_price_cents":1}]}`, wantField: "items[0].quantity"},
		{name: "unknown field", body: `{"customer_id":"c-1","currency":"EUR","colour":"red","items":[{"sku":"S","quantity":1,"unit_price_cents":1}]}`},
	}
	for _, tt := range rest {
		t.Run("REST "+tt.name, func(t *testing.T) {
			r := postJSON(t, "http://"+pl.httpAddr+"/v1/orders", tt.body)
			if r.Status < 400 || r.Status >= 500 {
				t.Fatalf("status %d, want 4xx; body %s", r.Status, r.Raw)
			}
			if msg, _ := r.Body["message"].(string); msg == "" {
				t.Fatalf("no message in %s", r.Raw)
			}
			if tt.wantField != "" && !mentionsField(r.Body, tt.wantField) {
				t.Fatalf("field %q not named in %s", tt.wantField, r.Raw)
			}
		})
	}

	t.Run("gRPC missing items", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.CreateOrder(ctx, &eventforgev1.CreateOrderRequest{CustomerId: "c-1", Currency: "EUR"})
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || st.Message() == "" {
			t.Fatalf("got %v, want INVALID_ARGUMENT with a message", err)
		}
		var named bool
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					named = named || v.GetField() == "items"
				}
			}
		}
		if !named {
			t.Fatalf("no BadRequest field violation for items in %v", st.Details())
		}
	})

	t.Run("unknown order is NOT_FOUND", func(t *testing.T) {
		resp, err := http.Get("http://" + pl.httpAddr + "/v1/orders/0195f5a8-0000-7000-8000-000000000000")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
	})

	var orders, items, outbox int
	err := pl.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_items), (SELECT count(*) FROM outbox)`).Scan(&orders, &items, &outbox)
	if err != nil {
		t.Fatal(err)
	}
	if orders+items+outbox != 0 {
		t.Fatalf("bad input wrote rows: orders %d, order_items %d, outbox %d", orders, items, outbox)
	}
}

// mentionsField reports whether a REST error body carries a BadRequest field
// violation for field.
func mentionsField(body map[string]any, field string) bool {
	details, _ := body["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		vs, _ := dm["field_violations"].([]any)
		for _, v := range vs {
			if vm, _ := v.(map[string]any); vm["field"] == field {
				return true
			}
		}
	}
	return false
}
