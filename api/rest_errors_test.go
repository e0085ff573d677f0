package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestRESTErrorBodies: every REST error answer is a google.rpc.Status in
// JSON (code, message, details) with a field violation naming the field at
// fault where there is one, and no parser's text; a body that is not
// application/json is a 415; a query parameter the route does not declare
// is refused like an unknown body field; no answer carries gRPC's own
// content type as a header.
func TestRESTErrorBodies(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	const good = `{"customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`
	item := func(fields string) string {
		return `{"customer_id":"c","currency":"EUR","items":[{"sku":"S",` + fields + `}]}`
	}
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	tests := []struct {
		name, method, path, contentType, body string
		header                                http.Header
		want                                  int
		wantField                             string // the field violation's field, "" for none
		wantInMessage                         string
	}{
		{name: "JSON", method: "POST", path: "/v1/orders", contentType: "application/json", body: good, want: 200},
		{name: "JSON in UTF-8", method: "POST", path: "/v1/orders", contentType: "application/json; charset=utf-8", body: good, want: 200},
		{name: "plain text", method: "POST", path: "/v1/orders", contentType: "text/plain", body: good, want: 415},
		{name: "an image", method: "POST", path: "/v1/orders", contentType: "image/png", body: good, want: 415},
		{name: "no content type", method: "POST", path: "/v1/orders", body: good, want: 415},
		{name: "JSON in Latin-1", method: "POST", path: "/v1/orders", contentType: "application/json; charset=iso-8859-1", body: good, want: 415},
		{name: "a string for a body", method: "POST", path: "/v1/orders", contentType: "application/json", body: `"abc"`, want: 400, wantInMessage: "JSON object"},
		{name: "a field twice", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: `{"customer_id":"a","customer_id":"b","currency":"EUR","items":[]}`, want: 400, wantField: "customer_id"},
		{name: "quantity beyond 32 bits", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: item(`"quantity":99999999999`), want: 400, wantField: "items[0].quantity"},
		{name: "price beyond 64 bits", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: item(`"quantity":1,"unit_price_cents":"99999999999999999999"`), want: 400, wantField: "items[0].unit_price_cents"},
		{name: "a string for a string's list", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: `{"customer_id":"c","currency":"EUR","items":"S"}`, want: 400, wantField: "items"},
		{name: "a number for a string", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: `{"customer_id":5,"currency":"EUR","items":[]}`, want: 400, wantField: "customer_id"},
		{name: "null in the items", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: `{"customer_id":"c","currency":"EUR","items":[null]}`, want: 400, wantField: "items[0]"},
		{name: "unknown field", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: `{"customer_id":"c","currency":"EUR","colour":"red","items":[]}`, want: 400, wantField: "colour"},
		{name: "unknown item field", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: item(`"quantity":1,"colour":"red"`), want: 400, wantField: "items[0].colour"},
		{name: "byte order mark", method: "POST", path: "/v1/orders", contentType: "application/json", body: "\uFEFF" + good, want: 400, wantInMessage: "byte order mark"},
		{name: "10,000 levels deep", method: "POST", path: "/v1/orders", contentType: "application/json", body: deep, want: 400, wantInMessage: "deep"},
		{name: "page_size beyond 32 bits", method: "GET", path: "/v1/orders?page_size=99999999999", want: 400, wantField: "page_size"},
		{name: "unknown query parameter", method: "GET", path: "/v1/orders?colour=red", want: 400, wantField: "colour"},
		{name: "query parameter of a body route", method: "POST", path: "/v1/orders?customer_id=c", contentType: "application/json", body: good, want: 400, wantField: "customer_id"},
		{name: "query parameter of a get", method: "GET", path: "/v1/orders/0190a6f0-0000-7000-8000-000000000001?x=1", want: 400, wantField: "x"},
		{name: "a parameter twice", method: "GET", path: "/v1/orders?page_size=1&page_size=2", want: 400, wantField: "page_size"},
		{name: "1.1 MB URL", method: "GET", path: "/v1/orders?customer_id=" + strings.Repeat("c", 1100<<10), want: 414},
		{name: "100 KiB header", method: "GET", path: "/v1/orders", header: http.Header{"X-Padding": {strings.Repeat("p", 100<<10)}}, want: 431},
	}
	internals := []string{"proto:", "strconv", "syntax error", "unexpected token", "(line ", "invalid value for"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, "http://"+s.addrs.HTTP+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			for k, v := range tt.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tt.want, raw)
			}
			for k := range resp.Header {
				if strings.HasPrefix(strings.ToLower(k), "grpc-metadata-") {
					t.Errorf("answer header %s: %v", k, resp.Header[k])
				}
			}
			if tt.want == http.StatusOK {
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q, want application/json", ct)
			}
			var st struct {
				Code    *int             `json:"code"`
				Message *string          `json:"message"`
				Details []map[string]any `json:"details"`
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&st); err != nil || st.Code == nil || st.Message == nil || st.Details == nil {
				t.Fatalf("answer is not a google.rpc.Status (%v): %.300s", err, raw)
			}
			for _, bad := range internals {
				if strings.Contains(*st.Message, bad) {
					t.Errorf("message %q holds a parser's text %q", *st.Message, bad)
				}
			}
			if !strings.Contains(*st.Message, tt.wantInMessage) {
				t.Errorf("message %q does not say %q", *st.Message, tt.wantInMessage)
			}
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			fields := restFields(body)
			switch {
			case tt.wantField == "" && len(fields) > 0:
				t.Errorf("violations %v, want none", fields)
			case tt.wantField != "" && (len(fields) != 1 || fields[0] != tt.wantField):
				t.Errorf("violations %v, want [%s]: %s", fields, tt.wantField, raw)
			}
		})
	}
	if c := counts(t, s.env); c.Orders != 2 {
		t.Fatalf("%d orders, want the 2 of the JSON bodies", c.Orders)
	}
}
