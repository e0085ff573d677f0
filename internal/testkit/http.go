package testkit

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Do sends one HTTP request with body, and a bearer token when token is not
// empty, and returns the response's status, body and header. A request
// that cannot be sent fails the test.
func Do(t testing.TB, method, url, token, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
