package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/eventforge/eventforge/api/rpc"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// routes are the REST routes the OpenAPI document declares: a path template
// and its methods. The gateway itself answers an undeclared method on a
// known path with 501; routes answers it with 405 and an Allow header.
type routes []route

type route struct {
	segments []string // "/v1/orders/{order_id}:cancel" → v1, orders, {order_id}:cancel
	methods  []string // upper case, sorted
	// ops are the operations of the methods, by method.
	ops map[string]operation
}

// operation is what the document declares of one method of a route.
type operation struct {
	// input is the request message of the operation's RPC (nil for an
	// operation of no RPC of OrderService).
	input protoreflect.MessageDescriptor
	// query are the names of its query parameters.
	query map[string]bool
}

// declaredRoutes reads the routes of an OpenAPI v2 document.
func declaredRoutes(doc []byte) (routes, error) {
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("reading the routes of the OpenAPI document: %w", err)
	}
	svc := eventforgev1.File_eventforge_v1_orders_proto.Services().ByName("OrderService")
	var rs routes
	for path, ops := range spec.Paths {
		r := route{segments: strings.Split(strings.Trim(path, "/"), "/"), ops: map[string]operation{}}
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
				Parameters  []struct {
					Name string `json:"name"`
					In   string `json:"in"`
				} `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("reading operation %s %s of the OpenAPI document: %w", method, path, err)
			}
			o := operation{query: map[string]bool{}}
			if m := svc.Methods().ByName(protoreflect.Name(strings.TrimPrefix(op.OperationID, string(svc.Name())+"_"))); m != nil {
				o.input = m.Input()
			}
			for _, p := range op.Parameters {
				if p.In == "query" {
					o.query[p.Name] = true
				}
			}
			method = strings.ToUpper(method)
			r.methods = append(r.methods, method)
			r.ops[method] = o
		}
		slices.Sort(r.methods)
		rs = append(rs, r)
	}
	return rs, nil
}

// match reports whether path fits the template: a literal segment is equal,
// "{name}" is any non-empty segment, "{name}:verb" a non-empty segment
// ending in ":verb".
func (r route) match(segments []string) bool {
	if len(segments) != len(r.segments) {
		return false
	}
	for i, tmpl := range r.segments {
		seg := segments[i]
		switch {
		case !strings.HasPrefix(tmpl, "{"):
			if seg != tmpl {
				return false
			}
		default:
			_, verb, hasVerb := strings.Cut(tmpl[strings.IndexByte(tmpl, '}')+1:], ":")
			if hasVerb {
				prefix, ok := strings.CutSuffix(seg, ":"+verb)
				if !ok || prefix == "" {
					return false
				}
			} else if seg == "" {
				return false
			}
		}
	}
	return true
}

// hasVerb reports whether the template's last segment ends in ":verb".
func (r route) hasVerb() bool {
	last := r.segments[len(r.segments)-1]
	return strings.Contains(last[strings.LastIndexByte(last, '}')+1:], ":")
}

// allowed returns the methods declared for path (nil for an unknown path).
// A template with a custom verb is more specific than one without: order
// IDs never hold a colon, so /v1/orders/{id}:cancel is only the cancel
// route.
func (rs routes) allowed(path string) []string {
	segments := strings.Split(strings.Trim(path, "/"), "/")
	var methods, verbMethods []string
	for _, r := range rs {
		switch {
		case !r.match(segments):
		case r.hasVerb():
			verbMethods = append(verbMethods, r.methods...)
		default:
			methods = append(methods, r.methods...)
		}
	}
	if len(verbMethods) > 0 {
		methods = verbMethods
	}
	slices.Sort(methods)
	return slices.Compact(methods)
}

// allowMethods answers a request whose method no route declares for its
// path with 405, an Allow header and a google.rpc.Status body; other
// requests (and unknown paths, which the gateway answers 404) go to next.
func (rs routes) allowMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods := rs.allowed(r.URL.EscapedPath())
		if len(methods) == 0 || slices.Contains(methods, r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		allow := strings.Join(methods, ", ")
		w.Header().Set("Allow", allow)
		writeStatus(w, http.StatusMethodNotAllowed,
			status.New(codes.Unimplemented, fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, allow)))
	})
}

// operation returns the declared operation of a request: the route of its
// path (a custom verb's first, as allowed does) and its method.
func (rs routes) operation(path, method string) (operation, bool) {
	segments := strings.Split(strings.Trim(path, "/"), "/")
	var found *route
	for i, r := range rs {
		if r.match(segments) && (found == nil || r.hasVerb()) {
			found = &rs[i]
		}
	}
	if found == nil {
		return operation{}, false
	}
	op, ok := found.ops[method]
	return op, ok
}

// checkQuery answers with 400 and a BadRequest naming every query
// parameter at fault: one the route does not declare (refused like an
// unknown body field), one given twice for a field that is not a list, or
// a value not in the form /openapi.json describes (out of its integer's
// range, say). Other requests go to next.
func (rs routes) checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		op, ok := rs.operation(r.URL.EscapedPath(), r.Method)
		if !ok || op.input == nil {
			next.ServeHTTP(w, r) // the gateway answers what is not a route
			return
		}
		values, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, status.New(codes.InvalidArgument, "invalid request: the query string is not URL-encoded"))
			return
		}
		keys := slices.Sorted(maps.Keys(values))
		var violations []*errdetails.BadRequest_FieldViolation
		for _, key := range keys {
			fd := op.input.Fields().ByName(protoreflect.Name(key))
			switch {
			case !op.query[key] || fd == nil:
				violations = append(violations, &errdetails.BadRequest_FieldViolation{Field: key, Description: "is not a parameter of this route"})
				continue
			case len(values[key]) > 1 && !fd.IsList():
				violations = append(violations, &errdetails.BadRequest_FieldViolation{Field: key, Description: "must be given once"})
				continue
			}
			for _, v := range values[key] {
				if desc := rpc.QueryValueFault(fd, v); desc != "" {
					violations = append(violations, &errdetails.BadRequest_FieldViolation{Field: key, Description: desc})
					break
				}
			}
		}
		if len(violations) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		writeStatus(w, http.StatusBadRequest, badRequest(violations))
	})
}

// badRequest is the INVALID_ARGUMENT status of violations, worded as the
// service words it.
func badRequest(violations []*errdetails.BadRequest_FieldViolation) *status.Status {
	msg := "invalid request: " + violations[0].GetField() + " " + violations[0].GetDescription()
	if len(violations) > 1 {
		msg += " (and more; see details)"
	}
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: violations}); err == nil {
		st = d
	}
	return st
}

// requireUTF8 answers a request whose path or query, unescaped, is not
// UTF-8 with 400 and a BadRequest naming the parameter: a gRPC string
// cannot hold it, so the gateway would fail to encode the call (a 500).
func (rs routes) requireUTF8(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		field := rs.notUTF8(r.URL.Path)
		if field == "" {
			field = queryNotUTF8(r.URL.RawQuery)
		}
		if field == "" {
			next.ServeHTTP(w, r)
			return
		}
		writeStatus(w, http.StatusBadRequest, badRequest([]*errdetails.BadRequest_FieldViolation{{Field: field, Description: "is not UTF-8"}}))
	})
}

// notUTF8 returns the name of the path parameter whose segment of path is
// not UTF-8 ("path" when no route names it), or "" when path is UTF-8.
func (rs routes) notUTF8(path string) string {
	if utf8.ValidString(path) {
		return ""
	}
	field := "path"
	segments := strings.Split(strings.Trim(path, "/"), "/")
	for _, rt := range rs {
		if !rt.match(segments) {
			continue
		}
		for i, seg := range segments {
			if tmpl := rt.segments[i]; !utf8.ValidString(seg) && strings.HasPrefix(tmpl, "{") {
				field = tmpl[1:strings.IndexByte(tmpl, '}')]
			}
		}
	}
	return field
}

// queryNotUTF8 returns the name of a query parameter whose name or value
// is not UTF-8 (made UTF-8 to be reported), or "".
func queryNotUTF8(rawQuery string) string {
	values, _ := url.ParseQuery(rawQuery) // what does not parse, the gateway refuses
	for key, vals := range values {
		for _, v := range vals {
			if !utf8.ValidString(key) || !utf8.ValidString(v) {
				return strings.ToValidUTF8(key, "\uFFFD")
			}
		}
	}
	return ""
}
