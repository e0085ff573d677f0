package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

func httpReady(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// restResponse is a REST answer: status code and decoded JSON body.
type restResponse struct {
	Status int
	Body   map[string]any
	Raw    string
}

func postJSON(t testing.TB, url, body string) restResponse {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := restResponse{Status: resp.StatusCode, Raw: string(raw)}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("POST %s: response is not JSON: %q", url, raw)
	}
	return r
}

// createREST creates an order through the gateway and returns its order and
// event IDs.
func createREST(t testing.TB, httpAddr, customer string) (orderID, eventID string) {
	t.Helper()
	body := fmt.Sprintf(`{"customer_id":%q,"currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":1999}]}`, customer)
	r := postJSON(t, "http://"+httpAddr+"/v1/orders", body)
	if r.Status != http.StatusOK {
		t.Fatalf("create over REST: %d %s", r.Status, r.Raw)
	}
	order, _ := r.Body["order"].(map[string]any)
	orderID, _ = order["order_id"].(string)
	eventID, _ = r.Body["event_id"].(string)
	if orderID == "" || eventID == "" {
		t.Fatalf("create over REST: no order_id/event_id in %s", r.Raw)
	}
	return orderID, eventID
}

func grpcClient(t testing.TB, addr string) eventforgev1.OrderServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return eventforgev1.NewOrderServiceClient(conn)
}

func createGRPC(t testing.TB, c eventforgev1.OrderServiceClient, customer string) (orderID, eventID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.CreateOrder(ctx, &eventforgev1.CreateOrderRequest{
		CustomerId: customer,
		Currency:   "USD",
		Items:      []*eventforgev1.OrderItem{{Sku: "SKU-2", Quantity: 1, UnitPriceCents: 500}, {Sku: "SKU-3", Quantity: 3, UnitPriceCents: 250}},
	})
	if err != nil {
		t.Fatalf("create over gRPC: %v", err)
	}
	if resp.GetOrder().GetTotalCents() != 1250 {
		t.Fatalf("create over gRPC: total %d, want 1250", resp.GetOrder().GetTotalCents())
	}
	return resp.GetOrder().GetOrderId(), resp.GetEventId()
}
