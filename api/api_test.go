package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// TestIdempotentCreateRace: 50 identical concurrent POST /v1/orders with one
// Idempotency-Key create exactly one order and one outbox row; every answer
// names that order. A different request under the key is refused and writes
// nothing. The creates' transactions run at READ COMMITTED whatever the
// database's default isolation is: the race holds under a default of
// REPEATABLE READ too.
func TestIdempotentCreateRace(t *testing.T) {
	for _, isolation := range []string{"read committed", "repeatable read"} {
		t.Run(isolation, func(t *testing.T) {
			env := testenv.New(t)
			env.SetDatabase(t, "default_transaction_isolation", isolation)
			idempotentCreateRace(t, startServer(t, env, nil))
		})
	}
}

func idempotentCreateRace(t *testing.T, s *server) {
	const n = 50
	body := restJSON(t, validCreate())
	header := http.Header{"Idempotency-Key": {"race-key-1"}, "Content-Type": {"application/json"}}

	type answer struct {
		status           int
		orderID, eventID string
		raw              string
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.addrs.HTTP+"/v1/orders", bytes.NewReader(body))
			req.Header = header.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] = answer{raw: err.Error()}
				return
			}
			defer resp.Body.Close()
			var out struct {
				Order struct {
					OrderID string `json:"order_id"`
				} `json:"order"`
				EventID string `json:"event_id"`
			}
			raw, _ := io.ReadAll(resp.Body)
			_ = json.Unmarshal(raw, &out)
			answers[i] = answer{status: resp.StatusCode, orderID: out.Order.OrderID, eventID: out.EventID, raw: string(raw)}
		})
	}
	close(start)
	wg.Wait()

	ids := map[string]int{}
	for i, a := range answers {
		if a.status != http.StatusOK {
			t.Errorf("request %d: status %d: %s", i, a.status, a.raw)
			continue
		}
		ids[a.orderID+"/"+a.eventID]++
	}
	if len(ids) != 1 {
		t.Fatalf("answers name %d distinct order/event pairs, want 1: %v", len(ids), ids)
	}
	var orderID string
	for k := range ids {
		orderID = strings.Split(k, "/")[0]
	}
	// Durable state, not answers: one order, one outbox row, one key.
	ctx := ctxTimeout(t)
	var orders, outbox, keys int
	err := s.env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox WHERE aggregateid = $1),
		(SELECT count(*) FROM idempotency_keys WHERE key = 'race-key-1' AND order_id = $1::uuid)`, orderID).Scan(&orders, &outbox, &keys)
	if err != nil {
		t.Fatal(err)
	}
	if orders != 1 || outbox != 1 || keys != 1 {
		t.Fatalf("orders %d, outbox rows %d, keys %d; want 1 each", orders, outbox, keys)
	}
	if c := counts(t, s.env); c.Outbox != 1 || c.Items != 1 {
		t.Fatalf("rows %+v, want one order with one item and one outbox row", c)
	}

	t.Run("gRPC retry with request_id returns the same order", func(t *testing.T) {
		req := validCreate()
		req.RequestId = "race-key-1"
		resp, err := s.client.CreateOrder(ctxTimeout(t), req)
		if err != nil || resp.GetOrder().GetOrderId() != orderID {
			t.Fatalf("got %v, %v; want order %s", resp, err, orderID)
		}
	})
	t.Run("same key, different request", func(t *testing.T) {
		other := validCreate()
		other.Items[0].Quantity = 3
		r := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, other), header)
		if r.Status != http.StatusConflict {
			t.Fatalf("REST status %d, want 409: %s", r.Status, r.Raw)
		}
		other.RequestId = "race-key-1"
		_, err := s.client.CreateOrder(ctxTimeout(t), other)
		if code := status.Code(err); code != codes.AlreadyExists {
			t.Fatalf("gRPC code %v, want AlreadyExists", code)
		}
		if c := counts(t, s.env); c != (rowCounts{Orders: 1, Items: 1, Outbox: 1, Keys: 1}) {
			t.Fatalf("rows %+v after refused requests, want one of each", c)
		}
	})
	t.Run("a new key creates a new order", func(t *testing.T) {
		r := s.do(t, http.MethodPost, "/v1/orders", body, http.Header{"Idempotency-Key": {"race-key-2"}})
		order, _ := r.Body["order"].(map[string]any)
		if r.Status != http.StatusOK || order["order_id"] == orderID {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
	})
}

// TestListCancelAndLog: list filters and pages; cancel writes the status and
// an OrderCancelled outbox row in one transaction, a repeated cancel changes
// nothing; each call logs one line with method, code, duration and order_id.
func TestListCancelAndLog(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	var created []string // newest last
	for i := range 5 {
		req := validCreate()
		req.CustomerId = []string{"alice", "bob"}[i%2]
		resp, err := s.client.CreateOrder(ctxTimeout(t), req)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, resp.GetOrder().GetOrderId())
	}
	alice := []string{created[4], created[2], created[0]} // newest first

	t.Run("gRPC pages by customer", func(t *testing.T) {
		var got []string
		req := &eventforgev1.ListOrdersRequest{CustomerId: "alice", PageSize: 2}
		for pages := 0; ; pages++ {
			if pages > 3 {
				t.Fatal("paging does not end")
			}
			resp, err := s.client.ListOrders(ctxTimeout(t), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range resp.GetOrders() {
				got = append(got, o.GetOrderId())
				if len(o.GetItems()) != 1 || o.GetCustomerId() != "alice" {
					t.Fatalf("order %v", o)
				}
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			req.PageToken = resp.GetNextPageToken()
		}
		if strings.Join(got, ",") != strings.Join(alice, ",") {
			t.Fatalf("listed %v, want %v", got, alice)
		}
	})

	t.Run("REST cancel", func(t *testing.T) {
		r := s.do(t, http.MethodPost, "/v1/orders/"+created[0]+":cancel", []byte(`{"reason":"customer request"}`),
			http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
		order, _ := r.Body["order"].(map[string]any)
		if r.Status != http.StatusOK || order["status"] != "ORDER_STATUS_CANCELLED" || r.Body["event_id"] == "" {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
		var typ, payloadReason, traceparent string
		err := s.env.Pool.QueryRow(ctxTimeout(t), `SELECT type, payload->>'reason', headers->>'traceparent' FROM outbox WHERE id = $1::uuid`,
			r.Body["event_id"]).Scan(&typ, &payloadReason, &traceparent)
		if err != nil {
			t.Fatal(err)
		}
		if typ != contract.TypeOrderCancelled || payloadReason != "customer request" || !strings.HasPrefix(traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
			t.Fatalf("outbox row: type %q reason %q traceparent %q", typ, payloadReason, traceparent)
		}
	})
	t.Run("repeated cancel is a no-op", func(t *testing.T) {
		before := counts(t, s.env)
		resp, err := s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: created[0]})
		if err != nil || resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED || resp.GetEventId() != "" {
			t.Fatalf("got %v, %v", resp, err)
		}
		if after := counts(t, s.env); after != before {
			t.Fatalf("rows changed from %+v to %+v", before, after)
		}
	})
	t.Run("cancel from processed", func(t *testing.T) {
		if _, err := s.env.Pool.Exec(ctxTimeout(t), `UPDATE orders SET status = 'processed' WHERE id = $1`, created[1]); err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.CancelOrder(ctxTimeout(t), &eventforgev1.CancelOrderRequest{OrderId: created[1]})
		if err != nil || resp.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED || resp.GetEventId() == "" {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("REST list by status", func(t *testing.T) {
		r := s.do(t, http.MethodGet, "/v1/orders?status=ORDER_STATUS_CANCELLED&page_size=10", nil, nil)
		orders, _ := r.Body["orders"].([]any)
		if r.Status != http.StatusOK || len(orders) != 2 || r.Body["next_page_token"] != "" {
			t.Fatalf("status %d: %s", r.Status, r.Raw)
		}
	})
	t.Run("outbox holds created before cancelled per order", func(t *testing.T) {
		rows, err := s.env.Pool.Query(ctxTimeout(t), `SELECT type FROM outbox WHERE aggregateid = $1 ORDER BY created_at, id`, created[0])
		if err != nil {
			t.Fatal(err)
		}
		types, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || strings.Join(types, ",") != "OrderCreated,OrderCancelled" {
			t.Fatalf("outbox types %v, %v", types, err)
		}
	})
	t.Run("one log line per call", func(t *testing.T) {
		var cancels int
		for _, l := range s.logs.lines("rpc") {
			if l["method"] == "/eventforge.v1.OrderService/CancelOrder" {
				if l["order_id"] == nil || l["code"] != "OK" || l["duration"] == nil {
					t.Fatalf("log line %v lacks order_id, code or duration", l)
				}
				cancels++
			}
		}
		if cancels != 3 {
			t.Fatalf("%d CancelOrder log lines, want 3", cancels)
		}
	})
}
