package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestUndeclaredMethodIs405: on every route of the served document, every
// method the route does not declare is answered 405 with an Allow header
// listing the declared ones and a google.rpc.Status body (never the
// gateway's 501), and nothing is written.
func TestUndeclaredMethodIs405(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	resp, err := http.Get("http://" + s.addrs.HTTP + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	err = json.NewDecoder(resp.Body).Decode(&spec)
	resp.Body.Close()
	if err != nil || len(spec.Paths) == 0 {
		t.Fatalf("document paths %v: %v", spec.Paths, err)
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}
	checked := 0
	for tmpl, ops := range spec.Paths {
		var declared []string
		for m := range ops {
			declared = append(declared, strings.ToUpper(m))
		}
		slices.Sort(declared)
		path := strings.ReplaceAll(tmpl, "{order_id}", "0190a5f0-0000-7000-8000-000000000001")
		for _, m := range methods {
			if slices.Contains(declared, m) {
				continue
			}
			checked++
			t.Run(m+" "+tmpl, func(t *testing.T) {
				req, err := http.NewRequest(m, "http://"+s.addrs.HTTP+path, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusMethodNotAllowed {
					t.Fatalf("status %d, want 405: %s", resp.StatusCode, raw)
				}
				if got := resp.Header.Get("Allow"); got != strings.Join(declared, ", ") {
					t.Fatalf("Allow %q, want %q", got, strings.Join(declared, ", "))
				}
				if m != "HEAD" {
					var body struct {
						Code    int    `json:"code"`
						Message string `json:"message"`
					}
					if err := json.Unmarshal(raw, &body); err != nil || body.Message == "" {
						t.Fatalf("body %q is not a google.rpc.Status: %v", raw, err)
					}
				}
			})
		}
	}
	if checked < 15 {
		t.Fatalf("only %d undeclared method/route pairs checked", checked)
	}
	if c := counts(t, s.env); c != (rowCounts{}) {
		t.Fatalf("rows written: %+v", c)
	}
}

// TestSlowBodyTimesOut: a client that sends its headers and then only part
// of its body does not hold the handler: when --http-read-timeout passes,
// the request is answered 408 and nothing is written.
func TestSlowBodyTimesOut(t *testing.T) {
	s := startServer(t, testenv.New(t), func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", s.addrs.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound for a broken server, not a measurement: the answer is
	// expected after about ReadTimeout.
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	body := `{"customer_id":"c-1","currency":"EUR","items":[`
	if _, err := fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: eventforge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(body)+100, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408: %s", resp.StatusCode, raw)
	}
	if c := counts(t, s.env); c != (rowCounts{}) {
		t.Fatalf("rows written: %+v", c)
	}
	if lines := s.logs.lines("http request refused"); len(lines) != 1 || lines[0]["status"] != float64(http.StatusRequestTimeout) {
		t.Fatalf("log lines %v, want one refusal with status 408", lines)
	}
}

// TestControlCharactersRefused: a control character in any string of any
// request (JSON body, query filter, header) is a 400 naming the field, and
// nothing is written (PostgreSQL would refuse a NUL with a server error).
func TestControlCharactersRefused(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	created := s.do(t, http.MethodPost, "/v1/orders", restJSON(t, validCreate()), nil)
	if created.Status != http.StatusOK {
		t.Fatalf("create: %d %s", created.Status, created.Raw)
	}
	orderID := created.Body["order"].(map[string]any)["order_id"].(string)
	before := counts(t, s.env)
	tests := []struct {
		name, method, path string
		body               string
		header             http.Header
		field              string
	}{
		{"customer_id NUL", "POST", "/v1/orders", `{"customer_id":"a\u0000b","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "customer_id"},
		{"customer_id ESC", "POST", "/v1/orders", `{"customer_id":"a\u001bb","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "customer_id"},
		{"customer_id DEL", "POST", "/v1/orders", `{"customer_id":"a\u007fb","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "customer_id"},
		{"customer_id C1", "POST", "/v1/orders", `{"customer_id":"a\u0085b","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "customer_id"},
		{"currency NUL", "POST", "/v1/orders", `{"customer_id":"c","currency":"EU\u0000","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "currency"},
		{"sku NUL", "POST", "/v1/orders", `{"customer_id":"c","currency":"EUR","items":[{"sku":"S\u0000","quantity":1,"unit_price_cents":"1"}]}`, nil, "items[0].sku"},
		{"request_id NUL", "POST", "/v1/orders", `{"customer_id":"c","currency":"EUR","request_id":"k\u0000","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`, nil, "request_id"},
		{"Idempotency-Key C1", "POST", "/v1/orders", `{"customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":"1"}]}`,
			http.Header{"Idempotency-Key": {"k\u0085"}}, "Idempotency-Key"},
		{"cancel reason NUL", "POST", "/v1/orders/" + orderID + ":cancel", `{"reason":"changed\u0000my mind"}`, nil, "reason"},
		{"cancel reason C1", "POST", "/v1/orders/" + orderID + ":cancel", `{"reason":"\u009b31m"}`, nil, "reason"},
		{"list customer_id NUL", "GET", "/v1/orders?customer_id=" + url.QueryEscape("a\x00b"), "", nil, "customer_id"},
		{"list customer_id newline", "GET", "/v1/orders?customer_id=" + url.QueryEscape("a\nb"), "", nil, "customer_id"},
		{"list page_token NUL", "GET", "/v1/orders?page_token=" + url.QueryEscape("a\x00b"), "", nil, "page_token"},
		{"list forged page_token", "GET", "/v1/orders?page_token=Ag" + strings.Repeat("A", 64), "", nil, "page_token"}, // of the declared form, unsigned
		{"order_id NUL", "GET", "/v1/orders/" + url.PathEscape("a\x00b"), "", nil, "order_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			r := s.do(t, tt.method, tt.path, body, tt.header)
			if r.Status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.Status, r.Raw)
			}
			if fields := restFields(r.Body); len(fields) != 1 || fields[0] != tt.field {
				t.Fatalf("violations %v, want [%s]: %s", fields, tt.field, r.Raw)
			}
			// The rule is described in words, never by its regular expression.
			if strings.Contains(r.Raw, "regex") {
				t.Fatalf("the violation quotes a regular expression instead of saying what is wrong: %s", r.Raw)
			}
			if c := counts(t, s.env); c != before {
				t.Fatalf("rows %+v, want %+v", c, before)
			}
		})
	}
	for _, l := range s.logs.lines("rpc") {
		if l["code"] == "Internal" {
			t.Fatalf("a request was answered with an internal error: %v", l)
		}
	}
}

// TestRESTFormsOfTheDocument: the REST routes take what /openapi.json
// declares, including where proto3 JSON is lenient (enum numbers, null for
// an unset field, a cancel without a body, a 64-bit integer as a string or
// a number), and refuse the other spellings proto3 JSON would take ("1e3",
// 5.0, "+5", "01").
func TestRESTFormsOfTheDocument(t *testing.T) {
	s := startServer(t, testenv.New(t), nil)
	item := func(price string) string {
		return `{"customer_id":"c","currency":"EUR","items":[{"sku":"S","quantity":1,"unit_price_cents":` + price + `}]}`
	}
	created := s.do(t, http.MethodPost, "/v1/orders", []byte(item(`null`)), nil)
	if created.Status != http.StatusOK {
		t.Fatalf("create with a null price: %d %s", created.Status, created.Raw)
	}
	orderID := created.Body["order"].(map[string]any)["order_id"].(string)
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"status by name", "GET", "/v1/orders?status=ORDER_STATUS_CREATED", "", http.StatusOK},
		{"status by number", "GET", "/v1/orders?status=1", "", http.StatusOK},
		{"status with a leading zero", "GET", "/v1/orders?status=01", "", http.StatusBadRequest},
		{"status with a sign", "GET", "/v1/orders?status=%2B1", "", http.StatusBadRequest},
		{"status undefined", "GET", "/v1/orders?status=7", "", http.StatusBadRequest},
		{"page_size", "GET", "/v1/orders?page_size=5", "", http.StatusOK},
		{"page_size with a sign", "GET", "/v1/orders?page_size=%2B5", "", http.StatusBadRequest},
		{"page_size with a leading zero", "GET", "/v1/orders?page_size=05", "", http.StatusBadRequest},
		{"empty page_token", "GET", "/v1/orders?page_token=", "", http.StatusOK},
		{"price as a JSON number", "POST", "/v1/orders", item(`5`), http.StatusOK},
		{"price as a JSON number with a fraction", "POST", "/v1/orders", item(`5.0`), http.StatusBadRequest},
		{"price with an exponent", "POST", "/v1/orders", item(`"1e3"`), http.StatusBadRequest},
		{"camelCase field", "POST", "/v1/orders", `{"customerId":"c","currency":"EUR","items":[{"sku":"S","quantity":1}]}`, http.StatusBadRequest},
		{"cancel with order_id in the body", "POST", "/v1/orders/" + orderID + ":cancel", `{"order_id":"` + orderID + `"}`, http.StatusBadRequest},
		{"cancel with a null reason", "POST", "/v1/orders/" + orderID + ":cancel", `{"reason":null}`, http.StatusOK},
		{"cancel without a body", "POST", "/v1/orders/" + orderID + ":cancel", "", http.StatusOK},
		{"cancel with white space for a body", "POST", "/v1/orders/" + orderID + ":cancel", " \t", http.StatusBadRequest},
		{"body not UTF-8", "POST", "/v1/orders", "\xc3\x28", http.StatusBadRequest},
		{"query value not UTF-8", "GET", "/v1/orders?customer_id=%FF", "", http.StatusBadRequest},
		{"path not UTF-8", "GET", "/v1/orders/%FF", "", http.StatusBadRequest},
		{"cancel path not UTF-8", "POST", "/v1/orders/%FF:cancel", "{}", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			r := s.do(t, tt.method, tt.path, body, nil)
			if r.Status != tt.want {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.want, r.Raw)
			}
			if strings.Contains(tt.name, "not UTF-8") && strings.Contains(tt.path, "%FF") {
				want := "customer_id"
				if !strings.Contains(tt.path, "?") {
					want = "order_id"
				}
				if fields := restFields(r.Body); len(fields) != 1 || fields[0] != want {
					t.Fatalf("violations %v, want [%s]: %s", fields, want, r.Raw)
				}
			}
		})
	}
	if c := counts(t, s.env); c.Orders != 2 || c.Outbox != 3 {
		t.Fatalf("rows %+v, want two orders, their creates and one cancel", c)
	}
}
