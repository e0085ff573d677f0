package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// The ErrorInfo of a failed create, as docs/api.md documents it: its
// domain, and the reason that says nothing was written.
const (
	errorDomain      = "eventforge.v1"
	reasonNotWritten = "NOT_WRITTEN"
)

// answerClass is what a create's answer tells its client, by the rule of
// docs/api.md ("What an answer means").
type answerClass string

const (
	answerCreated    answerClass = "created"     // success: the order is stored
	answerNotWritten answerClass = "not written" // ErrorInfo NOT_WRITTEN: nothing was written
	answerUnknown    answerClass = "unknown"     // anything else: it may be stored
)

// createAnswer is one create call as its client saw it.
type createAnswer struct {
	class   answerClass
	orderID string // the order the answer names ("" when it names none)
	code    string // gRPC code or HTTP status, for the tally
}

// intent is one order a client means to place, with or without a key, over
// gRPC or REST. Its customer ID is unique, so the database tells how many
// orders it ended with.
type intent struct {
	customer string
	key      string
	rest     bool
	deadline time.Duration // of the first attempt
	answers  []createAnswer
}

// TestShortDeadlinesNeverAnswerNotWrittenForAStoredOrder: clients with
// deadlines from 100 µs to 10 ms (and 20, 50 ms), with and without idempotency keys, over
// gRPC and REST (Grpc-Timeout), against the api process on the real
// database, each following the documented rule: with a key, anything but
// a success or a refusal is retried under the same key; without one, only
// a NOT_WRITTEN answer is retried (an answer that names an order whose
// outcome is unknown is followed by a GetOrder; any other failure is left
// alone, since the order may exist). Checked on the durable rows:
//   - no answer said NOT_WRITTEN of an order that is stored;
//   - every keyed intent ends with exactly one order, every keyless one with
//     at most one (exactly one when a call succeeded);
//   - every stored order is named (order_id) by an rpc log line of the api,
//     however its call ended for the client.
func TestShortDeadlinesNeverAnswerNotWrittenForAStoredOrder(t *testing.T) {
	pl := newPipeline(t)
	api := pl.startAPI(t)
	client := grpcClient(t, pl.grpcAddr)

	// 100 µs to 10 ms, and on to 50 ms: the api built with the race
	// detector takes several milliseconds per create, so the deadlines that
	// end a call around its commit lie higher there.
	deadlines := []time.Duration{100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
		time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		20 * time.Millisecond, 50 * time.Millisecond}
	const perCell = 12 // intents per deadline, key or not, and protocol
	var intents []*intent
	for _, rest := range []bool{false, true} {
		for _, keyed := range []bool{false, true} {
			for _, d := range deadlines {
				for range perCell {
					n := len(intents)
					in := &intent{customer: fmt.Sprintf("intent-%d", n), rest: rest, deadline: d}
					if keyed {
						in.key = fmt.Sprintf("key-%d", n)
					}
					intents = append(intents, in)
				}
			}
		}
	}
	c := deadlineClient{t: t, grpc: client, httpAddr: pl.httpAddr}
	work := make(chan *intent)
	var wg sync.WaitGroup
	for range 8 { // concurrent clients: creates share group commits
		wg.Go(func() {
			for in := range work {
				c.place(in)
			}
		})
	}
	for _, in := range intents {
		work <- in
	}
	close(work)
	wg.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored := map[string][]string{} // customer → order IDs
	rows, err := pl.env.Pool.Query(ctx, `SELECT customer_id, id::text FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	var customer, id string
	if _, err := pgx.ForEachRow(rows, []any{&customer, &id}, func() error {
		stored[customer] = append(stored[customer], id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	isStored := map[string]bool{}
	for _, ids := range stored {
		for _, id := range ids {
			isStored[id] = true
		}
	}
	logged := map[string]bool{}
	for _, l := range readLog(t, api.Log) {
		if l.Msg == "rpc" && l.Fields["method"] == "/eventforge.v1.OrderService/CreateOrder" {
			if id, ok := l.Fields["order_id"].(string); ok {
				logged[id] = true
			}
		}
	}

	type cell struct {
		rest, keyed bool
		deadline    time.Duration
	}
	tally := map[cell]map[string]int{}
	var failedStored, zero int
	for _, in := range intents {
		k := cell{in.rest, in.key != "", in.deadline}
		if tally[k] == nil {
			tally[k] = map[string]int{}
		}
		first := in.answers[0]
		tally[k][string(first.class)+" "+first.code]++
		ids := stored[in.customer]
		succeeded := false
		for i, a := range in.answers {
			succeeded = succeeded || a.class == answerCreated
			if a.class == answerNotWritten && isStored[a.orderID] {
				t.Errorf("%s, attempt %d (%s): answered NOT_WRITTEN (%s), but order %s is stored", in.customer, i, in.describe(), a.code, a.orderID)
			}
		}
		switch {
		case in.key != "" && len(ids) != 1:
			t.Errorf("%s (%s): %d orders, want exactly 1 (answers %+v)", in.customer, in.describe(), len(ids), in.answers)
		case len(ids) > 1:
			t.Errorf("%s (%s): %d orders, want at most 1 (answers %+v)", in.customer, in.describe(), len(ids), in.answers)
		case succeeded && len(ids) != 1:
			t.Errorf("%s (%s): a call succeeded, but %d orders are stored", in.customer, in.describe(), len(ids))
		}
		if len(ids) == 0 {
			zero++
		}
		if first.class != answerCreated && len(ids) == 1 {
			failedStored++
		}
		for _, id := range ids {
			if !logged[id] {
				t.Errorf("%s (%s): stored order %s is named by no rpc log line of the api (answers %+v)", in.customer, in.describe(), id, in.answers)
			}
		}
	}

	var lines []string
	for k, counts := range tally {
		var parts []string
		for what, n := range counts {
			parts = append(parts, fmt.Sprintf("%s: %d", what, n))
		}
		sort.Strings(parts)
		proto := map[bool]string{false: "grpc", true: "rest"}[k.rest]
		key := map[bool]string{false: "no key", true: "key"}[k.keyed]
		lines = append(lines, fmt.Sprintf("%s %-6s %8s  first answers: %s", proto, key, k.deadline, strings.Join(parts, ", ")))
	}
	sort.Strings(lines)
	t.Logf("%d intents; %d stored orders whose first call failed; %d keyless intents left without an order (their outcome unknown to the client, never retried)\n%s",
		len(intents), failedStored, zero, strings.Join(lines, "\n"))
	if fams, err := scrapeMetrics(pl.httpAddr); err == nil {
		if f := fams["eventforge_api_commit_answer_lost_total"]; f != nil {
			for _, m := range f.GetMetric() {
				t.Logf("eventforge_api_commit_answer_lost_total{resolution=%q} %v", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
}

func (in *intent) describe() string {
	proto := map[bool]string{false: "gRPC", true: "REST"}[in.rest]
	key := "no key"
	if in.key != "" {
		key = "key"
	}
	return fmt.Sprintf("%s, %s, first deadline %s", proto, key, in.deadline)
}

// deadlineClient places intents by the documented rule.
type deadlineClient struct {
	t        *testing.T
	grpc     eventforgev1.OrderServiceClient
	httpAddr string
}

// patient is the deadline of retries and reads: long enough to finish.
const patient = 10 * time.Second

func (c deadlineClient) place(in *intent) {
	deadline := in.deadline
	for attempt := 0; ; attempt++ {
		if attempt > 20 {
			c.t.Errorf("%s: no answer that ends the intent after %d attempts: %+v", in.customer, attempt, in.answers)
			return
		}
		a := c.create(in, deadline)
		in.answers = append(in.answers, a)
		deadline = patient
		switch {
		case a.class == answerCreated:
			return
		case in.key != "":
			continue // anything else: the same request under the same key
		case a.class == answerNotWritten:
			continue // nothing was written: send it again
		case a.orderID != "":
			// Outcome unknown, the order named: read it.
			ctx, cancel := context.WithTimeout(context.Background(), patient)
			_, err := c.grpc.GetOrder(ctx, &eventforgev1.GetOrderRequest{OrderId: a.orderID})
			cancel()
			if err != nil && status.Code(err) != codes.NotFound {
				c.t.Errorf("%s: reading order %s: %v", in.customer, a.orderID, err)
			}
			return
		default:
			return // it may exist, and nothing names it: never sent again
		}
	}
}

func (c deadlineClient) create(in *intent, deadline time.Duration) createAnswer {
	req := &eventforgev1.CreateOrderRequest{CustomerId: in.customer, Currency: "EUR", RequestId: in.key,
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}}}
	if in.rest {
		return c.createREST(req, deadline)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	resp, err := c.grpc.CreateOrder(ctx, req)
	if err == nil {
		return createAnswer{class: answerCreated, orderID: resp.GetOrder().GetOrderId(), code: "OK"}
	}
	st := status.Convert(err)
	a := createAnswer{class: answerUnknown, code: st.Code().String()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			a.orderID = info.GetMetadata()["order_id"]
			if info.GetReason() == reasonNotWritten {
				a.class = answerNotWritten
			}
		}
	}
	return a
}

func (c deadlineClient) createREST(req *eventforgev1.CreateOrderRequest, deadline time.Duration) createAnswer {
	body, err := json.Marshal(map[string]any{"customer_id": req.GetCustomerId(), "currency": req.GetCurrency(),
		"items": []map[string]any{{"sku": "SKU-1", "quantity": 1, "unit_price_cents": "100"}}})
	if err != nil {
		c.t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, "http://"+c.httpAddr+"/v1/orders", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if req.GetRequestId() != "" {
		hr.Header.Set("Idempotency-Key", req.GetRequestId())
	}
	if deadline < patient {
		hr.Header.Set("Grpc-Timeout", fmt.Sprintf("%du", deadline.Microseconds()))
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return createAnswer{class: answerUnknown, code: "transport"}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Order struct {
			OrderID string `json:"order_id"`
		} `json:"order"`
		Details []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	_ = json.Unmarshal(raw, &out)
	if resp.StatusCode == http.StatusOK {
		return createAnswer{class: answerCreated, orderID: out.Order.OrderID, code: "200"}
	}
	a := createAnswer{class: answerUnknown, code: fmt.Sprint(resp.StatusCode)}
	for _, d := range out.Details {
		if d.Domain == errorDomain && strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") {
			a.orderID = d.Metadata["order_id"]
			if d.Reason == reasonNotWritten {
				a.class = answerNotWritten
			}
		}
	}
	return a
}
