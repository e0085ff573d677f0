package profiling

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestServeAnswersProfileIndexAndStopsWithContext(t *testing.T) {
	lis, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, slog.New(slog.NewTextHandler(io.Discard, nil))) }()

	resp, err := http.Get("http://" + lis.Addr().String() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile: status %d, body %.200q", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
}

func TestEmptyAddressIsOff(t *testing.T) {
	lis, err := Listen("")
	if err != nil || lis != nil {
		t.Fatalf("Listen(\"\") = %v, %v; want nil, nil", lis, err)
	}
	if err := Serve(context.Background(), nil, slog.Default()); err != nil {
		t.Fatalf("Serve(nil) = %v", err)
	}
}

func TestListenRejectsBadAddress(t *testing.T) {
	if _, err := Listen("not-an-address"); err == nil {
		t.Fatal("Listen accepted a malformed address")
	}
}
