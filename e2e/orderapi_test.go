package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// TestCancelOrdering: for every order that is created and then cancelled,
// Kafka holds its OrderCreated record before its OrderCancelled record, in
// one partition under the order ID as key, each with the Debezium id header,
// the CloudEvents binary-mode headers and the API call's W3C traceparent. A
// repeated cancel publishes nothing.
func TestCancelOrdering(t *testing.T) {
	pl := newPipeline(t)
	pl.startAPI(t)
	pl.startCDC(t, "cdc", nil)
	client := grpcClient(t, pl.grpcAddr)

	const orders = 10
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	type order struct{ id, created, cancelled string }
	var all []order
	for i := range orders {
		o := order{}
		o.id, o.created = createREST(t, pl.httpAddr, fmt.Sprintf("customer-%d", i))
		if i%2 == 0 {
			o.cancelled = cancelREST(t, pl.httpAddr, o.id, "00-"+traceID+"-00f067aa0ba902b7-01")
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := client.CancelOrder(ctx, &eventforgev1.CancelOrderRequest{OrderId: o.id, Reason: "test"})
			cancel()
			if err != nil {
				t.Fatalf("cancel over gRPC: %v", err)
			}
			o.cancelled = resp.GetEventId()
		}
		all = append(all, o)
	}
	// A repeated cancel changes nothing and records no event.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	again, err := client.CancelOrder(ctx, &eventforgev1.CancelOrderRequest{OrderId: all[0].id})
	if err != nil || again.GetEventId() != "" || again.GetOrder().GetStatus() != eventforgev1.OrderStatus_ORDER_STATUS_CANCELLED {
		t.Fatalf("repeated cancel: %v, %v", again, err)
	}

	var recs []testenv.Record
	testenv.Eventually(t, 60*time.Second, "every event in Kafka", func() error {
		var err error
		recs, err = testenv.ReadTopic(pl.env.Endpoints.KafkaBootstrap, pl.env.Topic)
		if err != nil {
			return err
		}
		if len(recs) < 2*orders {
			return fmt.Errorf("%d records, want %d", len(recs), 2*orders)
		}
		return nil
	})
	if len(recs) != 2*orders {
		t.Fatalf("%d records, want %d (the repeated cancel must publish nothing)", len(recs), 2*orders)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	byKey := map[string][]testenv.Record{}
	for _, r := range recs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	for i, o := range all {
		rs := byKey[o.id]
		if len(rs) != 2 {
			t.Errorf("order %s: %d records, want 2", o.id, len(rs))
			continue
		}
		if rs[0].Partition != rs[1].Partition {
			t.Errorf("order %s: records in partitions %d and %d", o.id, rs[0].Partition, rs[1].Partition)
		}
		want := []struct{ id, typ, ceType string }{
			{o.created, contract.TypeOrderCreated, "eventforge.order.created.v1"},
			{o.cancelled, contract.TypeOrderCancelled, "eventforge.order.cancelled.v1"},
		}
		for k, w := range want {
			h := rs[k].Headers
			if h[contract.HeaderID] != w.id || h[contract.HeaderCEID] != w.id || h[contract.HeaderCEType] != w.ceType || h[contract.HeaderCESpecVersion] != contract.CESpecVersion ||
				h[contract.HeaderCESource] == "" || h[contract.HeaderCETime] == "" || h[contract.HeaderContentType] != contract.ContentTypeJSON {
				t.Errorf("order %s record %d (offset %d): headers %v, want event %s of type %s first-to-last", o.id, k, rs[k].Offset, h, w.id, w.ceType)
			}
			if !strings.HasPrefix(h["traceparent"], "00-") {
				t.Errorf("order %s record %d: no traceparent header in %v", o.id, k, h)
			}
		}
		if i%2 == 0 && !strings.HasPrefix(rs[1].Headers["traceparent"], "00-"+traceID+"-") {
			t.Errorf("order %s: cancel traceparent %q does not continue the caller's trace %s", o.id, rs[1].Headers["traceparent"], traceID)
		}
		var payload eventforgev1.OrderCancelled
		if err := protojson.Unmarshal(rs[1].Value, &payload); err != nil || payload.GetOrderId() != o.id || payload.GetCancelTime() == nil {
			t.Errorf("order %s: OrderCancelled payload %s: %v", o.id, rs[1].Value, err)
		}
	}
}

// cancelREST cancels an order through the gateway with a traceparent and
// returns the OrderCancelled event ID.
func cancelREST(t testing.TB, httpAddr, orderID, traceparent string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/v1/orders/"+orderID+":cancel", bytes.NewBufferString(`{"reason":"test"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out eventforgev1.CancelOrderResponse
	if resp.StatusCode != http.StatusOK || protojson.Unmarshal(raw, &out) != nil || out.GetEventId() == "" {
		t.Fatalf("cancel over REST: %d %s", resp.StatusCode, raw)
	}
	return out.GetEventId()
}
