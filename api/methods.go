package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// routes are the REST routes the OpenAPI document declares: a path template
// and its methods. The gateway itself answers an undeclared method on a
// known path with 501; routes answers it with 405 and an Allow header.
type routes []route

type route struct {
	segments []string // "/v1/orders/{order_id}:cancel" → v1, orders, {order_id}:cancel
	methods  []string // upper case, sorted
}

// declaredRoutes reads the routes of an OpenAPI v2 document.
func declaredRoutes(doc []byte) (routes, error) {
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("reading the routes of the OpenAPI document: %w", err)
	}
	var rs routes
	for path, ops := range spec.Paths {
		r := route{segments: strings.Split(strings.Trim(path, "/"), "/")}
		for method := range ops {
			if method != "parameters" {
				r.methods = append(r.methods, strings.ToUpper(method))
			}
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
		st := status.New(codes.InvalidArgument, "invalid request: "+field+" is not UTF-8")
		if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: field, Description: "is not UTF-8"},
		}}); err == nil {
			st = d
		}
		writeStatus(w, http.StatusBadRequest, st)
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
